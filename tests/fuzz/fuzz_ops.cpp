// libFuzzer target: operation sequences, valid and invalid, through the C shim and through the
// C++ API over a simulated device (where streams can be held back). The first two bytes choose
// each side's modes (checked, pass-through, host backing, oversize; see config_for); then each
// op is an opcode byte plus argument bytes. After every op the invariants are checked: through
// the C shim, the stats against the fuzzer's own record of live allocations; through the C++
// API, every invariant of tests/reliability/invariants.hpp. Any unexpected status, exception
// or broken invariant aborts, which libFuzzer reports as a crash; ASan and UBSan catch the rest.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachalot/cachalot.h"
#include "cachalot/cachalot.hpp"
#include "reliability/invariants.hpp"

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

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

struct live_block {
  std::size_t size;
  stream_t stream;
};

/// The C-shim side: an allocator handle and what the fuzzer believes is live in it.
class c_side {
 public:
  explicit c_side(std::string conf) : conf_(std::move(conf)) { create(); }
  ~c_side() { cachalot_destroy(a_); }

  void op(std::uint8_t code, reader& in) {
    switch (code % 12) {
      case 0:
        return malloc_op(in.size(), in.stream());
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
  cachalot_allocator* a_ = nullptr;
  std::unordered_map<void*, live_block> live_;
  std::unordered_map<void*, int> freed_;
};

/// The C++ side: an allocator over a simulated device whose streams the fuzzer holds back.
class cpp_side {
 public:
  explicit cpp_side(const std::string& conf) {
    const config cfg = config::parse(conf);
    checked_ = cfg.debug;
    sim_options o;
    o.capacity = cfg.capacity;
    o.host_backing = cfg.host_backing;
    sim_ = std::make_shared<simulated_device>(o);
    a_ = std::make_unique<allocator>(cfg, sim_);
  }

  void op(std::uint8_t code, reader& in) {
    try {
      dispatch(code, in);
    } catch (const out_of_memory&) {
      // expected when the fuzzer asks for more than the capacity
    }
  }

  void check() const {
    const std::string e = testing::check_invariants(*a_, sim_.get(), live_);
    FUZZ_CHECK(e.empty(), "%s", e.c_str());
  }

  void drain() {
    for (const auto& [p, n] : live_) a_->deallocate(p);
    live_.clear();
    for (std::uintptr_t s = 0; s < 4; ++s) sim_->release_stream(reinterpret_cast<stream_t>(s));
    a_->empty_cache();
    FUZZ_CHECK(a_->stats().reserved_bytes.all.current == 0, "reserved after drain");
    FUZZ_CHECK(sim_->counters().live_segments == 0, "segments after drain");
    FUZZ_CHECK(a_->stats().num_use_after_free_writes == 0, "false use-after-free report");
  }

 private:
  void dispatch(std::uint8_t code, reader& in) {
    switch (code % 8) {
      case 0: {
        const std::size_t n = in.size();
        void* p = a_->allocate(n, in.stream());
        if (n != 0) FUZZ_CHECK(live_.emplace(p, n).second, "a live pointer handed out twice");
        return;
      }
      case 1:
        return free_op(in);
      case 2:
        return sim_->hold_stream(in.stream());
      case 3:
        return sim_->release_stream(in.stream());
      case 4: {
        void* p = any_live(in);
        if (p != nullptr) a_->record_stream(p, in.stream());
        return;
      }
      case 5:
        return a_->process_events();
      case 6:
        return (void)a_->trim(in.size());
      default:
        return sized_free_op(in);
    }
  }
  void* any_live(reader& in) {
    if (live_.empty()) return nullptr;
    auto it = live_.begin();
    std::advance(it, static_cast<long>(in.index(live_.size())));
    return it->first;
  }
  void free_op(reader& in) {
    void* p = any_live(in);
    if (p == nullptr) return;
    if (in.byte() % 2 == 0) {
      a_->deallocate(p);
    } else {
      a_->deallocate(p, in.stream());
    }
    live_.erase(p);
    bool threw = false;
    try {
      a_->deallocate(p);  // a double free (unless the address was handed out again)
    } catch (const invalid_pointer&) {
      threw = true;
    }
    FUZZ_CHECK(threw, "a double free was not reported");
  }
  void sized_free_op(reader& in) {
    void* p = any_live(in);
    if (p == nullptr) return;
    const std::size_t size = live_[p];
    const bool wrong = in.byte() % 2 == 0;
    bool threw = false;
    try {
      a_->deallocate(p, wrong ? size + 1 : size, in.stream());
    } catch (const invalid_pointer&) {
      threw = true;
    }
    FUZZ_CHECK(threw == (wrong && checked_), "sized free: threw %d, wrong %d", threw, wrong);
    if (!threw) live_.erase(p);
  }

  bool checked_ = false;
  std::shared_ptr<simulated_device> sim_;
  std::unique_ptr<allocator> a_;
  std::unordered_map<void*, std::size_t> live_;
};

/// The config a mode byte selects: bit 0 checked mode, bit 1 pass-through, bit 2 host backing
/// (small capacity and segments: host pages are touched, poisoned and scanned), bit 3 a
/// max_split_size (oversize blocks).
std::string config_for(std::uint8_t modes) {
  const bool host = (modes & 4) != 0;
  std::string conf = host ? "backend:simulated,capacity:8MiB,host_backing:1,large_segment:2MiB,"
                            "mid_size:2MiB"
                          : "backend:simulated,capacity:256MiB";
  if ((modes & 1) != 0) conf += ",debug:1";
  if ((modes & 2) != 0) conf += ",caching:0";
  if ((modes & 8) != 0) conf += host ? ",max_split_size:4MiB" : ",max_split_size:32MiB";
  return conf;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;  // long inputs add nothing but time
  reader in(data, size);
  c_side c(config_for(in.byte()));
  cpp_side cpp(config_for(in.byte()));
  while (!in.done()) {
    const std::uint8_t code = in.byte();
    if (code < 128) {
      c.op(code, in);
      c.check();
    } else {
      cpp.op(code, in);
      cpp.check();
    }
  }
  cpp.drain();
  return 0;
}
