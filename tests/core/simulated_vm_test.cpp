// Tests of the simulated device's virtual memory (the backend contract of backend.hpp):
// capacity shared between segments and chunks, every misuse reported as a backend_error that
// changes nothing, host-backed chunks keeping their content until unmapped and inaccessible
// (PROT_NONE, pages returned) after, the address space, fault injection of each operation,
// and concurrent map/unmap.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/errors.hpp"
#include "cachalot/simulated_device.hpp"

namespace cachalot {
namespace {

constexpr std::size_t G = 2 * MiB;  // the default granularity

sim_options vm_opts(std::size_t capacity, bool host = false) {
  sim_options o;
  o.capacity = capacity;
  o.host_backing = host;
  return o;
}

char* at(void* base, std::size_t offset) {
  return static_cast<char*>(base) + offset;
}

/// Runs `f`; "" if it threw a backend_error whose message contains `part`, else what happened.
std::string backend_error_with(const std::function<void()>& f, const std::string& part) {
  try {
    f();
  } catch (const backend_error& e) {
    const std::string what = e.what();
    return what.find(part) != std::string::npos ? "" : "message: " + what;
  } catch (const std::exception& e) {
    return std::string("other exception: ") + e.what();
  }
  return "no exception";
}

/// Permissions ("rw-p", "---p") of the host mapping holding `p`, from /proc/self/maps.
std::string protection(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> lo >> dash >> hi >> perms;
    if (addr >= lo && addr < hi) return perms;
  }
  return "unmapped";
}

/// Resident pages among the `bytes` at `p` (page-aligned), from mincore.
std::size_t resident_pages(void* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(bytes / page);
  if (mincore(p, bytes, v.data()) != 0) return SIZE_MAX;
  std::size_t n = 0;
  for (unsigned char c : v) n += c & 1u;
  return n;
}

TEST(simulated_vm, SharesTheCapacityBetweenSegmentsAndChunks) {
  simulated_device d(vm_opts(64 * MiB));
  EXPECT_TRUE(d.supports_virtual_memory());
  EXPECT_EQ(d.vm_granularity(), G);
  void* r = d.reserve_address_range(128 * MiB);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(d.memory_info().free, 64 * MiB) << "a range costs no memory";
  ASSERT_TRUE(d.map_chunk(r, 32 * MiB));
  EXPECT_EQ(d.memory_info().free, 32 * MiB);
  void* seg = d.allocate_segment(20 * MiB, nullptr);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(d.memory_info().free, 12 * MiB);
  EXPECT_FALSE(d.map_chunk(at(r, 32 * MiB), 14 * MiB)) << "more than is free";
  EXPECT_FALSE(d.is_mapped(at(r, 32 * MiB), 1)) << "a failed map maps nothing";
  EXPECT_EQ(d.allocate_segment(14 * MiB, nullptr), nullptr);
  ASSERT_TRUE(d.map_chunk(at(r, 32 * MiB), 12 * MiB));
  EXPECT_EQ(d.memory_info().free, 0u);
  EXPECT_EQ(d.allocate_segment(512, nullptr), nullptr);
  EXPECT_FALSE(d.map_chunk(at(r, 44 * MiB), G));
  sim_counters c = d.counters();
  EXPECT_EQ(c.chunk_maps, 2u);
  EXPECT_EQ(c.failed_chunk_maps, 2u);
  EXPECT_EQ(c.live_chunks, 2u);
  EXPECT_EQ(c.mapped_bytes, 44 * MiB);
  EXPECT_EQ(c.used_bytes, 20 * MiB);
  EXPECT_EQ(c.failed_segment_allocs, 2u);
  EXPECT_EQ(c.range_reserves, 1u);
  EXPECT_EQ(c.live_ranges, 1u);
  EXPECT_EQ(c.reserved_range_bytes, 128 * MiB);

  d.unmap_chunk(r, 32 * MiB);
  EXPECT_EQ(d.memory_info().free, 32 * MiB);
  void* seg2 = d.allocate_segment(32 * MiB, nullptr);
  ASSERT_NE(seg2, nullptr) << "unmapped memory is free for segments";
  d.free_segment(seg2, 32 * MiB);
  ASSERT_TRUE(d.map_chunk(r, 32 * MiB)) << "an unmapped span can be mapped again";
  d.unmap_chunk(r, 32 * MiB);
  d.unmap_chunk(at(r, 32 * MiB), 12 * MiB);
  d.free_segment(seg, 20 * MiB);
  d.release_address_range(r, 128 * MiB);
  c = d.counters();
  EXPECT_EQ(d.memory_info().free, 64 * MiB);
  EXPECT_EQ(c.chunk_maps, 3u);
  EXPECT_EQ(c.chunk_unmaps, 3u);
  EXPECT_EQ(c.live_chunks, 0u);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(c.range_releases, 1u);
  EXPECT_EQ(c.live_ranges, 0u);
  EXPECT_EQ(c.reserved_range_bytes, 0u);
}

TEST(simulated_vm, ChunksCountExactlyAndSegmentsByAlignment) {
  sim_options o = vm_opts(8 * MiB);
  o.vm_granularity = 64 * KiB;  // tests may use a smaller granularity
  simulated_device d(o);
  void* r = d.reserve_address_range(16 * MiB);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(d.map_chunk(r, 64 * KiB));
  void* seg = d.allocate_segment(1000, nullptr);  // charged 1024 (alignment 512)
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(d.memory_info().free, 8 * MiB - 64 * KiB - 1024);
  d.free_segment(seg, 1000);
  d.unmap_chunk(r, 64 * KiB);
  d.release_address_range(r, 16 * MiB);
  EXPECT_EQ(d.memory_info().free, 8 * MiB);
}

TEST(simulated_vm, ReportsEveryMisuseAndChangesNothing) {
  simulated_device d(vm_opts(64 * MiB));
  // Before any range exists.
  int local = 0;
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(reinterpret_cast<void*>(G + 4096), G); },
                               "must be multiples"),
            "");
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(reinterpret_cast<void*>(64 * G), G); },
                               "no reserved range holds"),
            "");
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(&local, G); }, "no chunk is mapped"), "");
  EXPECT_EQ(backend_error_with([&] { d.release_address_range(&local, G); }, "no reserved range"),
            "");
  // Bad sizes.
  EXPECT_EQ(backend_error_with([&] { (void)d.reserve_address_range(0); }, "nonzero multiple"), "");
  EXPECT_EQ(backend_error_with([&] { (void)d.reserve_address_range(G + 4096); }, "granularity"),
            "");
  void* r = d.reserve_address_range(16 * MiB);
  void* r2 = d.reserve_address_range(16 * MiB);
  ASSERT_NE(r, nullptr);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r) % G, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r2) % G, 0u);
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(r, 0); }, "must be multiples"), "");
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(r, G / 2); }, "must be multiples"), "");
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(at(r, 4096), G); }, "must be multiples"),
            "");
  // Outside the ranges, or across the end of one.
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(at(r, 14 * MiB), 4 * MiB); },
                               "runs past the end of the range"),
            "");
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(at(r, 16 * MiB), G); }, "no reserved range"),
            "")
      << "the guard granule after a range belongs to no range";
  // Overlaps.
  ASSERT_TRUE(d.map_chunk(at(r, 4 * MiB), 4 * MiB));
  for (std::size_t off : {2 * MiB, 4 * MiB, 6 * MiB}) {
    EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(at(r, off), 4 * MiB); },
                                 "overlaps the chunk mapped at"),
              "")
        << "offset " << off;
  }
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(r, 12 * MiB); }, "overlaps"), "")
      << "a span covering a chunk";
  // Unmaps that are not exactly one chunk.
  ASSERT_TRUE(d.map_chunk(at(r, 8 * MiB), G));
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(at(r, 6 * MiB), G); }, "is inside the chunk"),
            "");
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(at(r, 4 * MiB), G); }, "has 4194304 B"), "");
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(at(r, 4 * MiB), 6 * MiB); }, "unmapped whole"),
            "")
      << "two adjacent chunks are not one";
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(r, G); }, "no chunk is mapped"), "");
  // Releases that are not exactly one unmapped range.
  EXPECT_EQ(
      backend_error_with([&] { d.release_address_range(at(r, G), 14 * MiB); }, "not its base"), "");
  EXPECT_EQ(backend_error_with([&] { d.release_address_range(r, 8 * MiB); }, "the range has"), "");
  EXPECT_EQ(backend_error_with([&] { d.release_address_range(r, 16 * MiB); },
                               "2 chunks (6291456 B) are still mapped"),
            "");
  // Nothing changed.
  sim_counters c = d.counters();
  EXPECT_EQ(c.live_ranges, 2u);
  EXPECT_EQ(c.live_chunks, 2u);
  EXPECT_EQ(c.mapped_bytes, 6 * MiB);
  EXPECT_EQ(c.chunk_maps, 2u);
  EXPECT_EQ(c.chunk_unmaps, 0u);
  EXPECT_EQ(c.failed_chunk_maps, 0u) << "misuse is not out of memory";
  EXPECT_TRUE(d.is_mapped(at(r, 4 * MiB), 6 * MiB));
  d.unmap_chunk(at(r, 4 * MiB), 4 * MiB);
  d.unmap_chunk(at(r, 8 * MiB), G);
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(at(r, 8 * MiB), G); }, "no chunk"), "")
      << "an unmap twice";
  d.release_address_range(r, 16 * MiB);
  EXPECT_EQ(backend_error_with([&] { d.release_address_range(r, 16 * MiB); }, "no reserved range"),
            "")
      << "a release twice";
  EXPECT_EQ(backend_error_with([&] { (void)d.map_chunk(r, G); }, "no reserved range"), "")
      << "a map into a released range";
  d.release_address_range(r2, 16 * MiB);
  c = d.counters();
  EXPECT_EQ(c.live_ranges, 0u);
  EXPECT_EQ(c.range_releases, 2u);
}

TEST(simulated_vm, WithoutVirtualMemoryTheCallsAreNotSupported) {
  sim_options o = vm_opts(64 * MiB);
  o.virtual_memory = false;
  simulated_device d(o);
  EXPECT_FALSE(d.supports_virtual_memory());
  EXPECT_THROW((void)d.reserve_address_range(G), not_supported);
  int x = 0;
  EXPECT_THROW((void)d.map_chunk(&x, G), not_supported);
  EXPECT_THROW(d.unmap_chunk(&x, G), not_supported);
  EXPECT_THROW(d.release_address_range(&x, G), not_supported);
}

TEST(simulated_vm, IsMappedSpansAdjacentChunksOnly) {
  simulated_device d(vm_opts(64 * MiB));
  void* r = d.reserve_address_range(16 * MiB);
  ASSERT_TRUE(d.map_chunk(r, G));
  ASSERT_TRUE(d.map_chunk(at(r, G), 2 * G));
  ASSERT_TRUE(d.map_chunk(at(r, 4 * G), G));
  EXPECT_TRUE(d.is_mapped(r, 3 * G));
  EXPECT_TRUE(d.is_mapped(at(r, G - 1), 2));
  EXPECT_TRUE(d.is_mapped(at(r, 3 * G - 1), 0));
  EXPECT_FALSE(d.is_mapped(r, 3 * G + 1));
  EXPECT_FALSE(d.is_mapped(at(r, 3 * G), 1));
  EXPECT_FALSE(d.is_mapped(r, 5 * G)) << "a hole between chunks";
  EXPECT_TRUE(d.is_mapped(at(r, 4 * G), G));
  d.unmap_chunk(r, G);
  d.unmap_chunk(at(r, G), 2 * G);
  d.unmap_chunk(at(r, 4 * G), G);
  d.release_address_range(r, 16 * MiB);
}

TEST(simulated_vm, HostBackedChunksKeepTheirContentUntilUnmapped) {
  simulated_device d(vm_opts(16 * MiB, true));
  auto* r = static_cast<unsigned char*>(d.reserve_address_range(8 * MiB));
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(d.map_chunk(r, G));
  ASSERT_TRUE(d.map_chunk(r + G, 2 * G));
  EXPECT_EQ(r[0], 0u) << "a new chunk reads as zeros";
  EXPECT_EQ(r[3 * G - 1], 0u);
  std::memset(r, 0x5a, 3 * G);  // one write across both chunks: they are contiguous
  d.unmap_chunk(r, G);
  ASSERT_TRUE(d.map_chunk(r, G));
  EXPECT_EQ(r[0], 0u) << "a chunk mapped again has new (zero) pages";
  EXPECT_EQ(r[G - 1], 0u);
  for (std::size_t i = G; i < 3 * G; i += 4093) ASSERT_EQ(r[i], 0x5a) << i;
  EXPECT_EQ(r[3 * G - 1], 0x5a) << "the other chunk kept its content";
  d.unmap_chunk(r, G);
  d.unmap_chunk(r + G, 2 * G);
  d.release_address_range(r, 8 * MiB);
}

TEST(simulated_vm, UnmappedChunksAreInaccessibleAndGiveTheirPagesBack) {
  simulated_device d(vm_opts(16 * MiB, true));
  auto* r = static_cast<unsigned char*>(d.reserve_address_range(8 * MiB));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(protection(r), "---p") << "a reserved range is not accessible";
  ASSERT_TRUE(d.map_chunk(r + G, G));
  EXPECT_EQ(protection(r + G), "rw-p");
  EXPECT_EQ(protection(r + 2 * G - 1), "rw-p");
  EXPECT_EQ(protection(r), "---p") << "before the chunk";
  EXPECT_EQ(protection(r + 2 * G), "---p") << "after the chunk";
  std::memset(r + G, 1, G);
  const std::size_t pages = G / static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(resident_pages(r + G, G), pages);
  d.unmap_chunk(r + G, G);
  EXPECT_EQ(protection(r + G), "---p") << "an access to an unmapped chunk faults";
  EXPECT_EQ(resident_pages(r + G, G), 0u) << "its pages went back to the host";
  d.release_address_range(r, 8 * MiB);
  EXPECT_EQ(protection(r), "---p");
}

TEST(simulated_vm, RangesComeFromTheirOwnAddressSpace) {
  sim_options o = vm_opts(64 * MiB);
  EXPECT_EQ(simulated_device(o).vm_address_space(), 64 * 64 * MiB) << "64 x the capacity";
  o.vm_address_space = 16 * MiB + 1;
  simulated_device d(o);
  EXPECT_EQ(d.vm_address_space(), 18 * MiB) << "rounded up to the granularity";
  void* seg = d.allocate_segment(MiB, nullptr);
  void* a = d.reserve_address_range(8 * MiB);  // 10 MiB with its guard granule
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(d.is_live(a, 1)) << "not in the segments' address space";
  EXPECT_EQ(d.reserve_address_range(8 * MiB), nullptr) << "8 MiB of address space left";
  void* b = d.reserve_address_range(6 * MiB);
  ASSERT_NE(b, nullptr);
  const auto ua = reinterpret_cast<std::uintptr_t>(a), ub = reinterpret_cast<std::uintptr_t>(b);
  EXPECT_TRUE(ub >= ua + 8 * MiB + G || ua >= ub + 6 * MiB + G) << "ranges are apart";
  EXPECT_EQ(d.counters().failed_range_reserves, 1u);
  d.release_address_range(a, 8 * MiB);
  void* c = d.reserve_address_range(8 * MiB);
  EXPECT_EQ(c, a) << "a released range's address space is reused";
  d.release_address_range(c, 8 * MiB);
  d.release_address_range(b, 6 * MiB);
  d.free_segment(seg, MiB);
}

TEST(simulated_vm, BigCapacitiesNeedNoHostMemory) {
  simulated_device d(vm_opts(std::size_t{512} << 30));
  EXPECT_EQ(d.vm_address_space(), std::size_t{32} << 40);
  void* r = d.reserve_address_range(std::size_t{512} << 30);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(d.map_chunk(r, std::size_t{400} << 30));
  void* seg = d.allocate_segment(std::size_t{100} << 30, nullptr);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(d.memory_info().free, std::size_t{12} << 30);
  EXPECT_FALSE(d.map_chunk(at(r, std::size_t{400} << 30), std::size_t{20} << 30));
  d.unmap_chunk(r, std::size_t{400} << 30);
  d.free_segment(seg, std::size_t{100} << 30);
  d.release_address_range(r, std::size_t{512} << 30);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/// Limits this process's address space to what it uses now plus `extra` bytes while alive
/// (sanitizers reserve terabytes of shadow memory, so the tests using it do not run there).
class address_space_limit {
 public:
  explicit address_space_limit(std::size_t extra) {
    getrlimit(RLIMIT_AS, &old_);
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    statm >> pages;
    rlimit lim = old_;
    lim.rlim_cur = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + extra;
    ok_ = setrlimit(RLIMIT_AS, &lim) == 0;
  }
  ~address_space_limit() { setrlimit(RLIMIT_AS, &old_); }
  address_space_limit(const address_space_limit&) = delete;
  address_space_limit& operator=(const address_space_limit&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

TEST(simulated_vm, TheDefaultAddressSpaceShrinksWhereTheHostRefusesIt) {
  simulated_device d(vm_opts(GiB, true));  // asks for 64 GiB
  address_space_limit limit(20 * GiB);
  ASSERT_TRUE(limit.ok());
  void* r = d.reserve_address_range(GiB);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(d.vm_address_space(), 16 * GiB) << "64, 32 refused; 16 GiB fits under the limit";
  ASSERT_TRUE(d.map_chunk(r, G));
  static_cast<char*>(r)[1] = 1;  // host-backed: real memory
  d.unmap_chunk(r, G);
  d.release_address_range(r, GiB);
}

TEST(simulated_vm, ARefusedReservationIsSyntheticOrAnError) {
  address_space_limit limit(GiB);
  ASSERT_TRUE(limit.ok());
  simulated_device bare(vm_opts(GiB));  // segments: 2 GiB refused, synthetic
  void* r = bare.reserve_address_range(GiB);
  ASSERT_NE(r, nullptr) << "synthetic addresses, nothing behind them";
  ASSERT_TRUE(bare.map_chunk(r, GiB));
  EXPECT_TRUE(bare.is_mapped(r, GiB));
  bare.unmap_chunk(r, GiB);
  bare.release_address_range(r, GiB);
  sim_options o = vm_opts(64 * MiB, true);  // segments fit
  o.vm_address_space = 4 * GiB;             // asked for exactly: never shrunk
  simulated_device host(o);
  EXPECT_EQ(backend_error_with([&] { (void)host.reserve_address_range(G); },
                               "cannot reserve 4294967296 B of address space"),
            "");
  EXPECT_EQ(host.counters().live_ranges, 0u);
}
#endif

TEST(simulated_vm, RejectsBadOptions) {
  sim_options o = vm_opts(64 * MiB);
  o.vm_granularity = 3 * MiB;
  EXPECT_THROW(simulated_device{o}, invalid_argument);
  o.vm_granularity = 0;
  EXPECT_THROW(simulated_device{o}, invalid_argument);
  o.vm_granularity = 512;
  EXPECT_NO_THROW(simulated_device{o}) << "no host backing: any power of two";
  o.host_backing = true;
  EXPECT_THROW(simulated_device{o}, invalid_argument) << "host backing needs whole pages";
  o.vm_granularity = G;
  o.vm_address_space = std::size_t{1} << 60;
  EXPECT_THROW(simulated_device{o}, invalid_argument);
}

TEST(simulated_vm, InjectsFaultsInEachOperation) {
  simulated_device d(vm_opts(16 * MiB, true));
  d.fail_nth(sim_op::reserve_address_range, 1);
  EXPECT_EQ(d.reserve_address_range(8 * MiB), nullptr);
  EXPECT_EQ(d.counters().failed_range_reserves, 1u);
  EXPECT_EQ(d.counters().live_ranges, 0u);
  auto* r = static_cast<unsigned char*>(d.reserve_address_range(8 * MiB));
  ASSERT_NE(r, nullptr);

  d.fail_nth(sim_op::map_chunk, 1);
  EXPECT_FALSE(d.map_chunk(r, G)) << "fails as out of memory";
  EXPECT_FALSE(d.is_mapped(r, 1));
  EXPECT_EQ(protection(r), "---p") << "nothing mapped";
  EXPECT_EQ(d.counters().mapped_bytes, 0u);
  EXPECT_EQ(d.counters().failed_chunk_maps, 1u);
  ASSERT_TRUE(d.map_chunk(r, G));
  r[7] = 42;

  d.fail_nth(sim_op::unmap_chunk, 1);
  EXPECT_EQ(backend_error_with([&] { d.unmap_chunk(r, G); }, "injected failure of unmap_chunk"),
            "");
  EXPECT_TRUE(d.is_mapped(r, G)) << "the chunk stays mapped";
  EXPECT_EQ(r[7], 42) << "with its content";
  EXPECT_EQ(d.counters().mapped_bytes, G);

  d.fail_nth(sim_op::release_address_range, 1);
  EXPECT_THROW(d.release_address_range(r, 8 * MiB), backend_error) << "misuse: a chunk mapped";
  d.unmap_chunk(r, G);
  EXPECT_EQ(backend_error_with([&] { d.release_address_range(r, 8 * MiB); },
                               "injected failure of release_address_range"),
            "")
      << "misuse is checked first and does not use up the planned fault";
  EXPECT_EQ(d.counters().live_ranges, 1u) << "the range stays reserved";
  ASSERT_TRUE(d.map_chunk(r + 2 * G, G)) << "and usable";
  d.unmap_chunk(r + 2 * G, G);
  d.release_address_range(r, 8 * MiB);

  d.fail_always(sim_op::map_chunk, true);
  void* r2 = d.reserve_address_range(4 * MiB);
  EXPECT_FALSE(d.map_chunk(r2, G));
  EXPECT_FALSE(d.map_chunk(r2, G));
  d.fail_always(sim_op::map_chunk, false);
  d.release_address_range(r2, 4 * MiB);
  const sim_counters c = d.counters();
  EXPECT_EQ(c.injected_faults, 6u);
  EXPECT_EQ(d.calls(sim_op::reserve_address_range), 3u);
  EXPECT_EQ(d.calls(sim_op::map_chunk), 5u);
  EXPECT_EQ(d.calls(sim_op::unmap_chunk), 3u);
  EXPECT_EQ(d.calls(sim_op::release_address_range), 3u) << "the misused call is not counted";
  EXPECT_EQ(c.live_ranges, 0u);
  EXPECT_EQ(c.live_chunks, 0u);
}

// Threads map, write, check and unmap chunks of their own slots in shared ranges while another
// allocates and frees segments, all competing for a capacity smaller than what they ask for.
TEST(simulated_vm, ConcurrentMapsAndUnmapsKeepTheAccountsExact) {
  constexpr int threads = 4;
  constexpr int slots = 4;  // per thread
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  constexpr int rounds = 300;
#else
  constexpr int rounds = 2000;
#endif
  sim_options o = vm_opts(5 * 64 * KiB, true);
  o.vm_granularity = 64 * KiB;
  simulated_device d(o);
  const std::size_t g = d.vm_granularity();
  auto* shared = static_cast<unsigned char*>(d.reserve_address_range(threads * slots * g));
  ASSERT_NE(shared, nullptr);
  std::atomic<std::uint64_t> maps{0}, failed{0}, segs{0};
  std::atomic<bool> bad{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        unsigned char* p = shared + (static_cast<std::size_t>(t * slots + i % slots)) * g;
        if (!d.map_chunk(p, g)) {
          ++failed;
          continue;
        }
        ++maps;
        p[i % g] = static_cast<unsigned char>(t + 1);
        if (p[i % g] != t + 1 || !d.is_mapped(p, g)) bad = true;
        d.unmap_chunk(p, g);
        if (t % 2 == 0 && i % 16 == 0) {  // half the threads also reserve ranges of their own
          void* own = d.reserve_address_range(2 * g);
          if (own == nullptr)
            bad = true;
          else
            d.release_address_range(own, 2 * g);
        }
      }
    });
  }
  pool.emplace_back([&] {
    for (int i = 0; i < rounds; ++i) {
      void* s = d.allocate_segment(3 * g, nullptr);
      if (s == nullptr) continue;
      ++segs;
      if (d.memory_info().free > o.capacity - 3 * g) bad = true;
      d.free_segment(s, 3 * g);
    }
  });
  for (std::thread& th : pool) th.join();
  EXPECT_FALSE(bad.load());
  const sim_counters c = d.counters();
  EXPECT_EQ(c.chunk_maps, maps.load());
  EXPECT_EQ(c.chunk_unmaps, maps.load());
  EXPECT_EQ(c.failed_chunk_maps, failed.load());
  EXPECT_EQ(maps + failed, std::uint64_t{threads} * rounds);
  EXPECT_EQ(c.segment_allocs, segs.load());
  EXPECT_EQ(c.live_chunks, 0u);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(c.used_bytes, 0u);
  EXPECT_EQ(c.live_ranges, 1u);
  EXPECT_EQ(d.memory_info().free, o.capacity);
  d.release_address_range(shared, threads * slots * g);
}

}  // namespace
}  // namespace cachalot
