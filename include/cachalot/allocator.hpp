// The caching allocator of one device. Thread-safe: any thread may call anything. Cache hits
// never call the device and take only short, per-stream locks.
//
// Stream rules: a block belongs to the stream it was allocated on. Freed, it is reused at once
// by later work on that stream. If it was used on other streams (record_stream, or a free on a
// stream other than its own), it is reused only after events recorded on each of those streams
// at free time have completed.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cachalot/backend.hpp"
#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/pool.hpp"
#include "cachalot/stats.hpp"
#include "cachalot/types.hpp"

namespace cachalot {

namespace detail {
class engine;
}

/// A caching allocator for one device. Not copyable or movable; hold it by reference or in a
/// smart pointer. Destroying it returns every segment to the device, live allocations included.
class allocator {
 public:
  /// Creates an allocator on the backend named by `cfg.backend`.
  /// @throws invalid_argument for an invalid config, backend_error if the backend cannot start
  explicit allocator(const config& cfg = config{});
  /// Creates an allocator on a given backend (shared so that tests can inspect it).
  allocator(const config& cfg, std::shared_ptr<device_backend> backend);
  ~allocator();
  allocator(const allocator&) = delete;
  allocator& operator=(const allocator&) = delete;

  /// Allocates `bytes` for use on `stream`. Returns nullptr for 0 bytes.
  /// @throws out_of_memory when even a released cache cannot satisfy the request
  void* allocate(std::size_t bytes, stream_t stream = nullptr);
  /// Frees a block on its own stream. nullptr is a no-op.
  /// @throws invalid_pointer for a pointer not allocated here (foreign, interior, freed twice)
  void deallocate(void* ptr);
  /// Frees a block last used on `stream`; if that is not the block's own stream, the block is
  /// reused only after the work queued on `stream` so far has completed.
  /// @throws invalid_pointer as deallocate(void*)
  void deallocate(void* ptr, stream_t stream);
  /// Sized free (PyTorch's and CCCL's frees pass the size): as deallocate(ptr, stream). In
  /// checked mode (config `debug:1`) a `size` other than the one allocate() was given is an
  /// invalid_pointer error that frees nothing; outside checked mode `size` is not checked.
  /// @throws invalid_pointer as deallocate(void*), or for a wrong size in checked mode
  void deallocate(void* ptr, std::size_t size, stream_t stream);
  /// Marks a live block as used by work on `stream` (see the file comment).
  /// @throws invalid_pointer for a pointer that is not a live allocation
  void record_stream(void* ptr, stream_t stream);

  /// Returns every unused cached segment to the device (pending events are completed first).
  void empty_cache();
  /// Returns unused cached segments, largest first, until at most `target_reserved_bytes`
  /// remain reserved (or nothing more can be returned). Returns the bytes released.
  std::size_t trim(std::size_t target_reserved_bytes);
  /// Polls outstanding events and makes blocks whose events completed reusable. Never blocks.
  void process_events();

  /// An exact, consistent copy of the counters.
  memory_stats stats() const;
  /// Sets every peak to its current value.
  void reset_peak_stats();
  /// Every segment and block now.
  memory_snapshot snapshot() const;
  /// A human-readable table of the stats, like torch.cuda.memory_summary().
  std::string memory_summary() const;

  /// Size (rounded) of the live allocation starting at `ptr`.
  /// @throws invalid_pointer if `ptr` is not the start of a live allocation
  std::size_t allocation_size(const void* ptr) const;
  /// True if `ptr` is the start of a live allocation of this allocator.
  bool owns(const void* ptr) const noexcept;

  // --- Memory pools (cachalot/pool.hpp) --------------------------------------------------

  /// Creates a pool with one reference (release_pool drops it).
  /// @throws invalid_argument for a guarantee above the limit, or guarantees that together
  ///         exceed the allocator's memory limit (or the device capacity)
  pool_id create_pool(const pool_options& options);
  /// Adds a reference to a live pool (another graph sharing it).
  /// @throws invalid_argument for an unknown or released pool
  void retain_pool(pool_id pool);
  /// Drops a reference. At zero the pool is released: its routes end, no allocation may target
  /// it any more, its free segments go back to the device now (after any capture under way),
  /// and the others as soon as their blocks are freed (at the next cache miss, trim or
  /// empty_cache). Its stats stay readable.
  /// @throws invalid_argument for the default pool, an unknown or an already released pool
  void release_pool(pool_id pool);
  /// From now on allocations on `stream` go to `pool`, until end_allocate_to_pool(pool). Routes
  /// are searched most recent first; the default pool takes what no route takes.
  /// @throws invalid_argument for an unknown or released pool
  void begin_allocate_to_pool(pool_id pool, stream_t stream);
  /// From now on allocations on every stream `filter` accepts go to `pool` (PyTorch's
  /// beginAllocateToPool). The filter is called on every allocation while the route is active.
  /// @throws invalid_argument for an unknown or released pool, or an empty filter
  void begin_allocate_to_pool(pool_id pool, stream_filter filter);
  /// Ends the most recent route into `pool`.
  /// @throws invalid_argument if `pool` has no active route
  void end_allocate_to_pool(pool_id pool);
  /// Allocates `bytes` from `pool` for use on `stream`, whatever the routes say.
  /// @throws invalid_argument for an unknown or released pool; out_of_memory as allocate()
  void* allocate(std::size_t bytes, stream_t stream, pool_id pool);
  /// The pool a live allocation came from.
  /// @throws invalid_pointer if `ptr` is not the start of a live allocation
  pool_id pool_of(const void* ptr) const;
  /// The counters of one pool, exact and consistent with stats() and snapshot(): the byte and
  /// count stats of the pool's segments with the pool's own peaks; num_ooms and
  /// num_alloc_retries count the pool's requests, num_use_after_free_writes its blocks,
  /// num_streams its streams; num_cache_flushes and num_device_syncs are allocator-wide events
  /// and give the allocator's totals.
  /// @throws invalid_argument for an unknown pool
  memory_stats stats(pool_id pool) const;
  /// Every pool, the default pool first, released ones included.
  std::vector<pool_info> pools() const;

  /// Puts tenant pool `pool` (on expandable segments) to sleep (cachalot/pool.hpp): waits for
  /// the work queued on its memory (an event on each of its streams and on the streams its
  /// blocks were recorded on; never a device-wide synchronization), with sleep_mode::offload
  /// copies the bytes of its live blocks to pinned host memory, then unmaps every chunk of the
  /// pool, so that all its device memory goes back while every block stays allocated at its
  /// address. Until wake(), allocating from the pool and record_stream on its blocks throw
  /// pool_asleep; freeing its blocks is allowed (no device call). Call it when no work that
  /// uses the pool's memory is being queued. Returns false if the pool was asleep already.
  /// @throws invalid_argument for an unknown, released, graph or default pool, or from inside
  ///         one of the pool's own allocations (a callback)
  /// @throws not_supported for a pool on fixed segments (config expandable_segments:1 is
  ///         needed), offload on a backend without host copies, or while a CUDA graph capture
  ///         may be under way
  /// @throws out_of_memory when the pinned host memory for offload cannot be had
  /// @throws backend_error when a device call fails. Every failure leaves the pool awake, its
  ///         contents intact, except a failed unmap: the pool is then asleep and still holds
  ///         that memory (sleep_stats::bytes_held; the message says how much)
  bool sleep(pool_id pool, sleep_mode mode = sleep_mode::offload);
  /// Wakes a sleeping pool: maps new device memory behind its live blocks at the same
  /// addresses (under pressure, releasing other pools' cached memory in priority order as a
  /// growth would) and copies offloaded bytes back, so that every pointer and CUDA graph on the
  /// pool works again. Returns false if the pool was awake.
  /// @throws invalid_argument for an unknown pool
  /// @throws out_of_memory naming the pool when its memory cannot be mapped
  /// @throws not_supported while a CUDA graph capture may be under way
  /// @throws backend_error when a device call fails. Every failure leaves the pool asleep, its
  ///         offloaded bytes kept
  bool wake(pool_id pool);

  /// The config in use (memory_fraction resolved into memory_limit).
  const config& get_config() const noexcept;

  /// An out-of-memory callback (RMM's failure-callback adaptor): called with the size asked for
  /// and its stream when an allocation cannot be served even after the allocator released its
  /// own cache. Return true to retry the allocation (after freeing memory elsewhere), false to
  /// let it fail with out_of_memory.
  using oom_callback = std::function<bool(std::size_t bytes, stream_t stream)>;
  /// Installs `callback` (an empty function removes it); each allocation is retried at most
  /// `max_retries` times. Thread-safe. The callback runs on the allocating thread with no lock
  /// of this allocator held: it may free memory, empty the cache or allocate (an allocation it
  /// makes never calls it again). An exception it throws propagates out of allocate(), which
  /// then has changed nothing. A size that no device or limit could ever hold fails at once,
  /// without calling it.
  void set_oom_callback(oom_callback callback, unsigned max_retries = 8);
  /// The device backend.
  device_backend& backend() const noexcept;

 private:
  std::unique_ptr<detail::engine> engine_;
};

/// Creates the backend a config names (CUDA where built in and a device exists for
/// `automatic`). @throws backend_error or not_supported when it cannot be created
std::shared_ptr<device_backend> make_backend(const config& cfg);

/// True if this build includes the CUDA backend (the CUDA driver API, loaded at run time).
bool cuda_backend_built() noexcept;

/// Number of CUDA devices usable now (0 without a driver or without CUDA support); the first
/// call loads the CUDA driver (see cuda_unavailable_reason()).
int cuda_device_count() noexcept;

/// Why cuda_device_count() is 0, in one sentence for an error message or a log ("" when a
/// device exists): the build has no CUDA backend, the driver library cannot be loaded (with
/// the loader's message), the driver is older than cachalot needs, cuInit failed (with the
/// CUDA error), or the driver sees no device.
std::string cuda_unavailable_reason();

/// The CUDA version of the driver library found, as cuDriverGetVersion reports it (12040 for
/// 12.4; also when that driver was refused as too old), or 0 when no driver library could be
/// loaded or the build has no CUDA backend.
int cuda_driver_version() noexcept;

}  // namespace cachalot
