// The device cost model (cachalot/device_cost.hpp): call kinds and their keys, the default
// latencies, the latency arithmetic, the value syntax of the cost keys and the figures' sums and
// JSON form. The defaults are documented with their sources in docs/usage.md ("Device cost
// model"); keep the two in step.
#include "cachalot/device_cost.hpp"

#include <algorithm>
#include <utility>

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"
#include "detail/config_values.hpp"

namespace cachalot {
namespace {

constexpr std::uint64_t us = 1000;
constexpr std::uint64_t ms = 1000 * us;
constexpr std::uint64_t max_part_ns = std::uint64_t{3600} * 1000 * ms;  // one hour
constexpr std::uint64_t gib = std::uint64_t{1} << 30;

struct kind_info {
  const char* name;
  const char* key;
  bool sized;
};

constexpr kind_info kinds[device_call_count] = {
    {"segment_alloc", "cost_segment_alloc", true}, {"segment_free", "cost_segment_free", true},
    {"range_reserve", "cost_range_reserve", true}, {"range_release", "cost_range_release", true},
    {"chunk_create", "cost_chunk_create", true},   {"chunk_map", "cost_chunk_map", true},
    {"chunk_access", "cost_chunk_access", true},   {"chunk_unmap", "cost_chunk_unmap", true},
    {"chunk_release", "cost_chunk_release", true}, {"event_create", "cost_event_create", false},
    {"event_record", "cost_event_record", false},  {"event_query", "cost_event_query", false},
    {"event_sync", "cost_event_sync", false},      {"stream_sync", "cost_stream_sync", false},
    {"device_sync", "cost_device_sync", false},    {"copy", "cost_copy", true},
    {"host_alloc", "cost_host_alloc", true},       {"host_free", "cost_host_free", true},
};

const kind_info& info(device_call c) noexcept {
  return kinds[static_cast<std::size_t>(c)];
}

/// `ns` in the largest of s, ms, us, ns that keeps it whole.
std::string duration_text(std::uint64_t ns) {
  if (ns == 0) return "0";
  static constexpr std::pair<std::uint64_t, const char*> units[] = {
      {1000 * ms, "s"}, {ms, "ms"}, {us, "us"}, {1, "ns"}};
  for (const auto& [factor, unit] : units) {
    if (ns % factor == 0) return detail::format("{}{}", ns / factor, unit);
  }
  return detail::format("{}ns", ns);
}

}  // namespace

const char* device_call_name(device_call c) noexcept {
  return info(c).name;
}

std::string device_call_key(device_call c) {
  return info(c).key;
}

bool device_call_sized(device_call c) noexcept {
  return info(c).sized;
}

bool device_call_is_sync(device_call c) noexcept {
  return c == device_call::event_sync || c == device_call::stream_sync ||
         c == device_call::device_sync;
}

bool device_call_implies_sync(device_call c) noexcept {
  return c == device_call::segment_free || c == device_call::host_free;
}

std::uint64_t call_latency::ns(std::size_t bytes) const noexcept {
  __extension__ typedef unsigned __int128 u128;  // exact: a 64 x 64-bit product fits
  const u128 total = static_cast<u128>(per_gib_ns) * bytes / gib + fixed_ns;
  return total > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(total);
}

bool operator==(const call_latency& a, const call_latency& b) noexcept {
  return a.fixed_ns == b.fixed_ns && a.per_gib_ns == b.per_gib_ns;
}

bool operator!=(const call_latency& a, const call_latency& b) noexcept {
  return !(a == b);
}

// The sources of these figures are in docs/usage.md, "Device cost model" (one row per key).
std::array<call_latency, device_call_count> device_cost_model::defaults() noexcept {
  std::array<call_latency, device_call_count> d{};
  const auto set = [&d](device_call c, std::uint64_t fixed, std::uint64_t per_gib) {
    d[static_cast<std::size_t>(c)] = call_latency{fixed, per_gib};
  };
  set(device_call::segment_alloc, 50 * us, 1 * ms);
  set(device_call::segment_free, 30 * us, ms / 2);
  set(device_call::range_reserve, 12 * us, 0);
  set(device_call::range_release, 12 * us, 0);
  set(device_call::chunk_create, 30 * us, 1 * ms);
  set(device_call::chunk_map, 10 * us, ms / 2);
  set(device_call::chunk_access, 20 * us, 1 * ms);
  set(device_call::chunk_unmap, 20 * us, 1 * ms);
  set(device_call::chunk_release, 20 * us, ms / 2);
  set(device_call::event_create, us / 2, 0);
  set(device_call::event_record, us / 2, 0);
  set(device_call::event_query, 1 * us, 0);
  set(device_call::event_sync, 2 * us, 0);
  set(device_call::stream_sync, 2 * us, 0);
  set(device_call::device_sync, 5 * us, 0);
  set(device_call::copy, 10 * us, 31 * ms);
  set(device_call::host_alloc, 20 * us, 250 * ms);
  set(device_call::host_free, 20 * us, 50 * ms);
  return d;
}

std::string device_cost_model::to_string() const {
  std::string out = enabled ? "cost_model:on" : "cost_model:off";
  const auto d = defaults();
  for (std::size_t i = 0; i < device_call_count; ++i) {
    if (latency[i] == d[i]) continue;
    out += detail::format(",{}:{}", kinds[i].key, format_call_latency(latency[i], kinds[i].sized));
  }
  return out;
}

bool operator==(const device_cost_model& a, const device_cost_model& b) noexcept {
  return a.enabled == b.enabled && a.latency == b.latency;
}

bool operator!=(const device_cost_model& a, const device_cost_model& b) noexcept {
  return !(a == b);
}

call_latency parse_call_latency(std::string_view value, device_call c) {
  const kind_info& k = info(c);
  const std::string_view v = detail::trim(value);
  CACHALOT_EXPECTS(!v.empty(), invalid_argument, "config key '{}': missing value", k.key);
  call_latency out;
  const std::size_t plus = v.find('+');
  if (plus == std::string_view::npos) {
    CACHALOT_EXPECTS(v.find('/') == std::string_view::npos || !k.sized, invalid_argument,
                     "config key '{}': '{}' gives only a size-proportional part; write "
                     "<duration>+<duration>/GiB (e.g. 25us+40us/GiB)",
                     k.key, v);
    CACHALOT_EXPECTS(v.find('/') == std::string_view::npos, invalid_argument,
                     "config key '{}': '{}': this call takes no size, so its latency is one "
                     "duration (e.g. 2us)",
                     k.key, v);
    out.fixed_ns = detail::parse_duration_ns(v, k.key, v, max_part_ns);
    return out;
  }
  CACHALOT_EXPECTS(k.sized, invalid_argument,
                   "config key '{}': '{}': this call takes no size, so its latency is one "
                   "duration (e.g. 2us)",
                   k.key, v);
  const std::string_view per = detail::trim(v.substr(plus + 1));
  const std::size_t slash = per.find('/');
  CACHALOT_EXPECTS(slash != std::string_view::npos &&
                       detail::iequals(detail::trim(per.substr(slash + 1)), "GiB"),
                   invalid_argument,
                   "config key '{}': '{}': the part after '+' must be a duration per GiB (e.g. "
                   "25us+40us/GiB)",
                   k.key, v);
  out.fixed_ns = detail::parse_duration_ns(v.substr(0, plus), k.key, v, max_part_ns);
  out.per_gib_ns = detail::parse_duration_ns(per.substr(0, slash), k.key, v, max_part_ns);
  return out;
}

std::string format_call_latency(const call_latency& latency, bool sized) {
  if (!sized || latency.per_gib_ns == 0) return duration_text(latency.fixed_ns);
  return detail::format("{}+{}/GiB", duration_text(latency.fixed_ns),
                        duration_text(latency.per_gib_ns));
}

const std::array<const char*, device_call_count + 1>& device_cost_keys() noexcept {
  static const std::array<const char*, device_call_count + 1> keys = [] {
    std::array<const char*, device_call_count + 1> k{};
    k[0] = "cost_model";
    for (std::size_t i = 0; i < device_call_count; ++i) k[i + 1] = kinds[i].key;
    return k;
  }();
  return keys;
}

bool apply_cost_key(device_cost_model& model, std::string_view key, std::string_view value) {
  if (key == "cost_model") {
    model.enabled = detail::parse_bool(value, key);
    return true;
  }
  if (key.substr(0, 5) != "cost_") return false;
  for (std::size_t i = 0; i < device_call_count; ++i) {
    if (key == kinds[i].key) {
      model.latency[i] = parse_call_latency(value, static_cast<device_call>(i));
      return true;
    }
  }
  return false;  // an unknown cost_ key: the caller reports it (with a "did you mean")
}

std::uint64_t device_call_stats::total_calls() const noexcept {
  std::uint64_t n = 0;
  for (const std::uint64_t c : calls) n += c;
  return n;
}

std::uint64_t device_call_stats::total_ns() const noexcept {
  std::uint64_t t = implied_sync_ns;
  for (const std::uint64_t v : ns) t += v;
  return t;
}

std::uint64_t device_call_stats::explicit_syncs() const noexcept {
  return calls_of(device_call::event_sync) + calls_of(device_call::stream_sync) +
         calls_of(device_call::device_sync);
}

const char* device_timing_name(device_timing t) noexcept {
  switch (t) {
    case device_timing::modeled:
      return "modeled";
    case device_timing::measured:
      return "measured";
    case device_timing::none:
      break;
  }
  return "none";
}

std::string to_json(const device_call_stats& s) {
  std::string out =
      detail::format(R"({{"timing":"{}","total_ns":{},"calls":{},"syncs":{},"implied_syncs":{},)"
                     R"("implied_sync_ns":{},"by_kind":{{)",
                     device_timing_name(s.timing), s.total_ns(), s.total_calls(), s.syncs(),
                     s.implied_syncs, s.implied_sync_ns);
  for (std::size_t i = 0; i < device_call_count; ++i) {
    out += detail::format(R"({}"{}":{{"calls":{},"ns":{}}})", i == 0 ? "" : ",", kinds[i].name,
                          s.calls[i], s.ns[i]);
  }
  return out + "}}";
}

}  // namespace cachalot
