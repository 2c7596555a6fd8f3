// Memory snapshots as JSON (detail/snapshot_json.hpp). Numbers are unsigned decimal integers;
// the only string that comes from outside, the backend name, is escaped. The layout is the one
// documented at cachalot_memory_snapshot (cachalot.h); the Python package turns it into the
// layout of torch.cuda.memory_snapshot().
#include "detail/snapshot_json.hpp"

#include "detail/format.hpp"

#include <cstdint>

namespace cachalot::detail {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out + '"';
}

const char* state_name(block_state s) {
  switch (s) {
    case block_state::allocated:
      return "allocated";
    case block_state::pending:
      return "pending";
    case block_state::unmapped:
      return "unmapped";
    case block_state::free:
      break;
  }
  return "free";
}

void append_segment(std::string& out, const segment_info& seg) {
  out += fmt::format(
      R"({{"address":{},"size":{},"range_size":{},"expandable":{},"stream":{},"pool":"{}",)"
      R"("memory_pool":{},"asleep":{},"blocks":[)",
      seg.address, seg.size, seg.range_size, seg.expandable ? "true" : "false",
      reinterpret_cast<std::uintptr_t>(seg.stream),
      seg.pool == pool_kind::small ? "small" : "large", seg.memory_pool,
      seg.asleep ? "true" : "false");
  bool first = true;
  for (const block_info& b : seg.blocks) {
    if (!first) out += ',';
    first = false;
    out += fmt::format(R"({{"address":{},"size":{},"requested":{},"state":"{}"}})", b.address,
                       b.size, b.requested, state_name(b.state));
  }
  out += "]}";
}

}  // namespace

std::string snapshot_to_json(const memory_snapshot& snap, int device, const std::string& backend,
                             const device_call_stats* calls) {
  std::string out =
      fmt::format(R"({{"device":{},"backend":{},"segments":[)", device, quoted(backend));
  bool first = true;
  for (const segment_info& seg : snap.segments) {
    if (!first) out += ',';
    first = false;
    append_segment(out, seg);
  }
  out += "],\"sleeping_pools\":[";
  first = true;
  for (const sleeping_pool_info& p : snap.sleeping_pools) {
    if (!first) out += ',';
    first = false;
    out += fmt::format(
        R"({{"pool":{},"mode":"{}","bytes_asleep":{},"bytes_offloaded":{},"bytes_held":{}}})",
        p.pool, p.offloaded ? "offload" : "discard", p.bytes_asleep, p.bytes_offloaded,
        p.bytes_held);
  }
  out += "]";
  if (calls != nullptr) {
    out += ",\"device_calls\":";
    out += to_json(*calls);
  }
  return out + "}";
}

}  // namespace cachalot::detail
