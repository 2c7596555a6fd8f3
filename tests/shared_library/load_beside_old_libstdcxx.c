/* libcachalot.so loaded into a process that already has another libstdc++.so.6, older than the
 * one cachalot was built with (old_libstdcxx.c, linked into this program): the library must
 * load (before, dlopen failed with "version `GLIBCXX_3.4.30' not found"), and its C ABI must
 * work, a C++ exception thrown and caught inside it included (a malformed config). The library
 * path is argv[1]. C99, so that this program brings no C++ runtime of its own. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cachalot/cachalot.h"

int old_libstdcxx_version(void);

/* dlsym's object pointer into a function pointer, as POSIX allows (ISO C has no cast for it). */
static int lookup(void* handle, const char* name, void* fn, size_t size) {
  void* symbol = dlsym(handle, name);
  if (symbol == NULL || size != sizeof symbol) return 0;
  memcpy(fn, &symbol, size);
  return 1;
}
#define LOOKUP(handle, name, fn) lookup(handle, #name, &fn, sizeof fn)

typedef cachalot_status (*cachalot_create_fn)(const char*, cachalot_allocator**);
typedef void (*cachalot_destroy_fn)(cachalot_allocator*);
typedef cachalot_status (*cachalot_malloc_fn)(cachalot_allocator*, void**, size_t, void*);
typedef cachalot_status (*cachalot_free_fn)(cachalot_allocator*, void*, void*);
typedef cachalot_status (*cachalot_get_stats_fn)(cachalot_allocator*, cachalot_stats*);
typedef const char* (*cachalot_last_error_fn)(void);

static int fail(const char* what, const char* why) {
  printf("FAIL: %s: %s\n", what, why ? why : "");
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage", "load_beside_old_libstdcxx LIBCACHALOT");
  printf("this process's libstdc++.so.6: the stand-in for GLIBCXX_3.4.%d\n",
         old_libstdcxx_version());
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return fail("dlopen", dlerror());
  cachalot_create_fn create;
  cachalot_destroy_fn destroy;
  cachalot_malloc_fn cmalloc;
  cachalot_free_fn cfree;
  cachalot_get_stats_fn get_stats;
  cachalot_last_error_fn last_error;
  if (!LOOKUP(h, cachalot_create, create) || !LOOKUP(h, cachalot_destroy, destroy) ||
      !LOOKUP(h, cachalot_malloc, cmalloc) || !LOOKUP(h, cachalot_free, cfree) ||
      !LOOKUP(h, cachalot_get_stats, get_stats) || !LOOKUP(h, cachalot_last_error, last_error)) {
    return fail("dlsym", dlerror());
  }
  cachalot_allocator* a = NULL;
  if (create("backend:simulated,capacity:1GiB", &a) != CACHALOT_SUCCESS) {
    return fail("cachalot_create", last_error());
  }
  void* p = NULL;
  if (cmalloc(a, &p, 1000, NULL) != CACHALOT_SUCCESS || p == NULL) {
    return fail("cachalot_malloc", last_error());
  }
  cachalot_stats s;
  cachalot_stats_init(&s);
  if (get_stats(a, &s) != CACHALOT_SUCCESS) return fail("cachalot_get_stats", last_error());
  if (s.allocated_bytes.all.current != 1024) return fail("stats", "allocated bytes != 1024");
  if (cfree(a, p, NULL) != CACHALOT_SUCCESS) return fail("cachalot_free", last_error());
  destroy(a);
  /* The config parser throws cachalot::invalid_argument; the C shim catches it. */
  cachalot_allocator* bad = NULL;
  if (create("max_split_size_mb:20", &bad) != CACHALOT_ERROR_INVALID_ARGUMENT || bad != NULL) {
    return fail("a malformed config", "not refused with CACHALOT_ERROR_INVALID_ARGUMENT");
  }
  if (strstr(last_error(), "max_split_size") == NULL) return fail("its message", last_error());
  printf("loaded %s beside it: allocate, stats, free and a refused config work (%s)\n", argv[1],
         last_error());
  return 0;
}
