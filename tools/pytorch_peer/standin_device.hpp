// The host-only device behind the CUDA stand-in headers (standin/): one simulated GPU on which
// PyTorch's c10 CUDA caching allocator runs unmodified, without a GPU or a CUDA toolkit.
//
// Invariants: physical bytes in use never exceed the capacity (cudaMalloc and cuMemCreate fail
// with the runtime's and the driver's out-of-memory codes instead); every allocation is charged
// in whole 2 MiB pages (the GPU's mapping granularity); addresses are never dereferenced and never
// reused (one bump pointer hands out cudaMalloc ranges and virtual reservations alike, 2 MiB
// aligned); streams and events complete at once (queries succeed, synchronizations return at
// once) but every call is counted; a call the allocator is not expected to make (IPC, managed
// memory, copies) fails with cudaErrorNotSupported and is counted as unsupported, so that a
// replay that needed one says so instead of passing silently. Every call is priced by cachalot's
// device cost model (cachalot/device_cost.hpp), as cachalot's simulated device prices its own:
// the call PyTorch makes, on the bytes it names (cuMemSetAccess once per range, as PyTorch calls
// it), a refused cudaMalloc or cuMemCreate too, and a cudaFree with the device synchronization it
// implies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cachalot/device_cost.hpp"

namespace cachalot::pytorch_peer {

/// Calls made on the stand-in device, by kind.
struct standin_counters {
  std::uint64_t malloc_calls = 0;         ///< cudaMalloc that succeeded
  std::uint64_t malloc_failures = 0;      ///< cudaMalloc refused for lack of memory
  std::uint64_t free_calls = 0;           ///< cudaFree of a cudaMalloc pointer
  std::uint64_t mem_create = 0;           ///< cuMemCreate that succeeded
  std::uint64_t mem_create_failures = 0;  ///< cuMemCreate refused for lack of memory
  std::uint64_t mem_release = 0;          ///< cuMemRelease
  std::uint64_t mem_map = 0;              ///< cuMemMap
  std::uint64_t mem_unmap = 0;            ///< cuMemUnmap
  std::uint64_t mem_set_access = 0;       ///< cuMemSetAccess
  std::uint64_t address_reserve = 0;      ///< cuMemAddressReserve
  std::uint64_t address_free = 0;         ///< cuMemAddressFree
  std::uint64_t device_syncs = 0;         ///< cudaDeviceSynchronize
  std::uint64_t stream_syncs = 0;         ///< cudaStreamSynchronize
  std::uint64_t event_syncs = 0;          ///< cudaEventSynchronize
  std::uint64_t event_creates = 0;        ///< cudaEventCreate(WithFlags)
  std::uint64_t event_records = 0;        ///< cudaEventRecord
  std::uint64_t event_queries = 0;        ///< cudaEventQuery
  std::uint64_t stream_creates = 0;       ///< cudaStreamCreateWithPriority
  std::uint64_t mem_get_info = 0;         ///< cudaMemGetInfo
  std::uint64_t unsupported = 0;          ///< calls the stand-in refuses (see the file comment)
  std::string first_unsupported;          ///< the name of the first of them
  std::vector<std::size_t> malloc_sizes;  ///< the size of every successful cudaMalloc, in order
  /// Every call priced by cachalot's device cost model (the same model and prices as cachalot's
  /// simulated device): count and modeled ns per kind; a cudaFree also counts the device-wide
  /// synchronization it implies (implied_syncs, implied_sync_ns).
  std::array<std::uint64_t, cachalot::device_call_count> kind_calls{};
  std::array<std::uint64_t, cachalot::device_call_count> kind_ns{};  ///< modeled ns per kind
  std::uint64_t implied_syncs = 0;                                   ///< one per cudaFree
  std::uint64_t implied_sync_ns = 0;                                 ///< their modeled time
  /// All modeled device time in ns.
  std::uint64_t device_ns() const noexcept {
    std::uint64_t total = implied_sync_ns;
    for (const std::uint64_t ns : kind_ns) total += ns;
    return total;
  }
};

/// Sets the device's capacity in bytes and the cost model that prices its calls (before the
/// allocator's first call).
void standin_configure(std::size_t capacity, const cachalot::device_cost_model& cost = {});
/// The capacity in bytes.
std::size_t standin_capacity();
/// Physical bytes in use now (cudaMalloc ranges and cuMemCreate handles, in 2 MiB pages).
std::size_t standin_in_use();
/// The most physical bytes in use at any time.
std::size_t standin_peak_in_use();
/// The calls made so far.
const standin_counters& standin_calls();

/// The mapping granularity: every allocation is charged in pages of this size.
inline constexpr std::size_t standin_granularity = std::size_t{2} << 20;

}  // namespace cachalot::pytorch_peer
