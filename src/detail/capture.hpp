// Process-wide tracking of the CUDA graph captures that may be under way, and the fence that
// keeps cachalot's capture-unsafe device calls out of them (docs/cuda.md, "What a capture
// permits").
//
// A capture is known from two sources: routes into graph pools that declare one (from
// begin_allocate_to_pool to end_allocate_to_pool, in any allocator of the process), and
// streams a backend reported capturing (observed on a slow path, forgotten once the backend
// says the capture ended). While any is known, no allocator makes a call that a global-mode
// capture forbids, on any stream: no segment free, no event query, synchronization or record;
// segment allocation only in a capture mode that keeps the captures of other threads valid.
//
// Invariant: every such call runs inside a section (a shared lock of the fence) that decided
// on the state it saw; declaring a capture takes the fence exclusively. So when
// begin_allocate_to_pool returns (and the caller begins its capture), no unsafe call is in
// flight and every later one sees the declaration. Sections never nest, and no engine lock is
// held while the fence is taken exclusively.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "cachalot/backend.hpp"

namespace cachalot::detail {

/// The process' capture tracker. Thread-safe; never destroyed.
class capture_tracker {
 public:
  /// The one tracker of the process.
  static capture_tracker& instance();

  /// A stretch of device calls that a capture may forbid: holds the fence shared.
  class section {
   public:
    explicit section(capture_tracker& t) : lock_(t.fence_), underway_(t.underway()) {}
    /// True if a capture may be under way: make no call it forbids.
    bool underway() const noexcept { return underway_; }

   private:
    std::shared_lock<std::shared_mutex> lock_;
    bool underway_;
  };

  /// A route that announces a capture begins: waits until no section is in flight.
  void declare();
  /// That route ended.
  void undeclare() noexcept;
  /// `stream` of `backend` is capturing (it said so): count it until it no longer is.
  void observe(const std::shared_ptr<device_backend>& backend, stream_t stream);
  /// True if a capture may be under way (declared, or observed and still capturing).
  bool underway();
  /// Declared captures now (for tests and summaries).
  std::size_t declared() const noexcept { return declared_.load(std::memory_order_acquire); }

 private:
  struct observed {
    std::weak_ptr<device_backend> backend;
    const device_backend* key;
    stream_t stream;
  };

  std::shared_mutex fence_;
  std::atomic<std::size_t> declared_{0};
  std::mutex observed_mutex_;
  std::vector<observed> observed_;  ///< guarded by observed_mutex_
  std::atomic<std::size_t> observed_count_{0};
};

}  // namespace cachalot::detail
