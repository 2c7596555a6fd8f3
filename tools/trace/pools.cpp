// Memory pools in replays (see pools.hpp): parsing --pool, creating and routing the pools,
// and their figures.
#include "trace/pools.hpp"

#include <charconv>
#include <string>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "trace/replay.hpp"
#include "trace/streams.hpp"

namespace cachalot::tools {
namespace {

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw invalid_argument("--pool " + std::string(text) + ": " + why);
}

std::uintptr_t parse_stream(std::string_view text, std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  std::uintptr_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    bad(text, "STREAM must be a logged stream handle (e.g. 0x7f00 or 0)");
  }
  return v;
}

int parse_priority(std::string_view text, std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    bad(text, "priority must be an integer");
  }
  return v;
}

bool same(const pool_options& a, const pool_options& b) {
  return a.limit == b.limit && a.guarantee == b.guarantee && a.priority == b.priority &&
         a.type == b.type && a.sleepable == b.sleepable && a.sleep_mode == b.sleep_mode;
}

}  // namespace

void add_pool_spec(std::vector<pool_spec>& specs, std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) bad(text, "expected STREAM=NAME[,key:value...]");
  const std::uintptr_t stream = parse_stream(text, text.substr(0, eq));
  std::string_view rest = text.substr(eq + 1);
  const std::size_t comma = rest.find(',');
  pool_options o;
  o.name = std::string(rest.substr(0, comma));
  if (o.name.empty()) bad(text, "the pool needs a NAME");
  rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  while (!rest.empty()) {
    const std::size_t next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    const std::size_t colon = item.find(':');
    const std::string_view key = item.substr(0, colon);
    const std::string_view value =
        colon == std::string_view::npos ? std::string_view{} : item.substr(colon + 1);
    if (key == "graph" && colon == std::string_view::npos) {
      o.type = pool_type::graph;
      o.declares_capture = false;  // a replay captures nothing
    } else if (key == "limit") {
      o.limit = parse_size(value);
    } else if (key == "guarantee") {
      o.guarantee = parse_size(value);
    } else if (key == "priority") {
      o.priority = parse_priority(text, value);
    } else if (key == "sleepable" &&
               (colon == std::string_view::npos || value == "offload" || value == "discard")) {
      o.sleepable = true;
      o.sleep_mode = value == "discard" ? sleep_mode::discard : sleep_mode::offload;
    } else {
      bad(text, "unknown key '" + std::string(key) +
                    "' (limit, guarantee, priority, graph, sleepable[:offload|discard])");
    }
  }
  for (pool_spec& s : specs) {
    if (s.options.name != o.name) continue;
    if (!same(s.options, o) && text.find(',') != std::string_view::npos) {
      bad(text, "pool '" + o.name + "' was given other options before");
    }
    s.streams.push_back(stream);
    return;
  }
  specs.push_back(pool_spec{std::move(o), {stream}});
}

std::vector<pool_id> apply_pools(allocator& a, const std::vector<pool_spec>& specs,
                                 const prepared_trace& trace, const stream_set& streams) {
  std::vector<pool_id> ids;
  for (const pool_spec& spec : specs) {
    ids.push_back(a.create_pool(spec.options));
    for (const std::uintptr_t logged : spec.streams) {
      std::size_t i = 0;
      while (i < trace.streams.size() && trace.streams[i] != logged) ++i;
      if (i == trace.streams.size()) {
        throw invalid_argument("--pool: stream " + std::to_string(logged) + " (0x" +
                               [logged] {
                                 char buf[32];
                                 const auto r = std::to_chars(buf, buf + sizeof buf, logged, 16);
                                 return std::string(buf, r.ptr);
                               }() +
                               ") does not appear in trace " + trace.name);
      }
      a.begin_allocate_to_pool(ids.back(), streams[i]);
    }
  }
  return ids;
}

std::vector<pool_figures> collect_pools(const allocator& a, const std::vector<pool_spec>& specs,
                                        const std::vector<pool_id>& ids) {
  std::vector<pool_figures> out;
  const auto add = [&](pool_id id, const pool_options& o) {
    const memory_stats s = a.stats(id);
    pool_figures f;
    f.name = o.name;
    f.options = o;
    f.ooms = s.num_ooms;
    f.allocations = s.num_allocs;
    f.peak_requested = s.requested_bytes.all.peak;
    f.peak_reserved = s.reserved_bytes.all.peak;
    f.segment_frees = s.num_segment_frees;
    f.sleep = s.sleep;
    out.push_back(std::move(f));
  };
  if (specs.empty()) return out;
  pool_options defaults;
  defaults.name = "default";
  if (a.stats(default_pool).num_allocs + a.stats(default_pool).num_ooms != 0) {
    add(default_pool, defaults);
  }
  for (std::size_t i = 0; i < specs.size(); ++i) add(ids[i], specs[i].options);
  return out;
}

}  // namespace cachalot::tools
