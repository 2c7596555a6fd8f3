// The state of the host-only stand-in device (standin_device.hpp), shared by the three files
// that implement it: standin_device.cpp (the state and the tool's view of it),
// standin_runtime.cpp (the CUDA runtime functions) and standin_driver.cpp (the driver's). Every
// function here is called with the state's mutex held, except state(), unsupported() and
// unsupported_driver(), which take it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "standin_device.hpp"

namespace cachalot::pytorch_peer::detail {

/// Everything the device knows.
struct device_state {
  std::mutex mutex;
  std::size_t capacity = std::size_t{80} << 30;
  std::size_t in_use = 0;
  std::size_t peak = 0;
  std::uintptr_t next_address = std::uintptr_t{1} << 44;    // 16 TiB: far from host addresses
  std::unordered_map<std::uintptr_t, std::size_t> mallocs;  // pointer -> charged bytes
  std::unordered_map<CUmemGenericAllocationHandle, std::size_t> handles;  // -> bytes
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<std::uintptr_t, std::size_t> reservations;  // virtual ranges: start -> bytes
  std::map<std::uintptr_t, std::size_t> mappings;      // mapped pages: start -> bytes
  std::uintptr_t next_object = 0x1000;                 // stream and event handles
  cudaError_t last_error = cudaSuccess;
  int device = 0;
  cachalot::device_cost_model cost;
  standin_counters calls;
};

/// The one device (never destroyed: c10's static destructors may call in at process exit).
device_state& state();
/// `bytes` rounded up to whole pages of standin_granularity.
std::size_t pages(std::size_t bytes);
/// A fresh, never reused address range of `bytes` (at least page-aligned).
std::uintptr_t take_addresses(device_state& s, std::size_t bytes, std::size_t alignment);
/// Charges `bytes` of physical memory; false when the capacity would be exceeded.
bool charge(device_state& s, std::size_t bytes);
/// Counts and prices one call of kind `c` on `bytes` (a segment free also the implied sync).
void price(device_state& s, cachalot::device_call c, std::size_t bytes = 0);
/// A fresh handle for a stream or an event.
void* new_object(device_state& s);
/// Counts a call the stand-in refuses; returns cudaErrorNotSupported.
cudaError_t unsupported(const char* name);
/// The same for a driver call; returns CUDA_ERROR_NOT_SUPPORTED.
CUresult unsupported_driver(const char* name);

}  // namespace cachalot::pytorch_peer::detail
