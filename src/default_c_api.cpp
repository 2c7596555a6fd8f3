// The C API of the default allocators (the "Default allocators" section of cachalot.h): thin
// wrappers over cachalot/default.hpp and detail/defaults.hpp. Invariant: no exception leaves an
// entry point; every failure is a status plus the thread's last error, prefixed by the name of
// the function. Reading (stats, summary, snapshot) never creates a default allocator: before
// its first use they show zeros, as torch.cuda's do before CUDA is initialized, so that
// configuring stays open.
#include <string>

#include "cachalot/cachalot.h"
#include "cachalot/default.hpp"
#include "cachalot/errors.hpp"
#include "detail/c_error.hpp"
#include "detail/defaults.hpp"
#include "detail/snapshot_json.hpp"
#include "detail/summary.hpp"

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

const char* backend_name(const cachalot::config& cfg) {
  return cfg.backend == cachalot::backend_kind::simulated ? "simulated" : "cuda";
}

void check_device(int device) {
  if (device < 0 || device >= cachalot::max_default_devices) {
    throw cachalot::invalid_argument("device " + std::to_string(device) + " is outside [0, " +
                                         std::to_string(cachalot::max_default_devices) + ")",
                                     __FILE__, __LINE__);
  }
}

// The summary of the default allocator of `device` before its first use: zeros.
std::string summary_before_first_use(int device) {
  const cachalot::config cfg = cachalot::default_allocator_config(device);
  cachalot::detail::summary_facts f;
  f.title = "cachalot memory summary: device " + std::to_string(device) +
            ": no default allocator yet (it is created at the first allocation, on the " +
            backend_name(cfg) + " backend)";
  f.max_split_size = cfg.max_split_size;
  return cachalot::detail::format_summary(f);
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
    if (const cachalot::allocator* a = cachalot::default_allocator_if_created(device)) {
      cachalot::detail::fill_stats(*a, out);
    } else {
      const cachalot::config cfg = cachalot::default_allocator_config(device);
      cachalot::detail::fill_stats(cachalot::memory_stats{}, cfg.max_split_size, out);
    }
  });
}

cachalot_status cachalot_default_memory_summary(int device, char* buf, size_t capacity,
                                                size_t* needed) {
  return guarded("cachalot_default_memory_summary", [&] {
    check_buffer(buf, capacity);
    const cachalot::allocator* a = cachalot::default_allocator_if_created(device);
    cachalot::detail::copy_text(
        a != nullptr ? a->memory_summary() : summary_before_first_use(device), buf, capacity,
        needed);
  });
}

cachalot_status cachalot_default_memory_snapshot(int device, char* buf, size_t capacity,
                                                 size_t* needed) {
  return guarded("cachalot_default_memory_snapshot", [&] {
    check_buffer(buf, capacity);
    if (const cachalot::allocator* a = cachalot::default_allocator_if_created(device)) {
      cachalot::detail::copy_text(cachalot::detail::snapshot_json(*a), buf, capacity, needed);
      return;
    }
    const cachalot::config cfg = cachalot::default_allocator_config(device);
    cachalot::detail::copy_text(
        cachalot::detail::snapshot_to_json(cachalot::memory_snapshot{}, device, backend_name(cfg)),
        buf, capacity, needed);
  });
}

}  // extern "C"
