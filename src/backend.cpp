// Defaults of the optional parts of the backend interface (virtual memory, pinned host memory
// and copies): not supported.
#include "cachalot/backend.hpp"

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot {

void* device_backend::reserve_address_range(std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: virtual memory management is not supported", name());
}

void device_backend::release_address_range(void*, std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: virtual memory management is not supported", name());
}

bool device_backend::map_chunk(void*, std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: virtual memory management is not supported", name());
}

void device_backend::unmap_chunk(void*, std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: virtual memory management is not supported", name());
}

void* device_backend::allocate_host(std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: pinned host memory is not supported", name());
}

void device_backend::free_host(void*, std::size_t) {
  CACHALOT_FAIL(not_supported, "{}: pinned host memory is not supported", name());
}

void device_backend::copy_to_host(void*, const void*, std::size_t, stream_t) {
  CACHALOT_FAIL(not_supported, "{}: host <-> device copies are not supported", name());
}

void device_backend::copy_to_device(void*, const void*, std::size_t, stream_t) {
  CACHALOT_FAIL(not_supported, "{}: host <-> device copies are not supported", name());
}

}  // namespace cachalot
