// The C API of the default allocators (the "Default allocators" section of cachalot.h): thin
// wrappers over cachalot/default.hpp and detail/defaults.hpp. Invariant: no exception leaves an
// entry point; every failure is a status plus the thread's last error, prefixed by the name of
// the function.
#include <string>

#include "cachalot/cachalot.h"
#include "cachalot/default.hpp"
#include "cachalot/errors.hpp"
#include "detail/c_error.hpp"
#include "detail/defaults.hpp"

namespace {

template <class F>
cachalot_status guarded(const char* fn, F&& f) noexcept {
  try {
    f();
    return CACHALOT_SUCCESS;
  } catch (...) {
    return cachalot::detail::status_of_current_exception(fn);
  }
}

void check_buffer(const char* buf, size_t capacity) {
  if (buf == nullptr && capacity != 0) {
    throw cachalot::invalid_argument("buf is NULL but capacity is not 0", __FILE__, __LINE__);
  }
}

void check_device(int device) {
  if (device < 0 || device >= cachalot::max_default_devices) {
    throw cachalot::invalid_argument("device " + std::to_string(device) + " is outside [0, " +
                                         std::to_string(cachalot::max_default_devices) + ")",
                                     __FILE__, __LINE__);
  }
}

}  // namespace

extern "C" {

cachalot_status cachalot_default_configure(const char* config) {
  return guarded("cachalot_default_configure", [&] {
    if (config == nullptr) {
      cachalot::configure_default_allocators_from_environment();
    } else {
      cachalot::configure_default_allocators(config);
    }
  });
}

cachalot_status cachalot_default_set_memory_fraction(int device, double fraction) {
  return guarded("cachalot_default_set_memory_fraction",
                 [&] { cachalot::set_default_memory_fraction(device, fraction); });
}

int cachalot_default_exists(int device) {
  return cachalot::default_allocator_if_created(device) != nullptr ? 1 : 0;
}

cachalot_status cachalot_default_malloc(int device, void** out, size_t size, void* stream) {
  return guarded("cachalot_default_malloc", [&] {
    if (out == nullptr) throw cachalot::invalid_argument("out is NULL", __FILE__, __LINE__);
    *out = nullptr;
    *out = cachalot::detail::default_allocate(device, size, stream);
  });
}

cachalot_status cachalot_default_free(int device, void* ptr, size_t size, void* stream) {
  return guarded("cachalot_default_free",
                 [&] { cachalot::detail::default_free(device, ptr, size, stream); });
}

cachalot_status cachalot_default_record_stream(void* ptr, void* stream) {
  return guarded("cachalot_default_record_stream",
                 [&] { cachalot::detail::default_record_stream(ptr, stream); });
}

cachalot_status cachalot_default_empty_cache(int device) {
  return guarded("cachalot_default_empty_cache", [&] {
    if (device == CACHALOT_ALL_DEVICES) {
      cachalot::empty_default_caches();
      return;
    }
    check_device(device);
    if (cachalot::allocator* a = cachalot::default_allocator_if_created(device)) a->empty_cache();
  });
}

cachalot_status cachalot_default_reset_peak_stats(int device) {
  return guarded("cachalot_default_reset_peak_stats", [&] {
    check_device(device);
    if (cachalot::allocator* a = cachalot::default_allocator_if_created(device)) {
      a->reset_peak_stats();
    }
  });
}

cachalot_status cachalot_default_get_stats(int device, cachalot_stats* out) {
  return guarded("cachalot_default_get_stats", [&] {
    if (out == nullptr) throw cachalot::invalid_argument("out is NULL", __FILE__, __LINE__);
    cachalot::detail::fill_stats(cachalot::default_allocator(device), out);
  });
}

cachalot_status cachalot_default_memory_summary(int device, char* buf, size_t capacity,
                                                size_t* needed) {
  return guarded("cachalot_default_memory_summary", [&] {
    check_buffer(buf, capacity);
    cachalot::detail::copy_text(cachalot::default_allocator(device).memory_summary(), buf, capacity,
                                needed);
  });
}

cachalot_status cachalot_default_memory_snapshot(int device, char* buf, size_t capacity,
                                                 size_t* needed) {
  return guarded("cachalot_default_memory_snapshot", [&] {
    check_buffer(buf, capacity);
    cachalot::detail::copy_text(
        cachalot::detail::snapshot_json(cachalot::default_allocator(device)), buf, capacity,
        needed);
  });
}

}  // extern "C"
