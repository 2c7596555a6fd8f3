// The device backend interface: the only code in cachalot that talks to a device. It hands out
// and takes back segments, manages events on streams, and reports capacity. Everything above
// it (the caching engine, stats, the C shim) is device-agnostic, which is what lets the whole
// engine be tested, and big-GPU traces be replayed, on a simulated device.
//
// Contract for implementers:
//  - every method may be called from any thread concurrently;
//  - allocate_segment returns nullptr when the device is out of memory and throws
//    backend_error for any other failure; other methods throw backend_error on failure;
//  - the engine never calls a backend on its cache-hit path.
// CUDA graph capture: a backend call made while some stream captures can be illegal (and then
// invalidates the capture); docs/cuda.md "What a capture permits" lists which. The engine may
// widen what is legal on the calling thread with exchange_capture_mode (capture_mode_scope).
#pragma once

#include <cstddef>
#include <string>

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

  /// True while `stream` is being captured into a CUDA graph: the engine then never calls
  /// allocate_segment, free_segment, query_event or a synchronization for it.
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

  // --- Room for the virtual memory API (expandable segments). Optional. ---------------------

  /// True if the backend can reserve address ranges and map physical chunks into them.
  virtual bool supports_virtual_memory() const { return false; }
  /// Granularity of physical chunks for map_chunk (2 MiB on current GPUs).
  virtual std::size_t vm_granularity() const { return 2u << 20; }
  /// Reserves `bytes` of address space with nothing mapped.
  /// @throws not_supported where supports_virtual_memory() is false
  virtual void* reserve_address_range(std::size_t bytes);
  /// Releases a range from reserve_address_range (everything in it must be unmapped).
  virtual void release_address_range(void* base, std::size_t bytes);
  /// Maps `bytes` of new physical memory at `addr`; false when out of memory.
  virtual bool map_chunk(void* addr, std::size_t bytes);
  /// Unmaps and frees the physical memory mapped at [addr, addr + bytes).
  virtual void unmap_chunk(void* addr, std::size_t bytes);
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
