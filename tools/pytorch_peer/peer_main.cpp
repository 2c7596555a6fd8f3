// cachalot-pytorch-replay: replays one trace (cachalot-replay's format) through PyTorch's own
// CUDA caching allocator, built from PyTorch's source against the host-only CUDA stand-in, and
// prints what it reserved and which device calls it made, as one JSON object (or a few lines of
// text). One process replays one trace with one setting: the allocator is a process singleton.
//   cachalot-pytorch-replay [--capacity SIZE] [--expandable] [--conf STR] [--stop-at-oom]
//                           [--cost KEY:VALUE,...] [--json] TRACE.csv
// Device time is modeled with cachalot's device cost model (the defaults, or --cost with the
// cost_* keys of CACHALOT_CONF), pricing the calls PyTorch's allocator makes.
// Exit status: 0 replayed (refusals are figures, not failures), 2 bad arguments or trace, 1 the
// allocator raised another error or called what the stand-in does not provide.
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "pytorch_replay.hpp"
#include "trace/replay.hpp"
#include "trace/report.hpp"
#include "trace/trace.hpp"

namespace {

using namespace cachalot::pytorch_peer;

const char* const usage =
    "usage: cachalot-pytorch-replay [options] TRACE.csv\n"
    "Replays a trace through PyTorch's CUDA caching allocator (c10, "
    "PyTorch " CACHALOT_PYTORCH_VERSION
    ")\non a host-only stand-in for the CUDA runtime and driver (no GPU).\n"
    "  --capacity SIZE   device capacity (default 80GiB), e.g. 24GiB or bytes\n"
    "  --expandable      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
    "  --conf STR        PYTORCH_CUDA_ALLOC_CONF to use (instead of --expandable)\n"
    "  --stop-at-oom     stop at the first refused allocation (capacity searches)\n"
    "  --cost STR        device cost model keys (cost_model, cost_<call>: as in CACHALOT_CONF)\n"
    "  --json            one JSON object on one line\n";

struct args {
  peer_options options;
  bool json = false;
  std::string trace;
};

/// Applies "key:value,..." cost-model keys. @throws std::invalid_argument naming a bad item
void set_cost(cachalot::device_cost_model& model, const std::string& text) {
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const std::size_t colon = item.find(':');
    if (!item.empty()) {
      bool known = false;
      try {
        known = colon != std::string::npos &&
                cachalot::apply_cost_key(model, item.substr(0, colon), item.substr(colon + 1));
      } catch (const cachalot::error& e) {
        throw std::invalid_argument(std::string("--cost: ") + e.what());
      }
      if (!known) throw std::invalid_argument("--cost: '" + item + "' is not a cost-model key");
    }
    at = comma + 1;
  }
}

args parse(int argc, char** argv) {
  args a;
  bool expandable = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(s + " needs a value");
      return argv[++i];
    };
    if (s == "--capacity") {
      a.options.capacity = cachalot::parse_size(value());
      if (a.options.capacity == 0) throw std::invalid_argument("--capacity must be above 0");
    } else if (s == "--expandable") {
      expandable = true;
    } else if (s == "--conf") {
      a.options.conf = value();
    } else if (s == "--cost") {
      set_cost(a.options.cost, value());
    } else if (s == "--stop-at-oom") {
      a.options.stop_at_oom = true;
    } else if (s == "--json") {
      a.json = true;
    } else if (!s.empty() && s[0] == '-' && s != "-") {
      throw std::invalid_argument("unknown option " + s);
    } else if (a.trace.empty()) {
      a.trace = s;
    } else {
      throw std::invalid_argument("one trace per process (the allocator is a singleton)");
    }
  }
  if (a.trace.empty()) throw std::invalid_argument("no trace given");
  if (expandable) {
    if (!a.options.conf.empty()) throw std::invalid_argument("--expandable or --conf, not both");
    a.options.conf = "expandable_segments:True";
  }
  return a;
}

std::vector<peer_op> ops_of(const cachalot::tools::prepared_trace& p) {
  std::vector<peer_op> ops;
  ops.reserve(p.ops.size());
  for (const cachalot::tools::replay_op& o : p.ops) {
    ops.push_back({o.is_allocate, o.slot, o.size, p.streams[o.stream]});
  }
  return ops;
}

/// Segment allocations and frees (an expandable segment's address range counting as one, as
/// cachalot-replay counts its ranges) plus page maps and unmaps.
std::uint64_t device_calls(const peer_result& r) {
  return r.calls.malloc_calls + r.calls.free_calls + r.calls.address_reserve +
         r.calls.address_free + r.calls.mem_map + r.calls.mem_unmap;
}

/// Synchronizations: explicit ones plus the device-wide one every cudaFree implies.
std::uint64_t syncs(const peer_result& r) {
  return r.calls.device_syncs + r.calls.stream_syncs + r.calls.event_syncs + r.calls.free_calls;
}

/// The device time as cachalot-replay's JSON gives it: "device_ms" and "device":{...}.
std::string json_device(const peer_result& r) {
  const standin_counters& c = r.calls;
  std::uint64_t calls = 0, syncs = 0;
  std::string kinds;
  for (std::size_t k = 0; k < cachalot::device_call_count; ++k) {
    const auto kind = static_cast<cachalot::device_call>(k);
    (cachalot::device_call_is_sync(kind) ? syncs : calls) += c.kind_calls[k];
    kinds += fmt::format("{}\"{}\":{{\"calls\":{},\"ns\":{}}}", k == 0 ? "" : ",",
                         cachalot::device_call_name(kind), c.kind_calls[k], c.kind_ns[k]);
  }
  return fmt::format(
      "\"device_ms\":{},\"device\":{{\"timing\":\"modeled\",\"total_ns\":{},\"calls\":{},"
      "\"syncs\":{},\"implied_syncs\":{},\"implied_sync_ns\":{},\"by_kind\":{{{}}}}}",
      cachalot::tools::json_number(static_cast<double>(c.device_ns()) / 1e6), c.device_ns(), calls,
      syncs, c.implied_syncs, c.implied_sync_ns, kinds);
}

std::string json(const args& a, const peer_result& r) {
  const standin_counters& c = r.calls;
  std::string sizes;
  for (const std::size_t s : r.calls.malloc_sizes)
    sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  return fmt::format(
      "{{\"trace\":{},\"allocator\":\"pytorch\",\"pytorch_version\":{},\"conf\":{},"
      "\"cost_model\":{},\"capacity_bytes\":{},\"ops\":{},\"complete\":{},\"stopped\":{},"
      "\"ooms\":{},\"skipped_frees\":{},\"peak_reserved_bytes\":{},\"peak_allocated_bytes\":{},"
      "\"peak_requested_bytes\":{},\"end_reserved_bytes\":{},\"end_allocated_bytes\":{},"
      "\"end_requested_bytes\":{},\"device_calls\":{},\"syncs\":{},\"num_device_alloc\":{},"
      "\"num_device_free\":{},\"num_alloc_retries\":{},\"num_sync_all_streams\":{},"
      "\"calls\":{{\"cudaMalloc\":{},\"cudaMalloc_failed\":{},\"cudaFree\":{},\"cuMemCreate\":{},"
      "\"cuMemCreate_failed\":{},\"cuMemRelease\":{},\"cuMemMap\":{},\"cuMemUnmap\":{},"
      "\"cuMemSetAccess\":{},\"cuMemAddressReserve\":{},\"cuMemAddressFree\":{},"
      "\"cudaDeviceSynchronize\":{},\"cudaStreamSynchronize\":{},\"cudaEventSynchronize\":{},"
      "\"cudaEventCreate\":{},\"cudaEventRecord\":{},\"cudaEventQuery\":{},\"cudaMemGetInfo\":{},"
      "\"unsupported\":{}}},\"segment_sizes\":[{}],{},\"error\":{}}}",
      cachalot::tools::json_string(a.trace), cachalot::tools::json_string(r.version),
      cachalot::tools::json_string(a.options.conf),
      cachalot::tools::json_string(cachalot::tools::cost_items(a.options.cost)), a.options.capacity,
      r.ops, r.ooms == 0 && r.error.empty() ? "true" : "false", r.stopped ? "true" : "false",
      r.ooms, r.skipped_frees, r.peak_reserved, r.peak_allocated, r.peak_requested, r.end_reserved,
      r.end_allocated, r.end_requested, device_calls(r), syncs(r), r.num_device_alloc,
      r.num_device_free, r.num_alloc_retries, r.num_sync_all_streams, c.malloc_calls,
      c.malloc_failures, c.free_calls, c.mem_create, c.mem_create_failures, c.mem_release,
      c.mem_map, c.mem_unmap, c.mem_set_access, c.address_reserve, c.address_free, c.device_syncs,
      c.stream_syncs, c.event_syncs, c.event_creates, c.event_records, c.event_queries,
      c.mem_get_info, c.unsupported, sizes, json_device(r),
      r.error.empty() ? std::string("null") : cachalot::tools::json_string(r.error));
}

std::string text(const args& a, const peer_result& r) {
  using cachalot::format_bytes;
  std::string out =
      fmt::format("{}: PyTorch {} caching allocator ({}), capacity {}\n", a.trace, r.version,
                  a.options.conf.empty() ? "default settings" : a.options.conf,
                  format_bytes(a.options.capacity));
  out += fmt::format("  peak reserved {}, peak allocated {}, peak requested {}\n",
                     format_bytes(static_cast<std::size_t>(r.peak_reserved)),
                     format_bytes(static_cast<std::size_t>(r.peak_allocated)),
                     format_bytes(static_cast<std::size_t>(r.peak_requested)));
  out += fmt::format("  out of memory: {}{}\n", r.ooms, r.stopped ? " (stopped at the first)" : "");
  out += fmt::format(
      "  device calls {} (cudaMalloc {}, cudaFree {}, cuMemMap {}, cuMemUnmap {}), syncs {}\n",
      device_calls(r), r.calls.malloc_calls, r.calls.free_calls, r.calls.mem_map, r.calls.mem_unmap,
      syncs(r));
  out += fmt::format("  device time (modeled with cachalot's cost model): {:.3f} ms\n",
                     static_cast<double>(r.calls.device_ns()) / 1e6);
  if (!r.error.empty()) out += "  error: " + r.error + "\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        std::cout << usage;
        return 0;
      }
    }
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cachalot-pytorch-replay: " << e.what() << '\n' << usage;
    return 2;
  }
  cachalot::tools::prepared_trace prepared;
  try {
    prepared = cachalot::tools::prepare(cachalot::tools::load_trace(a.trace));
  } catch (const std::exception& e) {
    std::cerr << "cachalot-pytorch-replay: error: " << e.what() << '\n';
    return 2;
  }
  const peer_result r = pytorch_replay(ops_of(prepared), prepared.slots, a.options);
  std::cout << (a.json ? json(a, r) + "\n" : text(a, r)) << std::flush;
  if (!r.error.empty()) {
    std::cerr << "cachalot-pytorch-replay: PyTorch's allocator failed: " << r.error << '\n';
    return 1;
  }
  if (r.calls.unsupported != 0) {
    std::cerr << "cachalot-pytorch-replay: the allocator called " << r.calls.first_unsupported
              << ", which the host-only stand-in does not provide\n";
    return 1;
  }
  return 0;
}
