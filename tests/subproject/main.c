/* The parent project's C program: libcachalot.so built as a subproject. */
#include <cachalot/cachalot.h>
#include <cachalot/version.h>
#include <string.h>

int main(void) {
  cachalot_allocator* a = NULL;
  if (strcmp(cachalot_version(), CACHALOT_VERSION_STRING) != 0) return 2;
  if (cachalot_create("backend:simulated,capacity:1GiB", &a) != CACHALOT_SUCCESS) return 1;
  cachalot_destroy(a);
  return 0;
}
