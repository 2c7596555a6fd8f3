// Trace replay: preparation (free resolution, dense numbering) and the timed replay loop, on
// one thread or on one OS thread per trace thread handing over in log order.
#include "trace/replay.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <unordered_map>

#include "cachalot/allocator.hpp"
#include "cachalot/errors.hpp"
#include "trace/streams.hpp"

namespace cachalot::tools {
namespace {

constexpr std::size_t progress_every = 4096;

/// Dense numbering of logged ids.
template <typename Id>
std::uint32_t dense(std::unordered_map<Id, std::uint32_t>& ids, Id id) {
  return ids.try_emplace(id, static_cast<std::uint32_t>(ids.size())).first->second;
}

/// Counters of one replaying thread.
struct thread_counts {
  double busy_ns = 0;  // time between taking the turn and passing it on
  std::size_t ooms = 0;
  std::size_t errors = 0;
  std::size_t skipped = 0;
  std::size_t zero_size = 0;
};

/// Everything the replay loop touches.
struct replay_state {
  allocator& alloc;
  const prepared_trace& trace;
  const stream_set& streams;
  const replay_options& options;
  std::vector<void*> slots;
  std::vector<timeline_point> timeline;
  std::size_t sample_every = 1;
  std::atomic<std::size_t> turn{0};
  bool stopped = false;
  std::vector<pool_id> stream_pool;  ///< dense stream -> the --pool it is routed to, if any
};

/// A pool event of the trace: the pool of the op's stream sleeps or wakes. A stream in no
/// --pool (the default pool, which cannot sleep) is an error of the replay.
void run_pool_event(replay_state& st, const replay_op& op, thread_counts& c) {
  const pool_id pool = st.stream_pool[op.stream];
  try {
    if (pool == default_pool) throw invalid_argument("a pool event on a stream in no --pool");
    if (op.pool == replay_op::pool_event::wake) {
      (void)st.alloc.wake(pool);
    } else {
      (void)st.alloc.sleep(pool, op.pool == replay_op::pool_event::sleep_offload
                                     ? sleep_mode::offload
                                     : sleep_mode::discard);
    }
  } catch (const out_of_memory&) {  // the pool stays asleep (sleep_stats::num_failed_wakes)
    ++c.ooms;
  } catch (const error&) {
    ++c.errors;
  }
}

/// An allocation from a pool that sleeps (put to sleep by the trace or by the allocator under
/// pressure): its owner wakes it first, as a serving engine resumes a model before it runs.
void wake_and_allocate(replay_state& st, const replay_op& op, pool_id pool, thread_counts& c) {
  try {
    (void)st.alloc.wake(pool);
    st.slots[op.slot] = st.alloc.allocate(op.size, st.streams[op.stream]);
  } catch (const out_of_memory&) {
    ++c.ooms;
    st.slots[op.slot] = nullptr;
  } catch (const error&) {
    ++c.errors;
    st.slots[op.slot] = nullptr;
  }
}

void run_op(replay_state& st, const replay_op& op, thread_counts& c) {
  const stream_t stream = st.streams[op.stream];
  if (op.pool != replay_op::pool_event::none) [[unlikely]]
    return run_pool_event(st, op, c);
  try {
    if (op.is_allocate) {
      if (op.size == 0) ++c.zero_size;
      st.slots[op.slot] = st.alloc.allocate(op.size, stream);
      return;
    }
    void* const ptr = st.slots[op.slot];
    if (ptr == nullptr) {
      if (op.size != 0) ++c.skipped;  // its allocation was refused (size 0: nothing to free)
      return;
    }
    st.alloc.deallocate(ptr, stream);
  } catch (const out_of_memory&) {
    ++c.ooms;
    st.slots[op.slot] = nullptr;
  } catch (const pool_asleep& e) {
    wake_and_allocate(st, op, e.pool(), c);
  } catch (const error&) {
    ++c.errors;
    if (op.is_allocate) st.slots[op.slot] = nullptr;
  }
}

void after_op(replay_state& st, std::size_t index) {
  if (st.options.sample && (index + 1) % st.sample_every == 0) {
    const memory_stats s = st.alloc.stats();
    st.timeline.push_back({index + 1, s.requested_bytes.all.current, s.allocated_bytes.all.current,
                           s.reserved_bytes.all.current});
  }
  if (st.options.progress && (index + 1) % progress_every == 0) {
    st.options.progress(static_cast<double>(index + 1) / static_cast<double>(st.trace.ops.size()));
  }
}

void run_serial(replay_state& st, thread_counts& c) {
  const std::size_t n = st.trace.ops.size();
  const bool slow = st.options.sample || st.options.progress;
  const auto& stop = st.options.stop;
  for (std::size_t i = 0; i < n; ++i) {
    run_op(st, st.trace.ops[i], c);
    if (slow) after_op(st, i);
    if (stop && (i + 1) % progress_every == 0 && stop(st.alloc.stats(), c.ooms)) {
      st.stopped = i + 1 < n;
      return;
    }
  }
}

double since(std::chrono::steady_clock::time_point t0) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

/// One trace thread: waits for its turn, runs its ops until the next one belongs to another
/// thread, passes the turn on. Only the time holding the turn counts as busy.
void run_thread_ops(replay_state& st, const std::vector<std::size_t>& mine, thread_counts& c) {
  std::chrono::steady_clock::time_point t0;
  bool holding = false;
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const std::size_t index = mine[k];
    std::size_t now = st.turn.load(std::memory_order_acquire);
    while (now != index) {
      st.turn.wait(now, std::memory_order_acquire);
      now = st.turn.load(std::memory_order_acquire);
    }
    if (!holding) t0 = std::chrono::steady_clock::now(), holding = true;
    const replay_op& op = st.trace.ops[index];
    run_op(st, op, c);
    after_op(st, index);
    if (op.hand_over || k + 1 == mine.size()) c.busy_ns += since(t0), holding = false;
    st.turn.store(index + 1, std::memory_order_release);
    if (op.hand_over) st.turn.notify_all();
  }
}

void run_threaded(replay_state& st, std::vector<thread_counts>& counts) {
  std::vector<std::vector<std::size_t>> per_thread(st.trace.threads);
  for (std::size_t i = 0; i < st.trace.ops.size(); ++i) {
    per_thread[st.trace.ops[i].thread].push_back(i);
  }
  std::vector<std::thread> workers;
  workers.reserve(per_thread.size());
  for (std::size_t t = 0; t < per_thread.size(); ++t) {
    workers.emplace_back(
        [&st, &per_thread, &counts, t] { run_thread_ops(st, per_thread[t], counts[t]); });
  }
  for (std::thread& w : workers) w.join();
}

void fill_figures(replay_result& r, const memory_stats& s) {
  r.peak_requested = s.requested_bytes.all.peak;
  r.peak_allocated = s.allocated_bytes.all.peak;
  r.peak_reserved = s.reserved_bytes.all.peak;
  r.fragmentation = r.peak_requested == 0 ? 0.0
                                          : static_cast<double>(r.peak_reserved) /
                                                static_cast<double>(r.peak_requested);
  r.segment_allocs = s.num_segment_allocs;
  r.segment_frees = s.num_segment_frees;
  r.chunk_maps = s.num_chunk_maps;
  r.chunk_unmaps = s.num_chunk_unmaps;
  r.device_syncs = s.num_device_syncs;
  r.gc_syncs = s.num_gc_syncs;
  r.device = s.device;
}

/// Key of each pair in a key:value,key:value string.
std::vector<std::string_view> config_keys(std::string_view text) {
  std::vector<std::string_view> keys;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    item = item.substr(0, item.find(':'));
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    keys.push_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return keys;
}

}  // namespace

prepared_trace prepare(const trace& t) {
  prepared_trace p;
  p.name = t.name;
  p.summary = summarize(t);
  std::unordered_map<std::uint64_t, std::uint32_t> threads;
  std::unordered_map<std::uintptr_t, std::uint32_t> streams;
  std::unordered_map<std::uintptr_t, std::uint32_t> live;  // logged pointer -> slot
  std::vector<std::size_t> sizes;                          // slot -> size
  p.ops.reserve(t.events.size());
  for (const trace_event& e : t.events) {
    if (e.action == trace_action::allocate_failure) continue;
    replay_op op;
    op.is_allocate = e.action == trace_action::allocate;
    op.thread = dense(threads, e.thread);
    op.stream = dense(streams, e.stream);
    if (streams.size() > p.streams.size()) p.streams.push_back(e.stream);
    if (is_pool_event(e.action)) {
      op.is_allocate = false;
      op.pool = e.action == trace_action::wake            ? replay_op::pool_event::wake
                : e.action == trace_action::sleep_offload ? replay_op::pool_event::sleep_offload
                                                          : replay_op::pool_event::sleep_discard;
    } else if (op.is_allocate) {
      op.size = e.size;
      op.slot = static_cast<std::uint32_t>(p.slots++);
      sizes.push_back(e.size);
      if (e.pointer != 0) live.insert_or_assign(e.pointer, op.slot);
    } else {
      const auto it = live.find(e.pointer);
      if (it == live.end()) continue;  // unknown (or null) free: counted by summarize
      op.slot = it->second;
      op.size = sizes[op.slot];
      live.erase(it);
    }
    p.ops.push_back(op);
  }
  for (std::size_t i = 0; i + 1 < p.ops.size(); ++i) {
    p.ops[i].hand_over = p.ops[i].thread != p.ops[i + 1].thread;
  }
  p.threads = threads.size();
  return p;
}

replay_result replay(const prepared_trace& p, const config& cfg, const replay_options& options) {
  const std::shared_ptr<device_backend> backend = make_backend(cfg);
  const stream_set streams(*backend, p.streams);
  allocator alloc(cfg, backend);
  const std::vector<pool_id> pool_ids = apply_pools(alloc, options.pools, p, streams);
  replay_state st{alloc, p, streams, options, std::vector<void*>(p.slots, nullptr),
                  {},    1, {},      false,   {}};
  st.stream_pool.assign(p.streams.size(), default_pool);
  for (std::size_t k = 0; k < options.pools.size(); ++k) {
    for (const std::uintptr_t logged : options.pools[k].streams) {
      for (std::size_t i = 0; i < p.streams.size(); ++i) {
        if (p.streams[i] == logged) st.stream_pool[i] = pool_ids[k];
      }
    }
  }
  if (options.sample) {
    st.sample_every = p.ops.size() / 100000 + 1;
    st.timeline.reserve(p.ops.size() / st.sample_every + 2);
    st.timeline.push_back({0, 0, 0, 0});
  }
  const bool threaded = options.use_threads && p.threads > 1;
  std::vector<thread_counts> counts(threaded ? p.threads : 1);
  const auto start = std::chrono::steady_clock::now();
  if (threaded) {
    run_threaded(st, counts);
  } else {
    run_serial(st, counts[0]);
  }
  const double wall = since(start);

  replay_result r;
  r.backend = backend->name();
  r.capacity = backend->memory_info().total;
  r.memory_limit = alloc.get_config().memory_limit;
  r.ops = p.ops.size();
  r.trace_span_us = p.summary.span_us;
  r.threads = threaded ? p.threads : 1;
  for (const thread_counts& c : counts) {
    r.ooms += c.ooms;
    r.errors += c.errors;
    r.skipped_frees += c.skipped;
    r.zero_size_allocations += c.zero_size;
    r.busy_ns += c.busy_ns;
  }
  fill_figures(r, alloc.stats());
  r.pools = collect_pools(alloc, options.pools, pool_ids);
  r.wall_ns = wall;
  if (!threaded) r.busy_ns = wall;
  r.ns_per_op = r.ops == 0 ? 0.0 : r.busy_ns / static_cast<double>(r.ops);
  r.ns_per_op_min = r.ns_per_op_max = r.ns_per_op;
  r.timeline = std::move(st.timeline);
  r.stopped = st.stopped;
  return r;
}

replay_result replay_at(const prepared_trace& p, const config& base, std::size_t capacity,
                        bool stop_at_oom) {
  config cfg = base;
  cfg.backend = backend_kind::simulated;
  cfg.capacity = capacity;
  cfg.trace_file.clear();
  replay_options o;
  o.use_threads = false;
  if (stop_at_oom) o.stop = [](const memory_stats&, std::size_t ooms) { return ooms > 0; };
  return replay(p, cfg, o);
}

namespace {
/// A factor as people write it ("2", "1.5", "1e+06"), never 300 digits.
std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
}  // namespace

config replay_config(std::string_view user, const trace_summary& s, double capacity_factor) {
  config cfg = config::parse(user);
  const std::vector<std::string_view> keys = config_keys(user);
  const auto has = [&keys](std::string_view k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  if (!has("backend")) cfg.backend = backend_kind::simulated;
  if (!has("capacity")) {
    if (!std::isfinite(capacity_factor) || !(capacity_factor > 0.0)) {
      throw invalid_argument("--capacity-factor " + shortest(capacity_factor) +
                             ": must be a finite number above 0");
    }
    const double wanted = std::ceil(capacity_factor * static_cast<double>(s.peak_requested_bytes));
    if (!(wanted <= static_cast<double>(max_replay_capacity))) {
      throw invalid_argument("--capacity-factor " + shortest(capacity_factor) +
                             " x the trace's peak (" + format_bytes(s.peak_requested_bytes) +
                             ") is beyond the largest simulated capacity (" +
                             format_bytes(max_replay_capacity) + ")");
    }
    const std::size_t bytes = static_cast<std::size_t>(wanted);
    cfg.capacity = std::max<std::size_t>(2 * MiB, (bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB));
  }
  if (cfg.backend == backend_kind::simulated && cfg.capacity > max_replay_capacity) {
    throw invalid_argument("capacity " + format_bytes(cfg.capacity) +
                           " is beyond the largest simulated capacity (" +
                           format_bytes(max_replay_capacity) + ")");
  }
  cfg.validate();
  return cfg;
}

config baseline_config(const config& cfg) {
  config base = cfg;
  base.caching = false;
  base.trace_file.clear();
  return base;
}

}  // namespace cachalot::tools
