/* Consumer of an installed libcachalot.so through the C API. */
#include <cachalot/cachalot.h>
#include <cachalot/version.h>
#include <string.h>

int main(void) {
  cachalot_allocator* a = NULL;
  void* p = NULL;
  if (strcmp(cachalot_version(), CACHALOT_VERSION_STRING) != 0) return 4;
  if (cachalot_create("backend:simulated,capacity:1GiB", &a) != CACHALOT_SUCCESS) return 1;
  if (cachalot_malloc(a, &p, 100, NULL) != CACHALOT_SUCCESS) return 2;
  if (cachalot_free(a, p, NULL) != CACHALOT_SUCCESS) return 3;
  cachalot_destroy(a);
  return 0;
}
