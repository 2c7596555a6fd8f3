// Framework hooks (cachalot/hooks.h): thin C wrappers over the default allocators. Invariant:
// no exception leaves a hook; every failure stores the thread's last error, and the malloc
// hooks return NULL so that the framework raises its own out-of-memory error.
#include "cachalot/hooks.h"

#include <string>

#include "cachalot/default.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/stats.hpp"
#include "detail/c_error.hpp"

namespace {

using cachalot::allocator;

// Records the failure of `hook` as the thread's last error; returns its C status.
cachalot_status record_failure(const char* hook) noexcept {
  return cachalot::detail::status_of_current_exception(hook);
}

// Frees `ptr` (of `size` bytes, 0: unknown) on `stream` with the allocator of `device` or, if
// that one does not own it, with the default allocator that does. A known size is checked in
// the allocator's checked mode. Throws invalid_pointer when none owns it.
void free_on(void* ptr, std::size_t size, int device, void* stream) {
  auto release = [&](allocator& a) {
    if (size != 0) {
      a.deallocate(ptr, size, stream);
    } else {
      a.deallocate(ptr, stream);
    }
  };
  if (allocator* a = cachalot::default_allocator_if_created(device); a != nullptr) {
    try {
      release(*a);
      return;
    } catch (const cachalot::invalid_pointer&) {  // maybe another device's: look below
    }
  }
  allocator* owner = cachalot::default_allocator_owning(ptr);
  if (owner == nullptr) {
    throw cachalot::invalid_pointer("pointer is not a live allocation of any default allocator",
                                    __FILE__, __LINE__);
  }
  release(*owner);
}

}  // namespace

extern "C" {

void* cachalot_torch_malloc(size_t size, int device, void* stream) {
  try {
    return cachalot::default_allocator(device).allocate(size, stream);
  } catch (...) {
    record_failure("cachalot_torch_malloc");
    return nullptr;
  }
}

void cachalot_torch_free(void* ptr, size_t size, int device, void* stream) {
  if (ptr == nullptr) return;
  try {
    free_on(ptr, size, device, stream);
  } catch (...) {
    record_failure("cachalot_torch_free");
  }
}

void cachalot_torch_record_stream(void* ptr, void* stream) {
  try {
    allocator* owner = cachalot::default_allocator_owning(ptr);
    if (owner == nullptr) {
      throw cachalot::invalid_pointer("pointer is not a live allocation of any default allocator",
                                      __FILE__, __LINE__);
    }
    owner->record_stream(ptr, stream);
  } catch (...) {
    record_failure("cachalot_torch_record_stream");
  }
}

void cachalot_torch_empty_cache(void) {
  try {
    cachalot::empty_default_caches();
  } catch (...) {
    record_failure("cachalot_torch_empty_cache");
  }
}

void* cachalot_cupy_malloc(void* param, size_t size, int device) {
  (void)param;
  try {
    return cachalot::default_allocator(device).allocate(size, nullptr);
  } catch (...) {
    record_failure("cachalot_cupy_malloc");
    return nullptr;
  }
}

void cachalot_cupy_free(void* param, void* ptr, int device) {
  (void)param;
  if (ptr == nullptr) return;
  try {
    free_on(ptr, 0, device, nullptr);
  } catch (...) {
    record_failure("cachalot_cupy_free");
  }
}

cachalot_status cachalot_default_get_stats(int device, cachalot_stats* out) {
  try {
    if (out == nullptr) {
      throw cachalot::invalid_argument("out is NULL", __FILE__, __LINE__);
    }
    return cachalot::detail::fill_stats(cachalot::default_allocator(device).stats(), out);
  } catch (...) {
    return record_failure("cachalot_default_get_stats");
  }
}

cachalot_status cachalot_default_memory_summary(int device, char* buf, size_t capacity,
                                                size_t* needed) {
  try {
    if (buf == nullptr && capacity != 0) {
      throw cachalot::invalid_argument("buf is NULL but capacity is not 0", __FILE__, __LINE__);
    }
    return cachalot::detail::copy_text(cachalot::default_allocator(device).memory_summary(), buf,
                                       capacity, needed);
  } catch (...) {
    return record_failure("cachalot_default_memory_summary");
  }
}

}  // extern "C"
