// The host-only stand-in device (see standin_device.hpp): its state and the tool's view of it.
// The CUDA runtime and driver functions it serves are in standin_runtime.cpp and
// standin_driver.cpp.
#include "standin_device.hpp"

#include <algorithm>

#include "standin_state.hpp"

namespace cachalot::pytorch_peer {
namespace detail {

device_state& state() {
  static device_state* s = new device_state;  // never destroyed (see the header)
  return *s;
}

std::size_t pages(std::size_t bytes) {
  return (bytes + standin_granularity - 1) / standin_granularity * standin_granularity;
}

std::uintptr_t take_addresses(device_state& s, std::size_t bytes, std::size_t alignment) {
  const std::size_t align = std::max(alignment, standin_granularity);
  s.next_address = (s.next_address + align - 1) / align * align;
  const std::uintptr_t at = s.next_address;
  s.next_address += pages(std::max<std::size_t>(bytes, 1));
  return at;
}

bool charge(device_state& s, std::size_t bytes) {
  if (bytes > s.capacity - s.in_use) return false;
  s.in_use += bytes;
  s.peak = std::max(s.peak, s.in_use);
  return true;
}

void price(device_state& s, cachalot::device_call c, std::size_t bytes) {
  const auto k = static_cast<std::size_t>(c);
  ++s.calls.kind_calls[k];
  s.calls.kind_ns[k] += s.cost.cost_ns(c, bytes);
  if (c == cachalot::device_call::segment_free) {
    ++s.calls.implied_syncs;
    s.calls.implied_sync_ns += s.cost.cost_ns(cachalot::device_call::device_sync, 0);
  }
}

void* new_object(device_state& s) {
  s.next_object += 0x10;
  return reinterpret_cast<void*>(s.next_object);
}

cudaError_t unsupported(const char* name) {
  device_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.calls.unsupported++ == 0) s.calls.first_unsupported = name;
  s.last_error = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}

CUresult unsupported_driver(const char* name) {
  unsupported(name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace detail

using detail::device_state;
using detail::state;

void standin_configure(std::size_t capacity, const cachalot::device_cost_model& cost) {
  device_state& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.capacity = capacity;
  s.cost = cost;
}

std::size_t standin_capacity() {
  return state().capacity;
}

std::size_t standin_in_use() {
  return state().in_use;
}

std::size_t standin_peak_in_use() {
  return state().peak;
}

const standin_counters& standin_calls() {
  return state().calls;
}

}  // namespace cachalot::pytorch_peer
