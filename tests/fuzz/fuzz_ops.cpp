// libFuzzer target: operation sequences, valid and invalid, through the C shim and through the
// C++ API over a simulated device (where streams can be held back). The first two bytes choose
// each side's modes (checked, pass-through, host backing, oversize, expandable segments, and
// for the C++ side a concurrent replay; see config_for); then each op is an opcode byte plus
// argument bytes. After every fourth op and at the end the invariants are checked: through the
// C shim, the stats against the fuzzer's own record of live allocations; through the C++ API,
// every invariant of tests/reliability/invariants.hpp. A concurrent replay (mode bits 5 and 6 of
// the C++ side) splits the ops in two halves that two threads run at once on the C++ side, each
// freeing only what it allocated, while a concurrent_checker (tests/support/concurrent_checker.hpp)
// reads the stats all along; the quiescent invariants are checked when both are done. Any
// unexpected status, exception or broken invariant aborts, which libFuzzer reports as a crash; ASan
// and UBSan catch the rest. Cheap inputs: each mode's allocators (one per side) are made once and
// reset between inputs (everything freed, streams released, the cache emptied and checked empty,
// peaks reset), which is equivalent for every invariant checked: a reset allocator differs from a
// new one only in its history (cumulative counters, pooled events, stream states, lane statistics).
// The devices are small: host-backed memory is touched, poisoned and scanned.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cachalot/cachalot.h"
#include "cachalot/cachalot.hpp"
#include "reliability/invariants.hpp"
#include "support/concurrent_checker.hpp"

namespace {

using namespace cachalot;

#define FUZZ_CHECK(cond, ...)                                             \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "fuzz_ops: check failed: %s: ", #cond);        \
      std::fprintf(stderr, __VA_ARGS__);                                  \
      std::fprintf(stderr, " (last error: %s)\n", cachalot_last_error()); \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

/// Reads the input a byte at a time; zeros once it is used up.
class reader {
 public:
  reader(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  std::uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  std::size_t index(std::size_t n) { return n == 0 ? 0 : byte() % n; }
  std::size_t size() {
    static constexpr std::size_t scale[] = {1, 512, 4 * KiB, 64 * KiB};  // up to 256 MiB
    const std::uint8_t s = byte();
    return (static_cast<std::size_t>(byte()) << 8 | byte()) % 4096 * scale[s % 4] + s / 4 % 2;
  }
  stream_t stream() { return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(byte() % 4)); }
  /// The unread bytes: the first half (`second` false) or the second.
  reader half(bool second) const {
    const std::size_t rest = n_ - std::min(i_, n_), first = rest / 2;
    return second ? reader(d_ + i_ + first, rest - first) : reader(d_ + i_, first);
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

/// Sizes on a host-backed device stay below this (three large segments): checked mode poisons
/// every byte of a new segment and scans every byte it hands out.
constexpr std::size_t host_sizes = 384 * KiB;
/// Every invariant is checked after every `check_every`-th op and at the end of the input: a
/// check (a stats read with every lock held, and a snapshot) costs more than the ops between,
/// and a broken invariant stays broken (what an op breaks, the next ones rarely repair).
constexpr unsigned check_every = 4;

struct live_block {
  std::size_t size;
  stream_t stream;
};

/// The C-shim side: an allocator handle and what the fuzzer believes is live in it.
class c_side {
 public:
  explicit c_side(std::string conf)
      : conf_(std::move(conf)), host_(conf_.find("host_backing:1") != std::string::npos) {
    create();
  }
  ~c_side() { cachalot_destroy(a_); }

  void op(std::uint8_t code, reader& in) {
    switch (code % 12) {
      case 0:
        return malloc_op(host_ ? in.size() % host_sizes : in.size(), in.stream());
      case 1:
        return free_op(in, false);
      case 2:
        return free_op(in, true);
      case 3:
        return record_op(in);
      case 4:
        return expect(cachalot_empty_cache(a_), CACHALOT_SUCCESS, "empty_cache");
      case 5:
        return expect(cachalot_trim(a_, in.size()), CACHALOT_SUCCESS, "trim");
      case 6:
        return double_free_op(in);
      case 7:
        return interior_free_op(in);
      case 8:
        return null_and_foreign_op();
      case 9:
        return recreate();
      case 10:
        return malloc_op(0, in.stream());
      default:
        return huge_op();
    }
  }

  /// Frees everything and empties the cache, which must leave nothing reserved; resets the
  /// peaks: from here the allocator serves the next input as a new one would.
  void reset() {
    for (const auto& [p, b] : live_)
      expect(cachalot_free(a_, p, b.stream), CACHALOT_SUCCESS, "free");
    live_.clear();
    freed_.clear();
    expect(cachalot_empty_cache(a_), CACHALOT_SUCCESS, "empty_cache");
    expect(cachalot_reset_peak_stats(a_), CACHALOT_SUCCESS, "reset_peak_stats");
    cachalot_stats s{};
    s.size = sizeof s;
    expect(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS, "get_stats");
    FUZZ_CHECK(s.reserved_bytes.all.current == 0 && s.reserved_bytes.all.peak == 0,
               "reserved after reset");
  }

  void check() const {
    cachalot_stats s{};
    s.size = sizeof s;
    expect(cachalot_get_stats(a_, &s), CACHALOT_SUCCESS, "get_stats");
    std::uint64_t requested = 0;
    for (const auto& [p, b] : live_) requested += b.size;
    FUZZ_CHECK(s.allocated_bytes.all.current <= s.reserved_bytes.all.current,
               "allocated %llu > reserved %llu",
               static_cast<unsigned long long>(s.allocated_bytes.all.current),
               static_cast<unsigned long long>(s.reserved_bytes.all.current));
    FUZZ_CHECK(s.allocations.all.current == live_.size(), "live count");
    FUZZ_CHECK(s.requested_bytes.all.current == requested, "requested bytes");
  }

 private:
  static void expect(cachalot_status got, cachalot_status want, const char* what) {
    FUZZ_CHECK(got == want, "%s returned %s, expected %s", what, cachalot_status_string(got),
               cachalot_status_string(want));
  }
  void create() {
    expect(cachalot_create(conf_.c_str(), &a_), CACHALOT_SUCCESS, "create");
    live_.clear();
  }
  void* any_live(reader& in) {
    if (live_.empty()) return nullptr;
    auto it = live_.begin();
    std::advance(it, static_cast<long>(in.index(live_.size())));
    return it->first;
  }
  void malloc_op(std::size_t n, stream_t s) {
    void* p = reinterpret_cast<void*>(1);
    const cachalot_status st = cachalot_malloc(a_, &p, n, s);
    if (st == CACHALOT_ERROR_OUT_OF_MEMORY || n == 0) {
      FUZZ_CHECK(p == nullptr, "a failed or empty malloc gave a pointer");
      if (n == 0) expect(st, CACHALOT_SUCCESS, "malloc(0)");
      return;
    }
    expect(st, CACHALOT_SUCCESS, "malloc");
    FUZZ_CHECK(live_.emplace(p, live_block{n, s}).second, "a live pointer handed out twice");
    freed_.erase(p);
  }
  void free_op(reader& in, bool other_stream) {
    void* p = any_live(in);
    if (p == nullptr) return;
    const stream_t s = other_stream ? in.stream() : live_[p].stream;
    expect(cachalot_free(a_, p, s), CACHALOT_SUCCESS, "free");
    live_.erase(p);
    freed_.emplace(p, 0);
  }
  void record_op(reader& in) {
    void* p = any_live(in);
    if (p != nullptr) expect(cachalot_record_stream(a_, p, in.stream()), CACHALOT_SUCCESS, "rec");
  }
  void double_free_op(reader& in) {
    if (freed_.empty()) return;
    auto it = freed_.begin();
    std::advance(it, static_cast<long>(in.index(freed_.size())));
    expect(cachalot_free(a_, it->first, nullptr), CACHALOT_ERROR_INVALID_POINTER, "double free");
    expect(cachalot_record_stream(a_, it->first, nullptr), CACHALOT_ERROR_INVALID_POINTER,
           "record_stream after free");
  }
  void interior_free_op(reader& in) {
    void* p = any_live(in);
    if (p == nullptr || live_[p].size < 2) return;
    char* q = static_cast<char*>(p) + 1 + in.size() % (live_[p].size - 1);
    expect(cachalot_free(a_, q, nullptr), CACHALOT_ERROR_INVALID_POINTER, "interior free");
  }
  void null_and_foreign_op() {
    int local = 0;
    void* p = nullptr;
    expect(cachalot_malloc(nullptr, &p, 16, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT, "NULL");
    expect(cachalot_free(nullptr, &local, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT, "NULL");
    expect(cachalot_malloc(a_, nullptr, 16, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT, "out");
    expect(cachalot_free(a_, &local, nullptr), CACHALOT_ERROR_INVALID_POINTER, "foreign");
    expect(cachalot_free(a_, nullptr, nullptr), CACHALOT_SUCCESS, "free(NULL)");
  }
  void recreate() {
    cachalot_allocator* old = a_;
    cachalot_destroy(old);
    void* p = nullptr;
    expect(cachalot_malloc(old, &p, 16, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT, "stale");
    if (!live_.empty()) {
      expect(cachalot_free(old, live_.begin()->first, nullptr), CACHALOT_ERROR_INVALID_ARGUMENT,
             "stale free");
    }
    freed_.clear();
    create();
  }
  void huge_op() {
    cachalot_stats before{}, after{};
    before.size = after.size = sizeof before;
    expect(cachalot_get_stats(a_, &before), CACHALOT_SUCCESS, "stats");
    void* p = nullptr;
    expect(cachalot_malloc(a_, &p, SIZE_MAX / 2, nullptr), CACHALOT_ERROR_OUT_OF_MEMORY, "huge");
    expect(cachalot_get_stats(a_, &after), CACHALOT_SUCCESS, "stats");
    FUZZ_CHECK(after.allocated_bytes.all.current == before.allocated_bytes.all.current,
               "OOM changed allocated bytes");
    FUZZ_CHECK(after.num_ooms == before.num_ooms + 1, "OOM not counted");
  }

  std::string conf_;
  bool host_ = false;  ///< a small host-backed device (sizes below host_sizes)
  cachalot_allocator* a_ = nullptr;
  std::unordered_map<void*, live_block> live_;
  std::unordered_map<void*, int> freed_;
};

/// The C++ side: an allocator over a simulated device whose streams the fuzzer holds back.
class cpp_side {
 public:
  using live_map = std::unordered_map<void*, std::size_t>;

  explicit cpp_side(const std::string& conf) {
    const config cfg = config::parse(conf);
    checked_ = cfg.debug;
    host_ = cfg.host_backing;
    sim_options o;
    o.capacity = cfg.capacity;
    o.host_backing = cfg.host_backing;
    sim_ = std::make_shared<simulated_device>(o);
    a_ = std::make_unique<allocator>(cfg, sim_);
  }

  void op(std::uint8_t code, reader& in) { op(code, in, live_, true); }

  /// Every invariant (the memory pools' stats every eighth time: there is only the default).
  void check() {
    const memory_stats s = a_->stats();
    const std::string e =
        testing::check_invariants(*a_, s, a_->snapshot(), sim_.get(), live_, ++checks_ % 8 == 0);
    FUZZ_CHECK(e.empty(), "%s", e.c_str());
  }

  /// Replays the rest of `in` from two threads, each half on its own, with a concurrent checker
  /// reading all along; then checks every invariant.
  void replay_concurrently(const reader& in) {
    testing::checker_options o;
    o.pause = std::chrono::microseconds(0);
    o.reset_every = 4;
    o.capacity = sim_->options().capacity;
    live_map theirs;
    {
      testing::concurrent_checker watch(*a_, o);
      std::thread other([&] {
        for (reader r = in.half(true); !r.done();) op(r.byte(), r, theirs, false);
      });
      for (reader r = in.half(false); !r.done();) op(r.byte(), r, live_, false);
      other.join();
      watch.stop();
      FUZZ_CHECK(watch.ok(), "%s", watch.report().c_str());
    }
    live_.insert(theirs.begin(), theirs.end());
    check();
  }

  /// Frees everything, releases every stream and empties the cache, which must leave the device
  /// empty; resets the peaks: from here the allocator serves the next input as a new one would.
  void drain() {
    for (const auto& [p, n] : live_) a_->deallocate(p);
    live_.clear();
    for (std::uintptr_t s = 0; s < 4; ++s) sim_->release_stream(reinterpret_cast<stream_t>(s));
    a_->empty_cache();
    const memory_stats s = a_->stats();
    FUZZ_CHECK(s.reserved_bytes.all.current == 0, "reserved after drain");
    FUZZ_CHECK(sim_->counters().live_segments == 0, "segments after drain");
    FUZZ_CHECK(sim_->counters().live_chunks == 0, "chunks after drain");
    FUZZ_CHECK(s.num_use_after_free_writes == 0, "false use-after-free report");
    FUZZ_CHECK(s.allocations.all.current == 0 && s.active_bytes.all.current == 0 &&
                   s.segments.all.current == 0 && s.num_free_blocks == 0,
               "something left after drain");
    a_->reset_peak_stats();
  }

 private:
  // `serial`: no other thread uses the allocator (an address just freed cannot be handed out
  // again before the double free that checks it).
  void op(std::uint8_t code, reader& in, live_map& live, bool serial) {
    try {
      dispatch(code, in, live, serial);
    } catch (const out_of_memory&) {
      // expected when the fuzzer asks for more than the capacity
    }
  }
  void dispatch(std::uint8_t code, reader& in, live_map& live, bool serial) {
    switch (code % 8) {
      case 0: {
        const std::size_t n = host_ ? in.size() % host_sizes : in.size();
        void* p = a_->allocate(n, in.stream());
        if (n != 0) FUZZ_CHECK(live.emplace(p, n).second, "a live pointer handed out twice");
        return;
      }
      case 1:
        return free_op(in, live, serial);
      case 2:
        return sim_->hold_stream(in.stream());
      case 3:
        return sim_->release_stream(in.stream());
      case 4: {
        void* p = any_live(in, live);
        if (p != nullptr) a_->record_stream(p, in.stream());
        return;
      }
      case 5:
        return a_->process_events();
      case 6:
        return (void)a_->trim(in.size());
      default:
        return sized_free_op(in, live);
    }
  }
  static void* any_live(reader& in, const live_map& live) {
    if (live.empty()) return nullptr;
    auto it = live.begin();
    std::advance(it, static_cast<long>(in.index(live.size())));
    return it->first;
  }
  void free_op(reader& in, live_map& live, bool serial) {
    void* p = any_live(in, live);
    if (p == nullptr) return;
    if (in.byte() % 2 == 0) {
      a_->deallocate(p);
    } else {
      a_->deallocate(p, in.stream());
    }
    live.erase(p);
    if (!serial) return;
    bool threw = false;
    try {
      a_->deallocate(p);  // a double free
    } catch (const invalid_pointer&) {
      threw = true;
    }
    FUZZ_CHECK(threw, "a double free was not reported");
  }
  void sized_free_op(reader& in, live_map& live) {
    void* p = any_live(in, live);
    if (p == nullptr) return;
    const std::size_t size = live[p];
    const bool wrong = in.byte() % 2 == 0;
    bool threw = false;
    try {
      a_->deallocate(p, wrong ? size + 1 : size, in.stream());
    } catch (const invalid_pointer&) {
      threw = true;
    }
    FUZZ_CHECK(threw == (wrong && checked_), "sized free: threw %d, wrong %d", threw, wrong);
    if (!threw) live.erase(p);
  }

  bool checked_ = false;
  bool host_ = false;
  std::uint64_t checks_ = 0;
  std::shared_ptr<simulated_device> sim_;
  std::unique_ptr<allocator> a_;
  live_map live_;
};

/// The config a mode byte selects: bit 0 checked mode, bit 1 pass-through, bit 2 host backing
/// (a small device with small segments: host pages are touched, poisoned and scanned), bit 3 a
/// max_split_size (oversize blocks), bit 4 expandable segments. (Bits 5 and 6 both set in the
/// C++ side's byte: a concurrent replay; see LLVMFuzzerTestOneInput.)
std::string config_for(std::uint8_t modes) {
  const bool host = (modes & 4) != 0;
  std::string conf = host ? "backend:simulated,capacity:4MiB,host_backing:1,small_size:16KiB,"
                            "small_segment:64KiB,mid_size:128KiB,large_segment:128KiB,"
                            "segment_rounding:64KiB,thread_cache_max_size:16KiB"
                          : "backend:simulated,capacity:256MiB";
  if ((modes & 1) != 0) conf += ",debug:1";
  if ((modes & 2) != 0) conf += ",caching:0";
  if ((modes & 8) != 0) conf += host ? ",max_split_size:256KiB" : ",max_split_size:32MiB";
  if ((modes & 16) != 0) conf += ",expandable_segments:1";
  return conf;
}

/// The side for `modes`, made at its first use and kept (reset after each input): reachable
/// from a static, so no leak checker reports it.
template <class Side>
Side& side_for(std::uint8_t modes) {
  static auto* sides = new std::array<std::unique_ptr<Side>, 32>();
  std::unique_ptr<Side>& slot = (*sides)[modes & 31];
  if (!slot) slot = std::make_unique<Side>(config_for(modes & 31));
  return *slot;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;  // long inputs add nothing but time
  reader in(data, size);
  c_side& c = side_for<c_side>(in.byte());
  const std::uint8_t cpp_modes = in.byte();
  cpp_side& cpp = side_for<cpp_side>(cpp_modes);
  if ((cpp_modes & 96) == 96) {
    cpp.replay_concurrently(in);
  } else {
    for (unsigned n = 1; !in.done(); ++n) {  // each side checked every fourth op, and at the end
      const std::uint8_t code = in.byte();
      if (code < 128) {
        c.op(code, in);
        if (n % check_every == 0) c.check();
      } else {
        cpp.op(code, in);
        if (n % check_every == 0) cpp.check();
      }
    }
    c.check();
    cpp.check();
  }
  c.reset();
  cpp.drain();
  return 0;
}
