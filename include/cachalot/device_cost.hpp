// The device cost model: what each kind of device call costs in time, and the figures of the
// calls a backend made. A device call is never free: a cudaMalloc costs tens of microseconds and
// more for large sizes, a cudaFree synchronizes the whole device, every expandable chunk costs
// cuMemCreate + cuMemMap + cuMemSetAccess. The simulated device prices each call it serves with
// this model and accumulates the prices on a modeled device clock; the CUDA backend measures the
// wall time of each driver call instead. Both report the same figures (device_call_stats), so
// that a replay on the simulated device and a run on a GPU print comparable numbers.
//
// Invariants: the model changes time only, never which bytes a device hands out; a latency is
// fixed + per_gib x bytes / GiB nanoseconds (integer arithmetic, rounded down, saturating); a
// segment free implies a device-wide synchronization (cudaFree and cuMemFree synchronize), and so,
// conservatively, does a pinned host free (docs/usage.md, cost_host_free); the model charges it
// as one device_sync on top of the free and counts it as an implied sync.
//
// Config keys (docs/usage.md, "Device cost model"): `cost_model:on|off` and one key per call
// kind, `cost_<name>` (device_call_name), whose value is a duration ("1.5us") or, for the sized
// calls, `<duration>+<duration>/GiB` ("25us+40us/GiB"). Units: ns, us, ms, s.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cachalot {

/// The kinds of device call the model prices and the stats count (one config key each).
enum class device_call : std::uint8_t {
  segment_alloc,  ///< cuMemAlloc / cudaMalloc (sized)
  segment_free,   ///< cuMemFree / cudaFree (sized; implies a device synchronization)
  range_reserve,  ///< cuMemAddressReserve (sized)
  range_release,  ///< cuMemAddressFree (sized)
  chunk_create,   ///< cuMemCreate (sized)
  chunk_map,      ///< cuMemMap (sized)
  chunk_access,   ///< cuMemSetAccess (sized)
  chunk_unmap,    ///< cuMemUnmap (sized)
  chunk_release,  ///< cuMemRelease (sized)
  event_create,   ///< cuEventCreate
  event_record,   ///< cuEventRecord
  event_query,    ///< cuEventQuery
  event_sync,     ///< cuEventSynchronize (the call itself, nothing queued)
  stream_sync,    ///< cuStreamSynchronize (nothing queued)
  device_sync,    ///< cuCtxSynchronize (nothing queued)
  copy,           ///< a pinned host <-> device copy (sized; for offloading memory)
  host_alloc,     ///< cuMemHostAlloc, pinned host memory (sized; for offloading memory)
  host_free,      ///< cuMemFreeHost (sized; implies a device synchronization)
};

/// Number of device_call values.
inline constexpr std::size_t device_call_count = 18;

/// The call's name, its config key without the "cost_" prefix ("segment_alloc").
const char* device_call_name(device_call c) noexcept;
/// The call's config key ("cost_segment_alloc").
std::string device_call_key(device_call c);
/// True if the call's latency depends on a size: its key takes `<fixed>+<per GiB>/GiB`.
bool device_call_sized(device_call c) noexcept;
/// True for the synchronizations (event_sync, stream_sync, device_sync).
bool device_call_is_sync(device_call c) noexcept;
/// True for the calls that imply a device-wide synchronization (segment_free, host_free).
bool device_call_implies_sync(device_call c) noexcept;

/// The latency of one call of a kind: fixed_ns + per_gib_ns x bytes / GiB nanoseconds.
struct call_latency {
  std::uint64_t fixed_ns = 0;    ///< the part every call pays
  std::uint64_t per_gib_ns = 0;  ///< the part proportional to the size, per GiB (sized calls)

  /// The latency of a call on `bytes` bytes, rounded down, saturated at UINT64_MAX.
  std::uint64_t ns(std::size_t bytes) const noexcept;
};

/// True if both parts are equal.
bool operator==(const call_latency& a, const call_latency& b) noexcept;
/// True if a part differs.
bool operator!=(const call_latency& a, const call_latency& b) noexcept;

/// The cost model: one latency per call kind, and whether the simulated device applies it.
/// Default latencies come from measurements published for datacenter GPUs or are conservative
/// estimates; docs/usage.md cites each one.
struct device_cost_model {
  /// key `cost_model`: the simulated device prices calls (false: it counts them, with no time).
  bool enabled = true;
  /// Latency of each call kind, indexed by device_call (keys `cost_<name>`).
  std::array<call_latency, device_call_count> latency = defaults();

  /// The default latencies (docs/usage.md gives the source of each).
  static std::array<call_latency, device_call_count> defaults() noexcept;
  /// The latency of kind `c`.
  const call_latency& of(device_call c) const noexcept {
    return latency[static_cast<std::size_t>(c)];
  }
  /// The latency of kind `c`, to change it.
  call_latency& of(device_call c) noexcept { return latency[static_cast<std::size_t>(c)]; }
  /// What a call of kind `c` on `bytes` costs: 0 when the model is off.
  std::uint64_t cost_ns(device_call c, std::size_t bytes) const noexcept {
    return enabled ? of(c).ns(bytes) : 0;
  }
  /// The config items of the model: "cost_model:on|off", then `cost_<name>:<value>` for each
  /// latency that differs from its default, in device_call order ("," between items).
  std::string to_string() const;
};

/// True if both models are on or off alike with equal latencies.
bool operator==(const device_cost_model& a, const device_cost_model& b) noexcept;
/// True if they differ.
bool operator!=(const device_cost_model& a, const device_cost_model& b) noexcept;

/// Parses the value of key `cost_<name>` for kind `c`: a duration (digits, an optional
/// fraction, a unit ns, us, ms or s; a bare 0 is accepted) or, for a sized kind,
/// `<duration>+<duration>/GiB`. Each part is rounded to the nearest nanosecond and must be at
/// most one hour. @throws invalid_argument naming the key and the value
call_latency parse_call_latency(std::string_view value, device_call c);

/// The value of `latency` in the syntax parse_call_latency reads back unchanged, in the largest
/// unit that keeps it whole ("25us", "25us+40us/GiB", "0").
std::string format_call_latency(const call_latency& latency, bool sized);

/// Sets what config key `key` names in `model` from `value` if it is a cost-model key
/// (`cost_model` or `cost_<name>`); returns false, changing nothing, for any other key.
/// @throws invalid_argument naming the key for a bad value or an unknown `cost_` key
bool apply_cost_key(device_cost_model& model, std::string_view key, std::string_view value);

/// Every config key of the model: "cost_model", then `cost_<name>` in device_call order.
const std::array<const char*, device_call_count + 1>& device_cost_keys() noexcept;

/// How the time in a device_call_stats was obtained.
enum class device_timing : std::uint8_t {
  none,      ///< no time: the backend keeps no figures, or the cost model is off (counts only)
  modeled,   ///< the cost model's prices (the simulated device)
  measured,  ///< wall time of each driver call, steady clock (the CUDA backend)
};

/// The calls a backend made, by kind, with their time. Counts include calls that failed (the
/// device was asked), and time is what they cost (modeled or measured).
struct device_call_stats {
  device_timing timing = device_timing::none;            ///< where the time comes from
  std::array<std::uint64_t, device_call_count> calls{};  ///< calls made, by device_call
  std::array<std::uint64_t, device_call_count> ns{};     ///< their time in ns, by device_call
  /// Device-wide synchronizations implied by segment frees and pinned host frees (one per free).
  std::uint64_t implied_syncs = 0;
  /// Their time: cost_device_sync each when modeled; 0 when measured (a measured cuMemFree's
  /// wall time already includes the synchronization it waits for).
  std::uint64_t implied_sync_ns = 0;

  /// Calls of kind `c`.
  std::uint64_t calls_of(device_call c) const noexcept {
    return calls[static_cast<std::size_t>(c)];
  }
  /// Time of the calls of kind `c`, in ns.
  std::uint64_t ns_of(device_call c) const noexcept { return ns[static_cast<std::size_t>(c)]; }
  /// Every call of every kind.
  std::uint64_t total_calls() const noexcept;
  /// All device time in ns: every call plus the implied synchronizations.
  std::uint64_t total_ns() const noexcept;
  /// Explicit synchronizations (event, stream and device syncs).
  std::uint64_t explicit_syncs() const noexcept;
  /// Every synchronization: explicit plus implied.
  std::uint64_t syncs() const noexcept { return explicit_syncs() + implied_syncs; }
};

/// The name of a timing ("none", "modeled", "measured").
const char* device_timing_name(device_timing t) noexcept;

/// `s` as one JSON object: {"timing":"modeled","total_ns":N,"calls":N,"syncs":N,
/// "implied_syncs":N,"implied_sync_ns":N,"by_kind":{"segment_alloc":{"calls":N,"ns":N},...}}
/// (every kind, in device_call order).
std::string to_json(const device_call_stats& s);

}  // namespace cachalot
