// The simulated device: a real backend (not a test mock) that models a GPU on the host.
//  - Capacity in bytes; addresses come from a reserved virtual range with nothing behind it, so
//    traces of an 80 GiB GPU replay on a laptop. With host_backing the pages of live segments
//    are readable and writable (tests write and check contents); freed pages are unmapped.
//  - Virtual memory (expandable segments), with the contract of backend.hpp: address ranges
//    are reserved in a second reservation, made at the first reserve_address_range, of
//    vm_address_space bytes (64 x the capacity by default); physical chunks mapped into them
//    count against the capacity together with segments (free = capacity - segment bytes -
//    mapped bytes). With host_backing a mapped chunk is real host memory, zero-filled when
//    mapped, whose content persists until it is unmapped; an unmapped chunk is PROT_NONE
//    again (an access faults) and its pages go back to the host.
//  - Address space: both reservations are PROT_NONE and MAP_NORESERVE, so they cost no memory.
//    Segments: 2 x the capacity, at construction. Virtual memory: vm_address_space, at the
//    first reserve_address_range (by default 64 x the capacity, halved down to 4 x while the
//    host refuses it). Without host backing, a reservation the host refuses (huge capacities,
//    or TSan, whose application address space is about 1 TiB) falls back to synthetic
//    addresses with nothing behind them; with host backing it is an error.
//  - Pinned host memory and copies (sleep and wake of memory pools): allocate_host hands out
//    real host memory with host_backing (else synthetic addresses with nothing behind them, so
//    that a replay can offload a big model), up to host_capacity; copy_to_host and
//    copy_to_device check both spans (the device side mapped chunks or a live segment, the host
//    side one allocation), copy the bytes at once with host_backing (a held stream's queued work
//    is not waited for: the engine synchronizes before it copies) and are priced by cost_copy.
//    A copy on a capturing stream is refused (it would be captured, not run).
//  - Any non-null pointer is a stream handle; nullptr is the default stream.
//  - Events complete at once, unless the stream they are recorded on is held: work "still
//    running" there. release_stream() completes it. synchronize_event() on a held stream waits
//    for that work, which on the simulated device means completing it.
//  - Counters for every call, and fault injection: fail the Nth call of an operation.
//  - A device clock (cachalot/device_cost.hpp): each call is priced by sim_options::cost and
//    the prices add up to the modeled device time (call_stats(), sim_counters::device_ns).
//    map_chunk is priced as cuMemCreate + cuMemMap + cuMemSetAccess, unmap_chunk as cuMemUnmap
//    + cuMemRelease, a segment free (and a pinned host free) with the device synchronization it
//    implies; a call that
//    fails (out of memory, injected) is priced too (only its first driver call for a failed
//    map or unmap), a call refused for misuse or during a capture is not. Time only: the model
//    never changes which addresses or bytes the device hands out.
//  - CUDA graph capture: begin_capture/end_capture on a stream, per-thread capture interaction
//    modes, and the rules of what a capture permits (src/detail/sim_capture.hpp): a forbidden
//    call throws backend_error and invalidates the captures it conflicts with.
// Thread-safe: one internal mutex serializes every call (backends are off the hot path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cachalot/backend.hpp"
#include "cachalot/device_cost.hpp"

namespace cachalot {

/// Operations of the simulated device that can be counted and made to fail.
enum class sim_op : std::uint8_t {
  allocate_segment,       ///< fails by returning nullptr (out of memory)
  free_segment,           ///< fails by throwing backend_error (the segment stays allocated)
  create_event,           ///< fails by throwing backend_error
  record_event,           ///< fails by throwing backend_error
  query_event,            ///< fails by throwing backend_error
  synchronize,            ///< synchronize_event / synchronize_device; throws backend_error
  reserve_address_range,  ///< fails by returning nullptr (address space exhausted)
  release_address_range,  ///< fails by throwing backend_error (the range stays reserved)
  map_chunk,              ///< fails by returning false (out of memory); nothing is mapped
  unmap_chunk,            ///< fails by throwing backend_error (the chunk stays mapped)
  allocate_host,          ///< fails by returning nullptr (out of pinned host memory)
  free_host,              ///< fails by throwing backend_error (the memory stays allocated)
  copy,                   ///< copy_to_host / copy_to_device; throws backend_error, copies nothing
};
/// Number of sim_op values.
inline constexpr std::size_t sim_op_count = 13;

/// Calls made to a simulated device.
struct sim_counters {
  std::uint64_t segment_allocs = 0;         ///< successful allocate_segment calls
  std::uint64_t segment_frees = 0;          ///< successful free_segment calls
  std::uint64_t failed_segment_allocs = 0;  ///< allocate_segment calls that returned nullptr
  std::uint64_t event_creates = 0;          ///< create_event calls
  std::uint64_t event_destroys = 0;         ///< destroy_event calls
  std::uint64_t event_records = 0;          ///< record_event calls
  std::uint64_t event_queries = 0;          ///< query_event calls
  std::uint64_t event_syncs = 0;            ///< synchronize_event calls
  std::uint64_t device_syncs = 0;           ///< synchronize_device calls
  std::uint64_t memory_info_calls = 0;      ///< memory_info calls
  std::uint64_t injected_faults = 0;        ///< calls failed on purpose
  std::uint64_t live_segments = 0;          ///< segments allocated and not yet freed
  std::uint64_t live_events = 0;            ///< events created and not yet destroyed
  std::size_t used_bytes = 0;               ///< bytes in live segments
  std::uint64_t range_reserves = 0;         ///< successful reserve_address_range calls
  std::uint64_t range_releases = 0;         ///< successful release_address_range calls
  std::uint64_t failed_range_reserves = 0;  ///< reserve_address_range calls that returned nullptr
  std::uint64_t chunk_maps = 0;             ///< successful map_chunk calls
  std::uint64_t chunk_unmaps = 0;           ///< successful unmap_chunk calls
  std::uint64_t failed_chunk_maps = 0;      ///< map_chunk calls that returned false
  std::uint64_t live_ranges = 0;            ///< ranges reserved and not yet released
  std::uint64_t live_chunks = 0;            ///< chunks mapped and not yet unmapped
  std::size_t reserved_range_bytes = 0;     ///< address space in live ranges
  std::size_t mapped_bytes = 0;             ///< bytes in mapped chunks (held from the capacity)
  /// The device clock: modeled ns of every call so far (sim_options::cost), the implied
  /// synchronizations of segment frees included; 0 with the cost model off.
  std::uint64_t device_ns = 0;
  /// Device-wide synchronizations implied by segment frees and pinned host frees (one per
  /// successful free or failed free that reached the device).
  std::uint64_t implied_syncs = 0;
  std::uint64_t host_allocs = 0;         ///< successful allocate_host calls
  std::uint64_t host_frees = 0;          ///< successful free_host calls
  std::uint64_t failed_host_allocs = 0;  ///< allocate_host calls that returned nullptr
  std::uint64_t live_host_allocs = 0;    ///< pinned host allocations not yet freed
  std::size_t host_bytes = 0;            ///< bytes of pinned host memory allocated now
  std::uint64_t copies_to_host = 0;      ///< successful copy_to_host calls
  std::uint64_t copies_to_device = 0;    ///< successful copy_to_device calls
  std::size_t copied_bytes = 0;          ///< bytes copied either way
};

/// Options of a simulated device.
struct sim_options {
  std::size_t capacity = std::size_t{80} << 30;  ///< device memory in bytes
  bool host_backing = false;                     ///< make live segments readable and writable
  std::size_t alignment = 512;                   ///< segment base alignment (power of two)
  int device = 0;                                ///< ordinal reported by device()
  /// supports_virtual_memory(); false models a device without it (the VM calls then throw
  /// not_supported).
  bool virtual_memory = true;
  /// Granularity of ranges and chunks: a power of two; with host_backing at least the page size.
  std::size_t vm_granularity = std::size_t{2} << 20;
  /// Address space for all ranges together, rounded up to the granularity; 0 means 64 x the
  /// capacity, halved down to 4 x where the host refuses that much. Reserved (PROT_NONE,
  /// MAP_NORESERVE) at the first reserve_address_range.
  std::size_t vm_address_space = 0;
  /// The cost model that prices every call (config keys cost_model, cost_*); on by default.
  device_cost_model cost{};
  /// Pinned host memory allocate_host may hand out, all allocations together (0: no limit).
  std::size_t host_capacity = 0;
};

/// The simulated device backend. See the file comment.
class simulated_device final : public device_backend {
 public:
  /// @throws invalid_argument for a zero capacity or a bad alignment
  explicit simulated_device(const sim_options& options = {});
  ~simulated_device() override;

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
  /// Counts and modeled time of the calls so far (timing none when sim_options::cost is off).
  device_call_stats call_stats() const override;
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

  /// Marks `stream` busy: events recorded on it from now on stay incomplete until released.
  void hold_stream(stream_t stream);
  /// Completes all work queued on `stream` and ends the hold.
  void release_stream(stream_t stream);
  /// True if `stream` is held.
  bool is_held(stream_t stream) const;

  /// Begins capturing `stream` into a graph from the calling thread (cudaStreamBeginCapture).
  /// @throws invalid_argument for the null stream or a stream that captures already
  void begin_capture(stream_t stream, capture_mode mode = capture_mode::global);
  /// Ends the capture of `stream`: true if it stayed valid (no call it forbids was made).
  /// @throws invalid_argument if `stream` does not capture
  bool end_capture(stream_t stream);
  /// Calls refused so far because of a capture.
  std::uint64_t capture_violations() const;
  bool is_capturing(stream_t stream) override;
  capture_mode exchange_capture_mode(capture_mode mode) override;

  /// Makes the `n`-th next call of `op` fail (1 = the very next one); 0 cancels.
  void fail_nth(sim_op op, std::uint64_t n);
  /// Makes every call of `op` fail until cleared with `fail_always(op, false)`.
  void fail_always(sim_op op, bool on);
  /// Calls of `op` made so far (successful or not).
  std::uint64_t calls(sim_op op) const;

  /// A copy of the counters.
  sim_counters counters() const;
  /// Options the device was made with.
  const sim_options& options() const noexcept;
  /// True if [ptr, ptr + bytes) lies inside one live segment.
  bool is_live(const void* ptr, std::size_t bytes) const;
  /// True if [ptr, ptr + max(bytes, 1)) lies in mapped chunks (one or several adjacent ones).
  bool is_mapped(const void* ptr, std::size_t bytes) const;
  /// True if the device's memory is host-backed (contents can be read and written).
  bool host_backed() const noexcept;
  /// Address space of all virtual-memory ranges together: vm_address_space as resolved (with
  /// the default, less once reserved where the host refused 64 x the capacity).
  std::size_t vm_address_space() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cachalot
