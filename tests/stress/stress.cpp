// cachalot_stress: many threads hammer one allocator on a host-backed simulated device.
// Threads allocate mixed sizes on 6 streams, stamp every block with a pattern derived from its
// address and a unique tag, hand blocks to each other through a mailbox, and free blocks that
// other threads allocated (on their own stream or another, which defers the free); streams are
// held back and released at random, record_stream marks cross-stream use, and process_events,
// trim and empty_cache run concurrently; record_stream is also called on blocks in the mailbox,
// which another thread may be freeing at that moment (it must succeed or fail cleanly). A
// concurrent checker (tests/support/concurrent_checker.hpp) reads the stats, the pools' stats
// and snapshots all along, resetting the peaks now and then: no value may exceed what the
// device can hold, and every invariant of one read and between reads must hold (peaks reached
// by some state, cumulative values never going back, segment and allocation counts agreeing,
// pools adding up to the allocator). With --trace every operation is recorded and the
// trace checked at the end to be in ownership order (no address allocated twice without a
// free between, no free of an address that is not live). Threads are torn down and re-created
// every round; blocks survive rounds in the mailbox. Checked before every free: the stamp is
// intact (no block was handed out twice, none was written by someone else). Checked between
// rounds, with every thread stopped: all allocator invariants (tests/reliability/
// invariants.hpp). At the end everything is freed and the device must be empty.
//
// Usage: cachalot_stress [--long] [--threads N] [--rounds N] [--ops N] [--seed N] [--checked]
//                        [--expandable] [--pools] [--reserve MIB] [--trace FILE]
// --expandable runs with expandable segments: growth maps chunks and trim/empty_cache unmap
// them while other threads allocate and free in the same segments. --pools adds three tenant
// pools (a limit, a guarantee, three priorities) that half of each thread's own-stream
// allocations go to; between rounds one of them is released (its blocks live on in the
// mailbox) and a new one created. --reserve takes a reserve of MIB MiB at start (not with
// --expandable, which it refuses). The thread cache's lanes are on unless --checked.
// Short mode (default) fits CI (< 30 s); --long runs 20x longer. Exit status 0 on success.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "reliability/invariants.hpp"
#include "support/concurrent_checker.hpp"

#if defined(__SANITIZE_THREAD__)
#define CACHALOT_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CACHALOT_STRESS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CACHALOT_STRESS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CACHALOT_STRESS_ASAN 1
#endif
#endif

namespace {

using namespace cachalot;

constexpr std::uintptr_t stream_count = 6;
constexpr std::size_t whole_fill_limit = 256 * KiB;  // larger blocks: head, tail and stamps
constexpr std::size_t edge = 64 * KiB;

struct options {
  unsigned threads = 32;
  unsigned rounds = 4;
  unsigned ops = 3000;  // per thread and round
  std::uint64_t seed = 1;
  bool checked = false;
  bool expandable = false;  // expandable segments (chunks mapped and unmapped concurrently)
  bool pools = false;       // tenant pools, one replaced each round
  std::size_t reserve_mib = 0;
  std::string trace;  // trace file, checked at the end ("": no trace)
};

struct item {
  void* ptr = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
};

struct counters {
  std::atomic<std::uint64_t> ops{0}, allocs{0}, frees{0}, handoffs{0}, holds{0}, ooms{0};
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "cachalot_stress: FAILED: %s\n", what.c_str());
  std::exit(1);
}

stream_t stream_n(std::uintptr_t n) {
  return reinterpret_cast<stream_t>(n);
}

unsigned char pattern_of(const item& it) {
  std::uint64_t x = reinterpret_cast<std::uintptr_t>(it.ptr) ^ (it.tag * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 31;
  return static_cast<unsigned char>(x | 1);
}

/// The byte ranges of a block that carry the stamp: all of it when small, else the two edges
/// and 16 bytes at each 64 KiB boundary.
template <class F>
void for_each_stamped_range(const item& it, F&& f) {
  auto* p = static_cast<unsigned char*>(it.ptr);
  if (it.size <= whole_fill_limit) return f(p, it.size);
  f(p, edge);
  f(p + it.size - edge, edge);
  for (std::size_t off = edge; off + 16 <= it.size - edge; off += edge) f(p + off, 16);
}

void stamp(const item& it) {
  const unsigned char b = pattern_of(it);
  for_each_stamped_range(it, [&](unsigned char* p, std::size_t n) { std::memset(p, b, n); });
  if (it.size >= sizeof it.tag) std::memcpy(it.ptr, &it.tag, sizeof it.tag);
}

void verify(const item& it) {
  const unsigned char b = pattern_of(it);
  if (it.size >= sizeof it.tag) {
    std::uint64_t tag;
    std::memcpy(&tag, it.ptr, sizeof tag);
    if (tag != it.tag) fail("a block's tag was overwritten: handed out twice?");
  }
  for_each_stamped_range(it, [&](unsigned char* p, std::size_t n) {
    for (std::size_t i = it.size >= sizeof it.tag && p == it.ptr ? sizeof it.tag : 0; i < n; ++i) {
      if (p[i] != b) fail("a block's contents changed while it was allocated");
    }
  });
}

class stress {
 public:
  explicit stress(const options& o) : opt_(o) {
    sim_options so;
    so.capacity = 8 * GiB;
    so.host_backing = true;
    sim_ = std::make_shared<simulated_device>(so);
    config cfg;
    cfg.debug = o.checked;
    cfg.expandable_segments = o.expandable;
    cfg.reserve = o.reserve_mib * MiB;
    cfg.trace_file = o.trace;
    a_ = std::make_unique<allocator>(cfg, sim_);
    for (int i = 0; o.pools && i < 3; ++i) new_pool(i);
  }

  void run() {
    const auto start = std::chrono::steady_clock::now();
    testing::checker_options co;
    co.pause = std::chrono::microseconds(200);  // takes every stream lock: leave the workers room
    co.reset_every = 32;
    co.capacity = sim_->options().capacity;
    auto watch = std::make_unique<testing::concurrent_checker>(*a_, co);
    for (unsigned r = 0; r < opt_.rounds; ++r) {
      std::vector<std::thread> threads;
      for (unsigned t = 0; t < opt_.threads; ++t) {
        threads.emplace_back([this, r, t] { worker(opt_.seed * 1000003 + r * 1009 + t, t); });
      }
      for (std::thread& th : threads) th.join();
      check_quiescent("after round " + std::to_string(r));
      if (opt_.pools) {  // threads are stopped: the pool list may change
        a_->release_pool(pools_[r % pools_.size()]);
        new_pool(static_cast<int>(r % pools_.size()));
      }
    }
    watch->stop();
    if (!watch->ok()) fail("the concurrent checker: " + watch->report());
    const std::uint64_t reads = watch->rounds();
    watch.reset();
    drain();
    if (!opt_.trace.empty()) {
      a_.reset();  // flushes the trace
      check_trace(opt_.trace);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "cachalot_stress: OK: %u threads x %u rounds, %llu operations (%llu allocations, %llu "
        "frees, %llu hand-offs, %llu stream holds, %llu pool limits met; %llu rounds of "
        "concurrent checks) in %.1f s\n",
        opt_.threads, opt_.rounds, static_cast<unsigned long long>(c_.ops.load()),
        static_cast<unsigned long long>(c_.allocs.load()),
        static_cast<unsigned long long>(c_.frees.load()),
        static_cast<unsigned long long>(c_.handoffs.load()),
        static_cast<unsigned long long>(c_.holds.load()),
        static_cast<unsigned long long>(c_.ooms.load()), static_cast<unsigned long long>(reads),
        secs);
  }

 private:
  void worker(std::uint64_t seed, unsigned t) {
    std::mt19937_64 rng(seed);
    const stream_t own = stream_n(1 + t % stream_count);
    const pool_id pool = pools_.empty() ? default_pool : pools_[t % pools_.size()];
    std::vector<item> mine;
    for (unsigned i = 0; i < opt_.ops; ++i) operate(rng, own, pool, mine);
    std::lock_guard<std::mutex> lock(mailbox_mutex_);  // survivors go to the next round
    for (const item& it : mine) mailbox_.push_back(it);
    c_.ops += opt_.ops;
  }

  void operate(std::mt19937_64& rng, stream_t own, pool_id pool, std::vector<item>& mine) {
    const auto pick = [&](std::uint64_t n) { return rng() % n; };
    const stream_t any = stream_n(1 + pick(stream_count));
    const std::uint64_t op = pick(100);
    if (op < 40 || mine.empty()) {
      if (mine.size() >= 24) return release(mine, pick(mine.size()), own, any, pick(4) == 0);
      return allocate(mine, pick, op < 30 ? own : any, op < 15 ? pool : default_pool);
    }
    const std::size_t k = pick(mine.size());
    if (op < 60) return release(mine, k, own, any, pick(4) == 0);
    if (op < 70) return hand_off(mine, k);
    if (op < 80) return take_and_free(rng, own);
    if (op < 83) return a_->record_stream(mine[k].ptr, any);
    if (op < 85) return record_shared(rng, any);
    if (op < 88) return hold(any);
    if (op < 92) return sim_->release_stream(any);
    if (op < 96) return a_->process_events();
    if (op < 98) return (void)a_->trim(a_->stats().reserved_bytes.all.current / 2);
    if (op < 99) return a_->empty_cache();
    if (a_->allocation_size(mine[k].ptr) < mine[k].size) fail("allocation_size too small");
  }

  template <class Pick>
  void allocate(std::vector<item>& mine, Pick& pick, stream_t stream, pool_id pool) {
    const std::uint64_t c = pick(100);
    const std::size_t n = 1 + (c < 80 ? pick(64 * KiB) : c < 98 ? pick(2 * MiB) : pick(16 * MiB));
    void* p = nullptr;
    try {
      p = pool == default_pool ? a_->allocate(n, stream) : a_->allocate(n, stream, pool);
    } catch (const out_of_memory&) {
      if (pool == default_pool) throw;  // only a tenant pool's limit may refuse
      ++c_.ooms;
      return;
    }
    item it{p, n, next_tag_.fetch_add(1, std::memory_order_relaxed)};
    stamp(it);
    mine.push_back(it);
    ++c_.allocs;
  }

  void release(std::vector<item>& mine, std::size_t k, stream_t own, stream_t any, bool cross) {
    const item it = mine[k];
    mine[k] = mine.back();
    mine.pop_back();
    free_item(it, cross ? any : own, cross);
  }

  void free_item(const item& it, stream_t stream, bool on_stream) {
    verify(it);
    if (on_stream) {
      a_->deallocate(it.ptr, stream);
    } else {
      a_->deallocate(it.ptr);
    }
    ++c_.frees;
  }

  void hand_off(std::vector<item>& mine, std::size_t k) {
    std::lock_guard<std::mutex> lock(mailbox_mutex_);
    mailbox_.push_back(mine[k]);
    mine[k] = mine.back();
    mine.pop_back();
    ++c_.handoffs;
  }

  void take_and_free(std::mt19937_64& rng, stream_t own) {
    item it;
    {
      std::lock_guard<std::mutex> lock(mailbox_mutex_);
      if (mailbox_.empty()) return;
      const std::size_t k = rng() % mailbox_.size();
      it = mailbox_[k];
      mailbox_[k] = mailbox_.back();
      mailbox_.pop_back();
    }
    free_item(it, own, rng() % 2 == 0);  // freed by a thread that did not allocate it
  }

  // record_stream on a block in the mailbox, which another thread may be freeing right now.
  void record_shared(std::mt19937_64& rng, stream_t s) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mailbox_mutex_);
      if (mailbox_.empty()) return;
      p = mailbox_[rng() % mailbox_.size()].ptr;
    }
    try {
      a_->record_stream(p, s);
    } catch (const invalid_pointer&) {  // freed meanwhile: a clean failure is the contract
    }
  }

  // The trace lists allocations and frees in ownership order.
  static void check_trace(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) fail("cannot read the trace " + path);
    char line[256];
    std::unordered_map<std::uintptr_t, int> live;
    std::uint64_t n = 0;
    (void)std::fgets(line, sizeof line, f);  // header
    while (std::fgets(line, sizeof line, f) != nullptr) {
      char action[32] = {};
      unsigned long long ptr = 0;
      if (std::sscanf(line, "%*[^,],%*[^,],%31[^,],%llx", action, &ptr) != 2) continue;
      ++n;
      const std::string act = action;
      if (act == "allocate" && !live.emplace(ptr, 1).second) {
        fail("trace line " + std::to_string(n) + " allocates a live address");
      }
      if (act == "free" && live.erase(ptr) != 1) {
        fail("trace line " + std::to_string(n) + " frees an address that is not live");
      }
    }
    std::fclose(f);
    std::remove(path.c_str());
    if (!live.empty()) fail("the trace leaves addresses live after everything was freed");
    std::printf("cachalot_stress: trace of %llu lines is in ownership order\n",
                static_cast<unsigned long long>(n));
  }

  // A tenant pool like the i-th of three: 0 with a limit and the lowest priority, 2 with a
  // guarantee and the highest (the guarantees of all three fit in the device).
  void new_pool(int i) {
    pool_options po;
    po.name = "stress " + std::to_string(i);
    po.priority = i - 1;
    po.limit = i == 0 ? 512 * MiB : 0;
    po.guarantee = i == 2 ? 256 * MiB : 0;
    const pool_id id = a_->create_pool(po);
    if (pools_.size() < 3) {
      pools_.push_back(id);
    } else {
      pools_[static_cast<std::size_t>(i)] = id;
    }
  }

  void hold(stream_t s) {
    sim_->hold_stream(s);
    ++c_.holds;
  }

  void check_quiescent(const std::string& when) {
    std::unordered_map<void*, std::size_t> live;
    for (const item& it : mailbox_) {
      verify(it);
      if (!live.emplace(it.ptr, it.size).second) fail(when + ": one pointer held twice");
    }
    // With a reserve the device holds it besides the segments: no device comparison.
    const std::string e =
        testing::check_invariants(*a_, opt_.reserve_mib == 0 ? sim_.get() : nullptr, live);
    if (!e.empty()) fail(when + ": " + e);
  }

  void drain() {
    for (const item& it : mailbox_) free_item(it, nullptr, false);
    mailbox_.clear();
    for (std::uintptr_t s = 1; s <= stream_count; ++s) sim_->release_stream(stream_n(s));
    a_->empty_cache();
    check_quiescent("after draining");
    if (a_->stats().reserved_bytes.all.current != 0) fail("reserved bytes left after draining");
    const sim_counters c = sim_->counters();
    if (c.live_segments != (opt_.reserve_mib != 0 ? 1u : 0u)) {
      fail("device segments left after draining");
    }
    if (c.live_chunks != 0 || c.live_ranges != 0) fail("device chunks left after draining");
    if (a_->stats().num_use_after_free_writes != 0) fail("use-after-free writes detected");
  }

  options opt_;
  std::shared_ptr<simulated_device> sim_;
  std::unique_ptr<allocator> a_;
  std::vector<pool_id> pools_;  // changed only between rounds (no worker running)
  std::mutex mailbox_mutex_;
  std::vector<item> mailbox_;
  std::atomic<std::uint64_t> next_tag_{1};
  counters c_;
};

options parse(int argc, char** argv) {
  options o;
#if defined(CACHALOT_STRESS_TSAN)
  o.threads = 8;  // TSan: fewer threads, each slower
  o.ops = 2000;
#elif defined(CACHALOT_STRESS_ASAN)
  o.ops = 1500;
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) fail("missing value after " + arg);
      return std::strtoull(argv[++i], nullptr, 10);
    };
    if (arg == "--long") {
      o.rounds *= 4;
      o.ops *= 5;
    } else if (arg == "--threads") {
      o.threads = static_cast<unsigned>(value());
    } else if (arg == "--rounds") {
      o.rounds = static_cast<unsigned>(value());
    } else if (arg == "--ops") {
      o.ops = static_cast<unsigned>(value());
    } else if (arg == "--seed") {
      o.seed = value();
    } else if (arg == "--checked") {
      o.checked = true;
    } else if (arg == "--expandable") {
      o.expandable = true;
    } else if (arg == "--pools") {
      o.pools = true;
    } else if (arg == "--reserve") {
      o.reserve_mib = static_cast<std::size_t>(value());
    } else if (arg == "--trace") {
      if (i + 1 >= argc) fail("missing value after --trace");
      o.trace = argv[++i];
    } else {
      fail("unknown argument " + arg);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    stress(parse(argc, argv)).run();
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
  return 0;
}
