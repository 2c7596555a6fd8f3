/* Proves cachalot.h compiles as strict C99 and that the C shim links from C. */
#include <stdio.h>
#include <string.h>

#include "cachalot/cachalot.h"
#include "cachalot/version.h"

static int never_retry(size_t bytes, void* stream, void* user_data) {
  (void)bytes;
  (void)stream;
  return user_data != NULL;
}

int main(void) {
  cachalot_allocator* a = NULL;
  void* p = NULL;
  cachalot_stats s;
  cachalot_stats_init(&s);
  if (strcmp(cachalot_version(), CACHALOT_VERSION_STRING) != 0 || CACHALOT_VERSION < 1) return 6;
  if (cachalot_create("backend:simulated,capacity:1GiB", &a) != CACHALOT_SUCCESS) {
    fprintf(stderr, "create failed: %s\n", cachalot_last_error());
    return 1;
  }
  if (cachalot_set_oom_callback(a, never_retry, NULL, 1) != CACHALOT_SUCCESS) return 7;
  if (cachalot_malloc(a, &p, 1000, NULL) != CACHALOT_SUCCESS || p == NULL) return 2;
  if (cachalot_get_stats(a, &s) != CACHALOT_SUCCESS || s.allocated_bytes.all.current != 1024) {
    return 3;
  }
  if (cachalot_free(a, p, NULL) != CACHALOT_SUCCESS) return 4;
  if (cachalot_free(a, p, NULL) != CACHALOT_ERROR_INVALID_POINTER) return 5;
  {
    cachalot_pool_options o = {0};
    cachalot_pool_id pool = CACHALOT_DEFAULT_POOL;
    o.size = sizeof o;
    o.name = "c99";
    o.type = CACHALOT_POOL_TENANT;
    o.limit = (size_t)1 << 26;
    if (cachalot_pool_create(a, &o, &pool) != CACHALOT_SUCCESS) return 6;
    if (cachalot_pool_malloc(a, pool, &p, 1000, NULL) != CACHALOT_SUCCESS) return 7;
    if (cachalot_pool_get_stats(a, pool, &s) != CACHALOT_SUCCESS || s.allocated_bytes.all.current != 1024) {
      return 8;
    }
    if (cachalot_free(a, p, NULL) != CACHALOT_SUCCESS) return 9;
    if (cachalot_pool_release(a, pool) != CACHALOT_SUCCESS) return 10;
  }
  cachalot_destroy(a);
  puts("c99 shim ok");
  return 0;
}
