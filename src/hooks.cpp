// Framework hooks (cachalot/hooks.h): thin C wrappers over the default allocators. Invariants:
// no exception leaves a hook; every failure stores the thread's last error and is printed on
// stderr (out of memory by detail::default_allocate, one line; anything else as an
// error line, each distinct message once), because the frameworks that call these hooks do
// not look at cachalot_last_error(); the malloc hooks then return NULL.
#include "cachalot/hooks.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "cachalot/default.hpp"
#include "cachalot/errors.hpp"
#include "detail/c_error.hpp"
#include "detail/defaults.hpp"
#include "detail/log.hpp"

namespace {

// Inside a catch block: records the failure of `hook` as the thread's last error and prints
// it (out-of-memory errors were printed already). Returns its C status.
// The error is keyed by its message without the hook's name, so that an error printed
// already where it arose (a default allocator that cannot start) is not printed again.
cachalot_status record_failure(const char* hook) noexcept {
  const cachalot_status s = cachalot::detail::status_of_current_exception(hook);
  if (s != CACHALOT_ERROR_OUT_OF_MEMORY) {
    try {
      const std::string message = cachalot_last_error();  // "<hook>: <what>"
      const std::string_view what = std::string_view(message).substr(
          std::min(message.size(), std::char_traits<char>::length(hook) + 2));
      cachalot::detail::log_once(cachalot::detail::log_level::error, message, what);
    } catch (...) {
    }
  }
  return s;
}

}  // namespace

extern "C" {

void* cachalot_torch_malloc(size_t size, int device, void* stream) {
  try {
    return cachalot::detail::default_allocate(device, size, stream);
  } catch (...) {
    record_failure("cachalot_torch_malloc");
    return nullptr;
  }
}

void cachalot_torch_free(void* ptr, size_t size, int device, void* stream) {
  try {
    cachalot::detail::default_free(device, ptr, size, stream);
  } catch (...) {
    record_failure("cachalot_torch_free");
  }
}

void cachalot_torch_record_stream(void* ptr, void* stream) {
  try {
    cachalot::detail::default_record_stream(ptr, stream);
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

void cachalot_torch_set_memory_fraction(double fraction, int device) {
  try {
    cachalot::set_default_memory_fraction(device, fraction);
  } catch (...) {
    record_failure("cachalot_torch_set_memory_fraction");
  }
}

void* cachalot_cupy_malloc(void* param, size_t size, int device) {
  (void)param;
  try {
    return cachalot::detail::default_allocate(device, size, nullptr);
  } catch (...) {
    record_failure("cachalot_cupy_malloc");
    return nullptr;
  }
}

void cachalot_cupy_free(void* param, void* ptr, int device) {
  (void)param;
  try {
    cachalot::detail::default_free(device, ptr, 0, nullptr);
  } catch (...) {
    record_failure("cachalot_cupy_free");
  }
}

}  // extern "C"
