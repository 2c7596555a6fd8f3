// Fault injection for any device backend. A faulty_backend wraps another backend (CUDA or the
// simulated device) and forwards every call to it, except the calls chosen to fail: the Nth
// next call of an operation, or every call while a fault is switched on. A failed call never
// reaches the wrapped backend, so nothing changes on the device: a failed allocate_segment
// allocates nothing, a failed free_segment leaves the segment allocated, a failed map_chunk
// maps nothing, a failed unmap_chunk or release_address_range leaves the chunk mapped or the
// range reserved, a failed free_host leaves the host memory allocated, a failed copy copies
// nothing. Failures follow the backend contract: the calls that can run out (allocate_segment,
// reserve_address_range, map_chunk, allocate_host) report it (nullptr, nullptr, false,
// nullptr) or, in fault_mode::error, throw backend_error; every other operation throws
// backend_error.
// Thread-safe: one mutex guards the plan and the counters; it is never held across a call
// into the wrapped backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cachalot/backend.hpp"

namespace cachalot {

/// Backend operations a faulty_backend can make fail.
enum class fault_op : std::uint8_t {
  allocate_segment,       ///< returns nullptr, or throws in fault_mode::error
  free_segment,           ///< throws backend_error; the segment stays allocated
  create_event,           ///< throws backend_error
  record_event,           ///< throws backend_error
  query_event,            ///< throws backend_error
  synchronize,            ///< synchronize_event and synchronize_device; throw backend_error
  memory_info,            ///< throws backend_error
  reserve_address_range,  ///< returns nullptr (out of address space), or throws in error mode
  release_address_range,  ///< throws backend_error; the range stays reserved
  map_chunk,              ///< returns false (out of memory), or throws in error mode
  unmap_chunk,            ///< throws backend_error; the chunk stays mapped
  allocate_host,          ///< returns nullptr (out of pinned host memory), or throws in error mode
  free_host,              ///< throws backend_error; the memory stays allocated
  copy,                   ///< copy_to_host and copy_to_device; throw backend_error
};
/// Number of fault_op values.
inline constexpr std::size_t fault_op_count = 14;

/// Short, static name of an operation ("allocate_segment", ...).
const char* fault_op_name(fault_op op) noexcept;

/// How a failing allocate_segment, reserve_address_range or map_chunk fails.
enum class fault_mode : std::uint8_t {
  out_of_memory,  ///< returns nullptr, as a device that is full
  error,          ///< throws backend_error, as a device that is broken
};

/// A backend that fails chosen calls of another. See the file comment.
class faulty_backend final : public device_backend {
 public:
  /// @throws invalid_argument if `inner` is null
  explicit faulty_backend(std::shared_ptr<device_backend> inner);

  /// Makes the `n`-th next call of `op` fail (1 = the very next one); 0 cancels.
  void fail_nth(fault_op op, std::uint64_t n);
  /// Makes every call of `op` fail while `on`.
  void fail_always(fault_op op, bool on);
  /// Chooses how allocate_segment fails (out_of_memory by default).
  void set_allocate_mode(fault_mode mode);
  /// Chooses how `op` fails: allocate_segment, reserve_address_range, map_chunk or
  /// allocate_host (out_of_memory by default); the other operations always throw.
  /// @throws invalid_argument for another operation
  void set_mode(fault_op op, fault_mode mode);
  /// Cancels every planned fault.
  void clear();
  /// Calls of `op` made so far, failed ones included.
  std::uint64_t calls(fault_op op) const;
  /// Calls failed on purpose so far.
  std::uint64_t injected() const;
  /// The wrapped backend.
  device_backend& inner() const noexcept { return *inner_; }

  std::string name() const override;
  int device() const override;
  void* allocate_segment(std::size_t bytes, stream_t stream) override;
  void free_segment(void* ptr, std::size_t bytes) override;
  event_t create_event() override;
  void destroy_event(event_t event) override;
  void record_event(event_t event, stream_t stream) override;
  bool query_event(event_t event) override;
  void synchronize_event(event_t event) override;
  void synchronize_device() override;
  device_memory_info memory_info() override;
  /// The wrapped backend's figures (a call failed on purpose never reached it).
  device_call_stats call_stats() const override;
  bool is_capturing(stream_t stream) override;
  capture_mode exchange_capture_mode(capture_mode mode) override;
  std::size_t segment_alignment() const override;
  bool host_accessible() const override;
  bool supports_virtual_memory() const override;
  std::size_t vm_granularity() const override;
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* base, std::size_t bytes) override;
  bool map_chunk(void* addr, std::size_t bytes) override;
  void unmap_chunk(void* addr, std::size_t bytes) override;
  bool supports_host_copies() const override;
  void* allocate_host(std::size_t bytes) override;
  void free_host(void* ptr, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream) override;
  void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream) override;

 private:
  struct plan {
    std::uint64_t calls = 0;
    std::uint64_t fail_at = 0;  // 0: none
    bool always = false;
  };
  /// Counts a call of `op`; true if it must fail.
  bool trip(fault_op op);
  /// Counts a call of `op` and throws backend_error if it must fail.
  void trip_or_throw(fault_op op);
  /// Counts a call of `op` (one that can run out); true if it must fail by running out, throws
  /// backend_error if it must fail in error mode.
  bool trip_soft(fault_op op);

  std::shared_ptr<device_backend> inner_;
  mutable std::mutex mutex_;
  std::array<plan, fault_op_count> plans_{};
  std::uint64_t injected_ = 0;
  std::array<fault_mode, fault_op_count> modes_{};  // out_of_memory (0) by default
};

}  // namespace cachalot
