// Allocator configuration and its string form. The string is a comma-separated list of
// `key:value` pairs, the same syntax as the CACHALOT_CONF environment variable, e.g.
// "backend:simulated,capacity:80GiB,max_split_size:256MiB". docs/usage.md has the reference
// table of every key.
//
// Sizes: a number with a unit, binary (B, KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB:
// powers of 1000), units case-insensitive; a fraction such as 1.5GiB is rounded down to a whole
// byte. The keys that size device memory (capacity, memory_limit, max_split_size, reserve,
// max_cached) need a unit: a bare number there is almost always a mistake (memory_limit:90
// would be 90 bytes), so only a bare 0 is accepted. The size-class keys (granularity,
// small_size, ...) also take bare byte counts. Booleans: 0/1, true/false, on/off, yes/no.
// PyTorch's keys max_split_size_mb (MiB), garbage_collection_threshold, expandable_segments and
// roundup_power2_divisions are accepted with PyTorch's meaning. Durations (the cost_* keys of
// the device cost model) need a unit: ns, us, ms or s ("1.5us"); only a bare 0 has none. An unknown
// key (with a "did you mean"), a missing value, a bad unit, a negative or overflowing number, a key
// given twice and a broken relation between keys are each an invalid_argument naming the key and
// the value.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cachalot/device_cost.hpp"
#include "cachalot/types.hpp"

namespace cachalot {

/// Which device backend an allocator uses.
enum class backend_kind : std::uint8_t {
  automatic,  ///< CUDA where a device exists, else the simulated device
  cuda,       ///< the CUDA runtime (fails where no device or no CUDA support is built in)
  simulated,  ///< the simulated device
};

/// When an allocator gives cached memory back and keeps large blocks whole (config key
/// `release_policy`; docs/design.md, "Release policy").
enum class release_mode : std::uint8_t {
  adaptive,  ///< frugal while memory is plentiful, tight once in-use memory nears the limit
  eager,     ///< always tight: max_split_size and gc_threshold apply at every growth
};

/// How small requests get segments apart from larger ones (config key `size_bands`;
/// docs/design.md, "Size bands").
enum class band_mode : std::uint8_t {
  lazy,   ///< a pool's first segment on a stream is shared; a band gets its own when it must grow
  eager,  ///< small requests always get segments of their own
  off,    ///< no bands: every request of a pool shares its segments (PyTorch's layout)
};

/// Every tunable of an allocator. Defaults follow the well-known PyTorch layout: 512 B
/// granularity, a small pool of 2 MiB segments for requests up to 1 MiB, 20 MiB segments for
/// requests under 10 MiB, and larger requests in segments rounded up to 2 MiB.
struct config {
  backend_kind backend = backend_kind::automatic;  ///< key `backend`: auto|cuda|simulated
  int device = 0;                                  ///< key `device`: device ordinal

  // Simulated device.
  std::size_t capacity = 80 * GiB;  ///< key `capacity`: simulated device memory
  bool host_backing = false;        ///< key `host_backing`: back simulated memory with host pages

  /// The device cost model of the simulated device (cachalot/device_cost.hpp): key
  /// `cost_model` (on|off, default on) and one key per device call kind, `cost_<name>`
  /// (cost_segment_alloc, cost_segment_free, cost_range_reserve, cost_range_release,
  /// cost_chunk_create, cost_chunk_map, cost_chunk_access, cost_chunk_unmap, cost_chunk_release,
  /// cost_event_create, cost_event_record, cost_event_query, cost_event_sync, cost_stream_sync,
  /// cost_device_sync, cost_copy), whose value is a duration with a unit ("1.5us") or, for the
  /// calls that take a size, "<duration>+<duration>/GiB" ("25us+40us/GiB"). It prices the
  /// simulated device's calls on a modeled device clock (memory_stats::device) and changes time
  /// only, never which bytes are handed out. The CUDA backend ignores it and measures each
  /// driver call instead. docs/usage.md gives every default with its source.
  device_cost_model cost{};

  // Size classes.
  std::size_t granularity = 512;              ///< key `granularity`: rounding of every request
  std::size_t small_size = 1 * MiB;           ///< key `small_size`: largest small-pool request
  std::size_t small_segment_size = 2 * MiB;   ///< key `small_segment`: small-pool segment size
  std::size_t large_segment_size = 20 * MiB;  ///< key `large_segment`: segment for mid requests
  std::size_t mid_size_limit = 10 * MiB;      ///< key `mid_size`: requests below get a
                                              ///< `large_segment_size` segment
  std::size_t segment_rounding = 2 * MiB;     ///< key `segment_rounding`: rounding of big segments
  std::size_t small_split_remainder = 512;    ///< key `small_split_min`: smallest small remainder
  std::size_t large_split_remainder = 1 * MiB;  ///< key `large_split_min`: a large block is split
                                                ///< only when more than this remains

  /// key `max_split_size` (PyTorch: `max_split_size_mb`, in MiB): blocks at least this big are
  /// never split, and requests below it never take them, so that large cached segments stay
  /// whole for large requests (and can be given back whole under memory pressure). SIZE_MAX
  /// ("none" in strings) means every block may be split. Must be larger than
  /// `large_segment_size` and `small_segment_size`. Default 32 MiB (PyTorch's default is none;
  /// docs/benchmarks.md has the replays that chose it). Ignored with expandable segments.
  std::size_t max_split_size = 32 * MiB;

  /// key `memory_limit`: most bytes the allocator may reserve; 0 ("none") means no limit. With
  /// caching on it must hold a small and a large segment. A value in percent ("90%", "12.5%")
  /// sets memory_fraction instead.
  std::size_t memory_limit = 0;
  /// key `memory_fraction`: the memory limit as a fraction of the device capacity, in (0, 1]
  /// (0 = not set), resolved into memory_limit when the allocator starts. It names the same
  /// setting as memory_limit: a string may give only one of them.
  double memory_fraction = 0.0;

  /// key `gc_threshold` (PyTorch: `garbage_collection_threshold`): when a new segment would
  /// take reserved memory above this fraction of the memory limit (or of the device), cached
  /// segments that nothing fits in are returned first, largest first, only as many as needed. 0
  /// ("off") turns it off (then the cache is released only when the device refuses a segment).
  /// Like PyTorch's garbage_collection_threshold, it keeps reserved memory close to what is in
  /// use when memory is tight.
  double gc_threshold = 0.9;

  /// key `release_policy`: `adaptive` (the default) applies max_split_size and gc_threshold
  /// (with expandable segments: unmaps cached chunks before a growth) only once the high-water
  /// mark of in-use bytes has passed `pressure_threshold` of the memory limit (or of the
  /// device); before that the cache keeps what it has and splits every block, so a job that
  /// fits makes as few device calls as a cache that never releases. `eager` applies them at
  /// every growth. Either way a growth the device or the limit refuses releases cached memory
  /// and retries.
  release_mode release_policy = release_mode::adaptive;
  /// key `size_bands`: small-pool requests under 1/32 of a small segment (64 KiB) and large-pool
  /// requests under `segment_rounding` (2 MiB) form a lower band of their pool, kept in segments
  /// apart so that small long-lived blocks cannot pin the segments of larger ones. `lazy` (the
  /// default): a lower band is served by its pool's segments until it must grow while its pool
  /// already has a segment on that stream; then (and while it has any) it has segments of its
  /// own. With expandable segments of one-granule chunks `lazy` opens the bands at once, as
  /// `eager` does (a band's range reserves only address space); with a `large_chunk` above a
  /// granule, lazily. `eager`: a lower band always has segments of its own
  /// (one more fixed segment per pool and stream at least). `off`: no bands (PyTorch's layout).
  band_mode size_bands = band_mode::lazy;
  /// key `pressure_threshold`: with `release_policy:adaptive`, the fraction of the memory limit
  /// (or of the device) in-use bytes must have exceeded for the policy to turn tight, in (0, 1];
  /// 1 keeps it relaxed unless in-use bytes exceed the whole limit (never).
  double pressure_threshold = 0.9;

  /// Number of request-size intervals of `roundup_power2_divisions`: [0, 2 MiB), [2, 4 MiB),
  /// [4, 8 MiB), ..., [16, 32 GiB), [32 GiB, ...), as in PyTorch.
  static constexpr std::size_t roundup_intervals = 16;

  /// key `roundup_power2_divisions` (PyTorch's): for requests in interval i (see
  /// roundup_intervals), a value d > 1 rounds a request up to the next of d equal steps between
  /// the powers of two around it (1200 B with 4 divisions: 1280 B), so that many distinct
  /// dynamic sizes become few reusable ones; a request of at most `granularity` x d bytes, and a
  /// value of 0 or 1, keep the plain granularity rounding. Strings: "4" (every interval) or
  /// "[256:1,512:2,>:4]" (boundaries in MiB, powers of two: an entry B:d sets the interval of
  /// requests in [B, 2B) MiB, the first entry also every interval below it, ">:d" every interval
  /// after the last entry; an interval not covered keeps 0). All zero (the default): off.
  std::array<std::uint32_t, roundup_intervals> roundup_power2_divisions{};

  /// key `expandable_segments` (PyTorch's name): each stream and pool grows one segment in
  /// place, a virtual address range whose physical chunks (of the backend's vm_granularity) are
  /// mapped on demand and unmapped when memory is released, holes in the middle included.
  /// Needs a backend with virtual memory (else the allocator fails to start with
  /// not_supported); ignored in pass-through mode (caching:0). Default off (docs/design.md).
  bool expandable_segments = false;
  /// key `large_chunk`: with expandable segments, the bytes one mapping of a large-pool segment
  /// covers (one create, map and set-access; unmapped only whole), a multiple of the device's
  /// virtual-memory granularity. `granule` (0, the default): one granule (2 MiB on CUDA GPUs),
  /// as small-pool segments always map. `20MiB` is PyTorch's page of a large expandable segment:
  /// on the bundled traces about a tenth of the chunk maps, for a smallest device up to 8 %
  /// larger (docs/benchmarks.md, "Size bands, lazy, and large chunks").
  std::size_t large_chunk = 0;

  /// key `reserve`: bytes taken from the device in one call when the allocator starts (RMM's
  /// initial pool size). Segments of every stream and pool are then carved from it without a
  /// device call, and a released segment goes back to it; the reserve itself is returned only
  /// when the allocator is destroyed. It counts against memory_limit. 0: none.
  std::size_t reserve = 0;

  /// key `max_cached` (CUB's max_cached_bytes): most bytes the cache may keep in wholly free
  /// (idle) segments; a free that takes idle bytes above it returns whole free segments to the
  /// device, largest first. SIZE_MAX ("none", the default): no cap; 0: keep no idle segment.
  std::size_t max_cached = SIZE_MAX;

  /// key `thread_cache`: blocks each thread may keep aside per stream after freeing them, so
  /// that threads sharing a stream reuse their own blocks without a shared lock (0 to 64; 0:
  /// off). Such blocks are free in the stats; stats, snapshots, empty_cache, trim, growth and
  /// the out-of-memory path take them back. Ignored in checked and pass-through modes and with
  /// max_cached; memory pools other than the default do not use it.
  std::uint32_t thread_cache = 16;
  /// key `thread_cache_max_size`: largest block the thread cache keeps (a size with a unit).
  std::size_t thread_cache_max_size = std::size_t{1} << 20;

  /// key `trace_file`: write every allocate and free to this CSV (RMM log format); empty: off.
  /// `%d` in the path is replaced by the device ordinal (one file per device, e.g. for the
  /// process-wide default allocators), `%%` by a percent sign; no other `%` is allowed.
  std::string trace_file;
  /// key `debug`: checked mode (extra validation of every free).
  bool debug = false;
  /// key `caching`: false gives pass-through mode (every allocation its own segment).
  bool caching = true;

  /// Parses a config string; nullptr-equivalent empty string gives the defaults.
  /// @throws invalid_argument naming the offending key or value
  static config parse(std::string_view text);

  /// Parses the CACHALOT_CONF environment variable (defaults where unset).
  /// @throws invalid_argument as parse()
  static config from_environment();

  /// Checks every field and the relations between fields (sizes are multiples of the
  /// granularity, small segments stay below max_split_size, ...).
  /// @throws invalid_argument naming the offending field
  void validate() const;

  /// The config in string form; `parse(to_string())` gives back an equal config. Only one of
  /// memory_limit and memory_fraction may be set for that (an allocator's get_config() keeps
  /// the resolved limit in bytes).
  std::string to_string() const;

  /// The trace file of `device`: trace_file with `%d` replaced by the ordinal and `%%` by `%`.
  std::string trace_path(int device) const;

  /// The divisions that apply to a request of `bytes` (roundup_power2_divisions).
  std::uint32_t divisions_for(std::size_t bytes) const noexcept;
};

/// True if every field of `a` equals that of `b`.
bool operator==(const config& a, const config& b) noexcept;
/// True if some field differs.
bool operator!=(const config& a, const config& b) noexcept;

/// Parses a size such as "512", "4KiB", "2 MiB", "1.5GiB", "80GB" (decimal units are powers of
/// 1000; a fraction is rounded down to a whole byte).
/// @throws invalid_argument on a bad number, a negative one, a bad unit or an overflow
std::size_t parse_size(std::string_view text);

/// PyTorch's rounding of a request (roundup_power2_divisions): `bytes` rounded up to the next
/// multiple of 2^floor(log2(bytes)) / `divisions` (a power of two rounded down), or to
/// `granularity` when `divisions` < 2 or `bytes` <= granularity x divisions (or above
/// SIZE_MAX / 2, which no device holds). `granularity` is a power of two.
std::size_t round_request(std::size_t bytes, std::size_t granularity,
                          std::uint32_t divisions) noexcept;

/// Formats a byte count for people: "512 B", "1.50 MiB", "80.00 GiB".
std::string format_bytes(std::size_t bytes);

}  // namespace cachalot
