// Defaults of the optional virtual-memory part of the backend interface: not supported.
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

}  // namespace cachalot
