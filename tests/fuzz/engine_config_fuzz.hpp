// The config space fuzzed against the engine (issue 9: a config that validates must run
// correctly, whatever the relation between its size keys). Input bytes choose a config from
// wide ranges of every size key (granularity 256 B to 16 KiB, segments from one granule to
// thousands, max_split_size near the segment sizes or none, gc_threshold, memory limits near a
// segment, roundup_power2_divisions per range, a reserve, a cap on idle segments, checked and
// pass-through modes); a config that config::validate() refuses is skipped, one that it
// accepts must round-trip through its string and then serve a sequence of allocations and
// frees sized around its own boundaries (the granularity, small_size, mid_size, max_split_size,
// the segments), on four streams of a simulated device that can hold work back. After every
// eighth operation (a check costs more than a few of them, and what an operation breaks stays
// broken) and at the end, every invariant of reliability/invariants.hpp must hold (stats equal
// the snapshot, nothing wraps around), and those of one stats read in
// support/concurrent_checker.hpp; at the end everything is freed and the device must hold
// nothing. One input in four is replayed concurrently: after the config, the rest of the input
// is split in two halves that two threads run at once (each freeing only what it allocated),
// with a concurrent_checker reading the stats all along; the quiescent invariants are checked
// when both are done.
//
// Used by the libFuzzer target (fuzz_engine.cpp) and by a seeded test in the normal suite
// (core/config_fuzz_test.cpp). run() returns 0 for a skipped (invalid) config, else ran | the
// features the config used (so that the seeded test can show it reached each), and aborts with a
// message on any violation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/simulated_device.hpp"
#include "reliability/invariants.hpp"
#include "support/concurrent_checker.hpp"

namespace cachalot::testing::engine_fuzz {

#define ENGINE_FUZZ_CHECK(cond, ...)                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "engine config fuzz: check failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                     \
      std::fprintf(stderr, "\n");                                            \
      std::abort();                                                          \
    }                                                                        \
  } while (0)

/// Reads the input a byte at a time; zeros once it is used up.
class bytes {
 public:
  bytes(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  std::uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  /// The unread bytes: the first half (`second` false) or the second.
  bytes half(bool second) const {
    const std::size_t rest = n_ - std::min(i_, n_), first = rest / 2;
    return second ? bytes(d_ + i_ + first, rest - first) : bytes(d_ + i_, first);
  }
  std::uint32_t u16() { return static_cast<std::uint32_t>(u8()) << 8 | u8(); }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : u16() % n; }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

/// A config chosen by the input (possibly invalid: validate() decides).
inline config choose_config(bytes& in) {
  config c;
  c.backend = backend_kind::simulated;
  const std::size_t g = std::size_t{256} << in.below(7);  // 256 B .. 16 KiB
  c.granularity = g;
  c.small_segment_size = g << in.below(12);
  c.small_size = g * (1 + in.below(c.small_segment_size / g + 1));
  c.large_segment_size = g * (c.small_size / g + 1 + in.below(2048));
  c.mid_size_limit = c.small_size + 1 + in.below(c.large_segment_size - c.small_size + 1);
  c.segment_rounding = g << in.below(10);
  c.small_split_remainder = in.below(3 * c.small_segment_size);
  c.large_split_remainder = in.below(3 * c.large_segment_size);
  if (in.u8() % 4 == 0) {  // small segments as big as large ones, or bigger
    c.small_segment_size = std::max(c.small_segment_size, c.large_segment_size << in.below(3));
  }
  const std::size_t biggest = std::max(c.small_segment_size, c.large_segment_size);
  switch (in.u8() % 4) {
    case 0:
      c.max_split_size = SIZE_MAX;
      break;
    case 1:  // just above, at or below the segments (the last two must be refused)
      c.max_split_size = biggest + 1 - std::min<std::size_t>(biggest, in.below(3));
      break;
    default:
      c.max_split_size = biggest + 1 + in.below(4 * biggest);
  }
  c.capacity = std::max<std::size_t>(biggest * 4, std::size_t{16} << 20) << in.below(4);
  switch (in.u8() % 4) {
    case 0:
      c.memory_limit = biggest + in.below(8 * biggest);
      break;
    case 1:
      c.memory_fraction = static_cast<double>(1 + in.below(100)) / 100.0;
      break;
    default:
      break;
  }
  const std::uint8_t gc = in.u8();
  c.gc_threshold = gc % 4 == 0 ? 0.0 : static_cast<double>(gc % 101) / 100.0;
  if (in.u8() % 3 == 0) {
    for (std::uint32_t& d : c.roundup_power2_divisions) {
      d = static_cast<std::uint32_t>(in.u8() % 4 == 0 ? 0 : 1u << in.below(6));
    }
  }
  const std::uint8_t modes = in.u8();
  c.debug = (modes & 1) != 0;
  c.caching = (modes & 6) != 0;  // pass-through one time in four
  if ((modes & 24) == 8) c.reserve = g * in.below(static_cast<std::size_t>(c.capacity / g / 2) + 1);
  if ((modes & 96) == 32) c.max_cached = in.below(2 * biggest + 1);
  return c;
}

/// What run() reports.
enum : unsigned {
  ran = 1,
  used_reserve = 2,
  used_max_cached = 4,
  used_divisions = 8,
  passthrough = 16,
  concurrently = 32,  ///< replayed from two threads with a concurrent_checker
};

/// Operations per input at most: this fuzzer's subject is the config space, so many configs
/// with a short sequence each find more than few with long ones (a sequence of 64 reaches
/// every boundary of a config several times over).
inline constexpr int max_steps = 64;

/// Runs one input. 0 when the chosen config is invalid (nothing to run).
inline unsigned run(const std::uint8_t* data, std::size_t size) {
  bytes in(data, size);
  const config cfg = choose_config(in);
  try {
    cfg.validate();
  } catch (const invalid_argument&) {
    return 0;
  }
  const config back = config::parse(cfg.to_string());
  ENGINE_FUZZ_CHECK(back == cfg, "round trip changed %s into %s", cfg.to_string().c_str(),
                    back.to_string().c_str());
  const bool concurrent = in.u8() % 4 == 0;
  sim_options o;
  o.capacity = cfg.capacity;
  // The device charges whole alignment units; at most the granularity, so that charged bytes
  // equal the segment sizes the invariants compare them with.
  o.alignment = std::min<std::size_t>(o.alignment, cfg.granularity);
  auto sim = std::make_shared<simulated_device>(o);
  std::unique_ptr<allocator> a;
  try {
    a = std::make_unique<allocator>(cfg, sim);
  } catch (const invalid_argument&) {
    // Only the resolved form of a memory_fraction may be refused at start (below a segment).
    ENGINE_FUZZ_CHECK(cfg.memory_fraction > 0, "a valid config failed to start: %s",
                      cfg.to_string().c_str());
    return 0;
  }
  const std::size_t boundaries[] = {
      cfg.granularity,
      cfg.small_size,
      cfg.mid_size_limit,
      cfg.small_segment_size,
      cfg.large_segment_size,
      cfg.max_split_size == SIZE_MAX ? cfg.large_segment_size * 3 : cfg.max_split_size};
  /// What one thread has allocated (and on which stream).
  struct actor {
    std::unordered_map<void*, std::size_t> live;
    std::unordered_map<void*, stream_t> stream_of;
  };
  std::uint64_t checks = 0;
  const auto check = [&](const char* after, const std::unordered_map<void*, std::size_t>& live) {
    const memory_stats s = a->stats();
    const memory_snapshot snap = a->snapshot();
    // With a reserve the device holds the reserve plus the segments outside it: not reserved.
    // The memory pools' stats every eighth time (there is only the default pool).
    const std::string e = check_invariants(*a, s, snap, cfg.reserve == 0 ? sim.get() : nullptr,
                                           live, ++checks % 8 == 0);
    ENGINE_FUZZ_CHECK(e.empty(), "after %s: %s; config %s", after, e.c_str(),
                      cfg.to_string().c_str());
    const std::string r = detail_cc::check_read(s, cfg.capacity);
    ENGINE_FUZZ_CHECK(r.empty(), "after %s: %s; config %s", after, r.c_str(),
                      cfg.to_string().c_str());
    if (cfg.reserve != 0) {
      const std::uint64_t used = sim->counters().used_bytes;
      const std::uint64_t reserved = s.reserved_bytes.all.current;
      ENGINE_FUZZ_CHECK(used >= cfg.reserve && used - cfg.reserve <= reserved && reserved <= used,
                        "after %s: device holds %llu with a reserve of %zu, reserved %llu", after,
                        static_cast<unsigned long long>(used), cfg.reserve,
                        static_cast<unsigned long long>(reserved));
    }
    if (cfg.max_cached != SIZE_MAX && cfg.caching) {  // idle (wholly free) segments capped
      std::uint64_t idle = 0;
      for (const segment_info& seg : snap.segments) {
        if (seg.blocks.size() == 1 && seg.blocks[0].state == block_state::free) idle += seg.size;
      }
      ENGINE_FUZZ_CHECK(idle <= cfg.max_cached, "after %s: %llu idle bytes over max_cached %zu",
                        after, static_cast<unsigned long long>(idle), cfg.max_cached);
    }
    for (const pool_stats* p : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                                &s.requested_bytes, &s.inactive_split_bytes}) {
      for (const stat* st : {&p->small, &p->large, &p->all}) {
        ENGINE_FUZZ_CHECK(st->peak <= std::uint64_t{1} << 50,
                          "after %s: a byte stat wrapped (current %llu, peak %llu); config %s",
                          after, static_cast<unsigned long long>(st->current),
                          static_cast<unsigned long long>(st->peak), cfg.to_string().c_str());
      }
    }
  };
  // One operation of `me`, read from `in`; returns what it was.
  const auto step = [&](bytes& from, actor& me) -> const char* {
    const auto any_live = [&]() -> void* {
      if (me.live.empty()) return nullptr;
      auto it = me.live.begin();
      std::advance(it, static_cast<long>(from.below(me.live.size())));
      return it->first;
    };
    const auto stream = [&] { return reinterpret_cast<stream_t>(std::uintptr_t{from.u8() % 4u}); };
    const std::uint8_t op = from.u8();
    const char* what = "?";
    try {
      switch (op % 8) {
        case 0:
        case 1:
        case 2: {  // allocate around a boundary
          what = "allocate";
          const std::size_t base = boundaries[from.below(std::size(boundaries))];
          const std::size_t delta = from.below(2 * cfg.granularity + 1);
          const std::size_t n =
              from.u8() % 2 ? base + delta : (base > delta ? base - delta : from.below(64) + 1);
          const stream_t s = stream();
          void* p = a->allocate(n, s);
          if (p != nullptr) {
            ENGINE_FUZZ_CHECK(me.live.emplace(p, n).second, "a live pointer handed out twice");
            me.stream_of[p] = s;
          }
          break;
        }
        case 3:
        case 4: {
          what = "free";
          void* p = any_live();
          if (p == nullptr) break;
          if (from.u8() % 3 == 0) {
            a->deallocate(p, stream());
          } else {
            a->deallocate(p, me.stream_of[p]);
          }
          me.live.erase(p);
          me.stream_of.erase(p);
          break;
        }
        case 5: {
          what = "record_stream";
          if (void* p = any_live()) a->record_stream(p, stream());
          break;
        }
        case 6:
          what = "hold/release";
          if (from.u8() % 2) {
            sim->hold_stream(stream());
          } else {
            sim->release_stream(stream());
          }
          break;
        default:
          what = "process_events/trim/empty_cache";
          switch (from.u8() % 3) {
            case 0:
              a->process_events();
              break;
            case 1:
              a->trim(from.below(4) * cfg.large_segment_size);
              break;
            default:
              a->empty_cache();
          }
      }
    } catch (const out_of_memory&) {
      // expected: sizes around max_split_size may exceed the capacity or the limit
    } catch (const std::exception& e) {
      ENGINE_FUZZ_CHECK(false, "%s threw %s; config %s", what, e.what(), cfg.to_string().c_str());
    }
    return what;
  };
  actor all;  // everything live at the end
  if (!concurrent) {
    const char* what = "nothing";
    for (int step_no = 1; step_no <= max_steps && !in.done(); ++step_no) {
      what = step(in, all);
      if (step_no % 8 == 0) check(what, all.live);  // (a check costs more than a few steps)
    }
    check(what, all.live);
  } else {
    checker_options co;
    co.pause = std::chrono::microseconds(0);
    co.reset_every = 4;
    co.capacity = cfg.capacity;
    concurrent_checker watch(*a, co);
    actor second;
    const auto replay = [&](bytes half, actor& me) {
      for (int step_no = 0; step_no < max_steps / 2 && !half.done(); ++step_no)
        (void)step(half, me);
    };
    std::thread other([&] { replay(in.half(true), second); });
    replay(in.half(false), all);
    other.join();
    watch.stop();
    ENGINE_FUZZ_CHECK(watch.ok(), "concurrent replay: %s; config %s", watch.report().c_str(),
                      cfg.to_string().c_str());
    all.live.insert(second.live.begin(), second.live.end());
    check("the concurrent replay", all.live);
  }
  std::unordered_map<void*, std::size_t>& live = all.live;
  for (const auto& [p, n] : live) a->deallocate(p);
  for (std::uintptr_t s = 0; s < 4; ++s) sim->release_stream(reinterpret_cast<stream_t>(s));
  a->empty_cache();
  live.clear();
  check("drain", live);
  ENGINE_FUZZ_CHECK(a->stats().reserved_bytes.all.current == 0, "reserved after drain");
  ENGINE_FUZZ_CHECK(sim->counters().live_segments == (cfg.reserve != 0 ? 1u : 0u),
                    "device segments after drain");
  a.reset();
  ENGINE_FUZZ_CHECK(sim->counters().live_segments == 0, "device segments after destruction");
  unsigned features = ran;
  if (cfg.reserve != 0) features |= used_reserve;
  if (cfg.max_cached != SIZE_MAX) features |= used_max_cached;
  if (cfg.roundup_power2_divisions != decltype(cfg.roundup_power2_divisions){}) {
    features |= used_divisions;
  }
  if (!cfg.caching) features |= passthrough;
  if (concurrent) features |= concurrently;
  return features;
}

}  // namespace cachalot::testing::engine_fuzz
