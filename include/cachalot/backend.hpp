// The device backend interface: the only code in cachalot that talks to a device. It hands out
// and takes back segments, manages events on streams, and reports capacity. Everything above
// it (the caching engine, stats, the C shim) is device-agnostic, which is what lets the whole
// engine be tested, and big-GPU traces be replayed, on a simulated device.
//
// Contract for implementers:
//  - every method may be called from any thread concurrently;
//  - allocate_segment returns nullptr when the device is out of memory (map_chunk false,
//    reserve_address_range nullptr when out of address space) and throws backend_error for
//    any other failure; other methods throw backend_error on failure;
//  - the engine never calls a backend on its cache-hit path.
// CUDA graph capture: a backend call made while some stream captures can be illegal (and then
// invalidates the capture); docs/cuda.md "What a capture permits" lists which. The engine may
// widen what is legal on the calling thread with exchange_capture_mode (capture_mode_scope).
#pragma once

#include <cstddef>
#include <string>

#include "cachalot/device_cost.hpp"
#include "cachalot/types.hpp"

namespace cachalot {

/// Device memory figures.
struct device_memory_info {
  std::size_t total = 0;  ///< device capacity in bytes
  std::size_t free = 0;   ///< bytes the device can still hand out
};

/// How the calling thread's driver calls interact with CUDA graph captures in progress (CUDA's
/// stream capture interaction mode, cuThreadExchangeStreamCaptureMode). A "potentially unsafe"
/// call (cudaMalloc, an event query, ...) made while it is prohibited fails and invalidates the
/// capture it conflicts with; calls that necessarily conflict with a capture (a synchronization
/// of a capturing stream, a query of an event recorded in a capture) fail in every mode.
enum class capture_mode : int {
  /// CUDA's default: prohibited while this thread captures (unless in relaxed mode) or while any
  /// other thread captures in global mode.
  global = 0,
  /// Prohibited only while this thread itself captures (unless in relaxed mode); captures of
  /// other threads are ignored.
  this_thread = 1,
  /// Never prohibited.
  relaxed = 2,
};

/// Abstract device: segments, events and capacity. See the file comment for the contract.
class device_backend {
 public:
  virtual ~device_backend() = default;
  device_backend() = default;
  device_backend(const device_backend&) = delete;
  device_backend& operator=(const device_backend&) = delete;

  /// Human-readable backend name ("cuda", "simulated").
  virtual std::string name() const = 0;
  /// Device ordinal this backend serves.
  virtual int device() const = 0;

  /// Allocates a segment of exactly `bytes` bytes, usable by work on `stream`.
  /// @return the segment's base address, or nullptr when the device is out of memory
  /// @throws backend_error on any other failure
  virtual void* allocate_segment(std::size_t bytes, stream_t stream) = 0;
  /// Returns a segment obtained from allocate_segment. May synchronize the device.
  virtual void free_segment(void* ptr, std::size_t bytes) = 0;

  /// Creates an event (events are pooled by the engine, so this is rare).
  virtual event_t create_event() = 0;
  /// Destroys an event created by create_event.
  virtual void destroy_event(event_t event) = 0;
  /// Records `event` on `stream`: it completes when the work queued so far on `stream` ends.
  virtual void record_event(event_t event, stream_t stream) = 0;
  /// True when the work before the event's last record has completed. Never blocks.
  virtual bool query_event(event_t event) = 0;
  /// Blocks until the event has completed.
  virtual void synchronize_event(event_t event) = 0;
  /// Blocks until all work on the device has completed.
  virtual void synchronize_device() = 0;

  /// Capacity and free memory of the device.
  virtual device_memory_info memory_info() = 0;

  /// The calls made to this backend so far, by kind, with their time: the cost model's prices
  /// on the simulated device, the measured wall time of each driver call on CUDA
  /// (cachalot/device_cost.hpp). Counts every caller of the backend, not one allocator. Backends
  /// that keep no figures return zeros with timing none. Never called on the hot path.
  virtual device_call_stats call_stats() const { return {}; }

  /// True while `stream` is being captured into a CUDA graph: the engine then never calls
  /// allocate_segment, free_segment, map_chunk, unmap_chunk, query_event or a synchronization
  /// for it.
  virtual bool is_capturing(stream_t stream) { return (void)stream, false; }

  /// Sets the calling thread's capture interaction mode and returns the previous one, so that
  /// the caller can restore it (see capture_mode_scope). Backends without graph capture: no
  /// effect, returns capture_mode::global. Never called on the hot path.
  /// @throws backend_error when the driver refuses
  virtual capture_mode exchange_capture_mode(capture_mode mode) {
    return (void)mode, capture_mode::global;
  }

  /// Alignment every segment base is guaranteed to have.
  virtual std::size_t segment_alignment() const { return 256; }

  /// True if the host may read and write segment memory directly (the simulated device with
  /// host backing). Checked mode then poisons free blocks to catch writes after free.
  virtual bool host_accessible() const { return false; }

  // --- Virtual memory (expandable segments). Optional. ---------------------------------------
  // Contract, the same on every backend that supports it (the simulated device, CUDA):
  //  - G = vm_granularity(), a power of two. Every size passed below is a nonzero multiple of
  //    G and every address is G-aligned; reserve_address_range returns G-aligned bases.
  //  - A range is address space only: nothing is mapped in it when reserved, it costs no
  //    device memory, and the device may access none of it until chunks are mapped.
  //  - map_chunk(addr, bytes) creates ONE physical allocation of `bytes` and maps it at
  //    [addr, addr + bytes), readable and writable by the backend's device (and by the peer devices
  //    the backend was given). The span lies inside one reserved range and overlaps no mapped
  //    chunk. The chunk counts against the device's memory (memory_info().free), like a segment.
  //    Its content is unspecified when mapped and persists until it is unmapped. Out of device
  //    memory: returns false with nothing mapped.
  //  - unmap_chunk(addr, bytes) takes back exactly one earlier map_chunk, the same addr and
  //    bytes: chunks are never split or merged (CUDA cannot unmap part of a mapping). The
  //    physical memory is freed; the range stays reserved and the span can be mapped again. The
  //    caller makes sure that no queued device work still uses the chunk (the backend need not
  //    wait for it, though it may synchronize).
  //  - release_address_range(base, bytes) releases exactly one range from reserve_address_range,
  //    the same base and bytes, with no chunk mapped in it.
  //  - Misuse (a size or address off the granularity, a span outside every range or across
  //    its end, an overlap, an unmap that is not exactly one mapped chunk, a release that is not
  //    exactly one range or has chunks mapped) throws backend_error naming what is wrong and
  //    changes nothing: it is how engine bugs are caught. Any other failure also throws
  //    backend_error and changes nothing (a failed map leaves nothing mapped, a failed unmap
  //    leaves the chunk mapped, a failed release leaves the range reserved).
  //  - Where supports_virtual_memory() is false, the four calls throw not_supported.

  /// True if the backend can reserve address ranges and map physical chunks into them.
  virtual bool supports_virtual_memory() const { return false; }
  /// Granularity G of ranges and chunks, a power of two (2 MiB on current GPUs).
  virtual std::size_t vm_granularity() const { return 2u << 20; }
  /// Reserves `bytes` (a multiple of G) of G-aligned address space with nothing mapped.
  /// @return the range's base, or nullptr when the address space is exhausted
  /// @throws backend_error on misuse or any other failure; not_supported without VM support
  virtual void* reserve_address_range(std::size_t bytes);
  /// Releases exactly one range from reserve_address_range; nothing may be mapped in it.
  /// @throws backend_error on misuse (range still mapped, not a range) or any other failure
  virtual void release_address_range(void* base, std::size_t bytes);
  /// Maps one new physical allocation of `bytes` at `addr`, inside a range, over no mapping.
  /// @return false, with nothing mapped, when the device is out of memory
  /// @throws backend_error on misuse or any other failure
  virtual bool map_chunk(void* addr, std::size_t bytes);
  /// Unmaps and frees exactly one chunk mapped by map_chunk(addr, bytes).
  /// @throws backend_error on misuse (not exactly one chunk) or any other failure
  virtual void unmap_chunk(void* addr, std::size_t bytes);

  // --- Pinned host memory and copies (sleep and wake of memory pools). Optional. -------------
  // Contract, the same on every backend that supports it (the simulated device, CUDA):
  //  - allocate_host(bytes) returns page-locked ("pinned") host memory of `bytes` (> 0) bytes
  //    that the host may read and write and that copies on a stream may use without staging;
  //    nullptr when the host cannot pin that much. free_host(ptr, bytes) takes back exactly one
  //    allocate_host, the same ptr and bytes; it may synchronize the device (the cost model
  //    assumes it does: docs/usage.md, cost_host_free), so the engine calls it rarely.
  //  - copy_to_host(dst, src, bytes, stream) queues a copy of `bytes` from device memory at
  //    `src` (inside one mapped chunk run or one live segment) to pinned host memory at `dst`
  //    (inside one allocate_host) behind the work queued so far on `stream`; copy_to_device the
  //    other way. The copy is complete once an event recorded on `stream` after it completes:
  //    the caller records and waits for one before it reads, frees or unmaps either side.
  //  - Misuse (null pointers, a size of 0, a host span outside every allocate_host, a device
  //    span that is not mapped) throws backend_error naming what is wrong and changes nothing;
  //    any other failure also throws backend_error (a failed free leaves the memory allocated, a
  //    failed copy may have copied part of the bytes: the caller treats the destination as
  //    undefined).
  //  - Where supports_host_copies() is false, the four calls throw not_supported.

  /// True if the backend can allocate pinned host memory and copy between it and the device.
  virtual bool supports_host_copies() const { return false; }
  /// Allocates `bytes` (> 0) of pinned host memory.
  /// @return the memory, or nullptr when the host cannot pin that much
  /// @throws backend_error on misuse or any other failure; not_supported without support
  virtual void* allocate_host(std::size_t bytes);
  /// Frees memory from allocate_host(bytes). May synchronize the device.
  /// @throws backend_error on misuse or any other failure (the memory then stays allocated)
  virtual void free_host(void* ptr, std::size_t bytes);
  /// Queues a copy of `bytes` from device memory `src` to pinned host memory `dst` on `stream`.
  /// @throws backend_error on misuse or any other failure
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream);
  /// Queues a copy of `bytes` from pinned host memory `src` to device memory `dst` on `stream`.
  /// @throws backend_error on misuse or any other failure
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream);
};

/// Sets the calling thread's capture interaction mode for a scope and restores the previous
/// mode at its end (device_backend::exchange_capture_mode). Not copyable.
class capture_mode_scope {
 public:
  /// @throws backend_error when the mode cannot be set
  capture_mode_scope(device_backend& backend, capture_mode mode)
      : backend_(backend), previous_(backend.exchange_capture_mode(mode)) {}
  /// Restores the previous mode; never throws.
  ~capture_mode_scope() {
    try {
      (void)backend_.exchange_capture_mode(previous_);
    } catch (...) {  // the driver is going away: nothing left to restore
    }
  }
  capture_mode_scope(const capture_mode_scope&) = delete;
  capture_mode_scope& operator=(const capture_mode_scope&) = delete;

 private:
  device_backend& backend_;
  capture_mode previous_;
};

}  // namespace cachalot
