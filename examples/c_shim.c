/* The C API from C99: create an allocator from a config string, allocate and free on two
 * streams, read the counters and the summary, see an error reported, destroy. The config is
 * argv[1] if given, else the default ("backend:auto": a GPU when one exists, else the
 * simulated device). Streams are opaque handles: NULL is the default stream; on the
 * simulated device any pointer value names a stream, on a GPU pass real cudaStream_t. */
#include <stdio.h>
#include <stdlib.h>

#include "cachalot/cachalot.h"

#define CHECK(call)                                                              \
  do {                                                                           \
    cachalot_status st_ = (call);                                                \
    if (st_ != CACHALOT_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s: %s\n", #call, cachalot_status_string(st_), \
              cachalot_last_error());                                            \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const char* config = argc > 1 ? argv[1] : NULL;
  cachalot_allocator* a = NULL;
  void* blocks[16];
  cachalot_stats stats;
  size_t needed = 0;
  char* summary = NULL;
  int local = 0;
  int i;

  cachalot_stats_init(&stats);
  CHECK(cachalot_create(config, &a));
  for (i = 0; i < 16; ++i) {
    CHECK(cachalot_malloc(a, &blocks[i], (size_t)(i + 1) * 100000u, NULL));
  }
  for (i = 0; i < 16; i += 2) CHECK(cachalot_free(a, blocks[i], NULL));
  CHECK(cachalot_get_stats(a, &stats));
  printf("live allocations %llu, allocated %llu B, reserved %llu B, largest free block %llu B\n",
         (unsigned long long)stats.allocations.all.current,
         (unsigned long long)stats.allocated_bytes.all.current,
         (unsigned long long)stats.reserved_bytes.all.current,
         (unsigned long long)stats.largest_free_block);

  /* Errors are statuses plus a per-thread message; nothing is changed by a bad call. */
  if (cachalot_free(a, &local, NULL) == CACHALOT_ERROR_INVALID_POINTER) {
    printf("freeing a foreign pointer: %s\n", cachalot_last_error());
  }

  CHECK(cachalot_memory_summary(a, NULL, 0, &needed));
  summary = (char*)malloc(needed);
  if (summary == NULL) return 1;
  CHECK(cachalot_memory_summary(a, summary, needed, NULL));
  printf("%s\n", summary);
  free(summary);

  for (i = 1; i < 16; i += 2) CHECK(cachalot_free(a, blocks[i], NULL));
  CHECK(cachalot_empty_cache(a));
  CHECK(cachalot_get_stats(a, &stats));
  printf("after empty_cache: reserved %llu B\n",
         (unsigned long long)stats.reserved_bytes.all.current);
  cachalot_destroy(a);
  return stats.reserved_bytes.all.current == 0 ? 0 : 1;
}
