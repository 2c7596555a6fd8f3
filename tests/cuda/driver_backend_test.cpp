// The CUDA backend on the driver API, run against the fake driver (fake_driver/fake_cuda.cpp) on
// any machine: the loader (missing library, not a driver, old drivers, missing entry points,
// cuInit failing, both cuGetProcAddress generations), the context rule (a thread without a
// context keeps none; a thread on device 1 stays on device 1), segments and out of memory,
// events and stream handles, errors that name the call, shutdown errors as no-ops, the virtual
// memory calls (failed partial maps cleaned up), peers, graph capture queries and the capture
// interaction mode, and the allocator on top. The paths of the fake and of its CUDA 11.4 and
// 11.2 builds are compiled in; CACHALOT_CUDA_DRIVER is set to the fake before main().
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cachalot/cachalot.hpp"
#include "cachalot/cuda_backend.hpp"
#include "detail/cuda_driver.hpp"
#include "fake_driver/fake_cuda_control.hpp"

namespace cachalot::testing {
namespace {

namespace cu = detail::cu;
constexpr std::size_t kGranularity = 2 * MiB;

// Before main(), so before anything loads the driver.
const bool g_fake_driver_chosen = [] {
  setenv("CACHALOT_CUDA_DRIVER", CACHALOT_TEST_FAKE_CUDA, 1);
  unsetenv("FAKECU_CONFIG");
  return true;
}();

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

stream_t handle(std::uintptr_t v) {
  return reinterpret_cast<stream_t>(v);
}

// Runs `body` on a new thread (which starts with no current context) and waits for it.
template <class F>
void on_new_thread(F&& body) {
  std::thread t(std::forward<F>(body));
  t.join();
}

class FakeDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = CACHALOT_TEST_FAKE_CUDA;
    ctl_ = std::make_unique<fake_cuda_control>(path_);
  }
  void SetUp() override {
    ASSERT_TRUE(g_fake_driver_chosen);
    ASSERT_TRUE(ctl_->ok()) << ctl_->error;
    ctl_->configure("");
    ASSERT_EQ(ctl_->current_device(), -1) << "a previous test left a context current";
  }
  void TearDown() override {
    ctl_->configure("");
    ctl_->set_deinitialized(0);
    EXPECT_EQ(ctl_->current_device(), -1) << "the test thread was left with a context";
  }
  fake_cuda_control& ctl() { return *ctl_; }

  static std::string path_;
  static std::unique_ptr<fake_cuda_control> ctl_;
};
std::string FakeDriver::path_;
std::unique_ptr<fake_cuda_control> FakeDriver::ctl_;

// --- The loader ---------------------------------------------------------------------------------

TEST_F(FakeDriver, LoadsAndResolvesEveryEntryPointByVersionWithTheLegacyStreamFlag) {
  const cu::driver_load d = cu::load_driver(path_.c_str());
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.version, 12040);
  EXPECT_TRUE(d.vm_missing.empty()) << d.vm_missing;
  EXPECT_EQ(ctl().proc_version("cuMemAlloc"), 3020);
  EXPECT_EQ(ctl().proc_version("cuDevicePrimaryCtxRelease"), 11000);
  EXPECT_EQ(ctl().proc_version("cuStreamIsCapturing"), 10000);
  EXPECT_EQ(ctl().proc_version("cuMemMap"), 10020);
  EXPECT_EQ(ctl().proc_flags("cuEventRecord"), 1) << "CU_GET_PROC_ADDRESS_LEGACY_STREAM";
  EXPECT_EQ(ctl().proc_flags("cuStreamIsCapturing"), 1);
}

#ifdef CACHALOT_TEST_FAKE_CUDA_FROM_TOOLKIT
// The fake built against the toolkit's cudaTypedefs.h answers cuGetProcAddress as the real driver
// would: base names only, the newest ABI not newer than the version asked, and a request whose
// version selects another ABI than the fake implements is refused and recorded.
TEST_F(FakeDriver, CuGetProcAddressAnswersFromTheToolkitsTable) {
  using get_proc_fn = int (*)(const char*, void**, int, std::uint64_t, int*);
  auto* get_proc = reinterpret_cast<get_proc_fn>(dlsym(ctl().handle, "cuGetProcAddress_v2"));
  ASSERT_NE(get_proc, nullptr);
  ctl().configure("version=13000");
  void* fn = nullptr;
  int status = -1;
  EXPECT_EQ(get_proc("cuMemAlloc", &fn, 3020, 1, &status), 0);
  EXPECT_EQ(status, 0);
  EXPECT_NE(fn, nullptr);
  EXPECT_EQ(get_proc("cuMemAlloc_v2", &fn, 3020, 1, &status), 0);
  EXPECT_EQ(status, 1)
      << "a versioned name is not a base name: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND";
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(get_proc("cuMemAlloc", &fn, 3010, 1, &status), cu::kErrorNotSupported);
  EXPECT_EQ(ctl().abi_mismatch("cuMemAlloc"), 2000) << "CUDA 3.1 selects the 32-bit cuMemAlloc";
  EXPECT_EQ(get_proc("cuCtxSynchronize", &fn, 13000, 1, &status), cu::kErrorNotSupported);
  EXPECT_EQ(ctl().abi_mismatch("cuCtxSynchronize"), 13000) << "CUDA 13.0 takes a context";
  EXPECT_EQ(get_proc("cuStreamIsCapturing", &fn, 10000, 2, &status), cu::kErrorNotSupported);
  EXPECT_EQ(ctl().abi_mismatch("cuStreamIsCapturing"), -10000) << "the per-thread variant";
  EXPECT_EQ(get_proc("cuEventRecord", &fn, 1000, 1, &status), 0);
  EXPECT_EQ(status, 2) << "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT";
}
#endif

TEST_F(FakeDriver, MissingLibraryIsNamedWithTheLoadersMessage) {
  const cu::driver_load d = cu::load_driver("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error, "/nonexistent/libcuda.so.1")) << d.error;
  EXPECT_TRUE(contains(d.error, "No such file")) << d.error;
  EXPECT_TRUE(contains(d.error, "CACHALOT_CUDA_DRIVER")) << d.error;
}

TEST_F(FakeDriver, ALibraryThatIsNoDriverIsRefused) {
  const cu::driver_load d = cu::load_driver("libm.so.6");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error, "not a CUDA driver")) << d.error;
}

TEST_F(FakeDriver, ADriverOlderThan11_3IsRefusedWithItsVersion) {
  const cu::driver_load d = cu::load_driver(CACHALOT_TEST_FAKE_CUDA_OLD);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.version, 11020);
  EXPECT_TRUE(contains(d.error, "version 11.2")) << d.error;
  EXPECT_TRUE(contains(d.error, "11.3")) << d.error;
  EXPECT_TRUE(contains(d.error, "cuGetProcAddress")) << d.error;
  // The same refusal when the version alone is too old.
  ctl().configure("version=11020");
  EXPECT_TRUE(contains(cu::load_driver(path_.c_str()).error, "older than the 11.3"));
}

TEST_F(FakeDriver, A11_xDriverWithOnlyTheFirstCuGetProcAddressWorks) {
  const cu::driver_load d = cu::load_driver(CACHALOT_TEST_FAKE_CUDA_V1);
  EXPECT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.version, 11040);
  EXPECT_NE(d.api.MemAlloc, nullptr);
}

TEST_F(FakeDriver, AMissingRequiredEntryPointIsNamed) {
  ctl().configure("hide=cuMemAlloc");
  const cu::driver_load d = cu::load_driver(path_.c_str());
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error, "lacks cuMemAlloc")) << d.error;
  EXPECT_TRUE(contains(d.error, "CUDA 3.2")) << d.error;
}

TEST_F(FakeDriver, AMissingVirtualMemoryEntryPointOnlyDisablesVirtualMemory) {
  ctl().configure("hide=cuMemMap");
  const cu::driver_load d = cu::load_driver(path_.c_str());
  EXPECT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(contains(d.vm_missing, "cuMemMap")) << d.vm_missing;
}

TEST_F(FakeDriver, CuInitFailureIsNamedWithTheCudaError) {
  ctl().configure("init=100");
  const cu::driver_load d = cu::load_driver(path_.c_str());
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error, "cuInit(0)")) << d.error;
  EXPECT_TRUE(contains(d.error, "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"))
      << d.error;
}

TEST_F(FakeDriver, TheProcessSeesTheFakeDevices) {
  EXPECT_TRUE(cuda_backend_built());
  EXPECT_EQ(cuda_device_count(), 2);
  EXPECT_EQ(cuda_unavailable_reason(), "");
  EXPECT_EQ(cuda_driver_version(), 12040);
  config cfg;  // backend:auto takes CUDA where a device exists
  cfg.device = 1;
  allocator a(cfg);
  EXPECT_EQ(a.backend().name(), "cuda");
  EXPECT_EQ(a.backend().device(), 1);
}

// --- Devices and contexts -----------------------------------------------------------------------

TEST_F(FakeDriver, ANonexistentDeviceIsABackendErrorSayingSo) {
  try {
    (void)make_cuda_backend(2);
    FAIL() << "device 2 of 2 should not exist";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA device 2 does not exist (2 device(s) visible)"))
        << e.what();
  }
  EXPECT_THROW((void)make_cuda_backend(-1), backend_error);
}

TEST_F(FakeDriver, ThePrimaryContextIsRetainedForTheBackendsLife) {
  EXPECT_EQ(ctl().primary_refcount(1), 0);
  {
    auto b = make_cuda_backend(1);
    EXPECT_EQ(ctl().primary_refcount(1), 1);
    EXPECT_EQ(ctl().primary_refcount(0), 0) << "device 1's backend touched device 0";
  }
  EXPECT_EQ(ctl().primary_refcount(1), 0);
}

// Every backend operation, once.
void exercise(device_backend& b) {
  void* seg = b.allocate_segment(MiB, nullptr);
  ASSERT_NE(seg, nullptr);
  const event_t ev = b.create_event();
  b.record_event(ev, handle(0x5000));
  EXPECT_TRUE(b.query_event(ev));
  b.synchronize_event(ev);
  b.destroy_event(ev);
  (void)b.memory_info();
  EXPECT_FALSE(b.is_capturing(handle(0x5000)));
  b.synchronize_device();
  void* range = b.reserve_address_range(4 * kGranularity);
  ASSERT_TRUE(b.map_chunk(range, kGranularity));
  b.unmap_chunk(range, kGranularity);
  b.release_address_range(range, 4 * kGranularity);
  b.free_segment(seg, MiB);
}

TEST_F(FakeDriver, AThreadWithoutAContextStillHasNoneAfterEveryCall) {
  on_new_thread([&] {
    ASSERT_EQ(ctl().current_device(), -1);
    auto b = make_cuda_backend(0);
    EXPECT_EQ(ctl().current_device(), -1) << "make_cuda_backend left a context current";
    exercise(*b);
    EXPECT_EQ(ctl().current_device(), -1);
    EXPECT_EQ(ctl().context_depth(), 0);
    EXPECT_EQ(cuda_device_count(), 2);
    EXPECT_EQ(ctl().current_device(), -1);
  });
}

TEST_F(FakeDriver, AThreadOnDevice1StaysOnDevice1AfterUsingDevice0) {
  on_new_thread([&] {
    ctl().runtime_set_device(1);  // as cudaSetDevice(1) would
    auto b = make_cuda_backend(0);
    void* seg = b->allocate_segment(MiB, nullptr);
    EXPECT_EQ(ctl().device_of(reinterpret_cast<std::uintptr_t>(seg)), 0)
        << "the segment was not allocated on the backend's device";
    EXPECT_EQ(ctl().current_device(), 1);
    exercise(*b);
    EXPECT_EQ(ctl().current_device(), 1);
    EXPECT_EQ(ctl().context_depth(), 1);
    b->free_segment(seg, MiB);
    EXPECT_EQ(ctl().current_device(), 1);
    ctl().runtime_reset(1);
  });
}

TEST_F(FakeDriver, TheCallersContextIsRestoredWhenACallFails) {
  on_new_thread([&] {
    ctl().runtime_set_device(1);
    auto b = make_cuda_backend(0);
    ctl().fail("cuEventCreate", 1, cu::kErrorUnknown);
    EXPECT_THROW((void)b->create_event(), backend_error);
    EXPECT_EQ(ctl().current_device(), 1);
    ctl().runtime_reset(1);
  });
  on_new_thread([&] {
    auto b = make_cuda_backend(0);
    ctl().fail("cuMemGetInfo", 1, cu::kErrorUnknown);
    EXPECT_THROW((void)b->memory_info(), backend_error);
    EXPECT_EQ(ctl().current_device(), -1);
  });
}

TEST_F(FakeDriver, ManyThreadsUseBothDevicesConcurrently) {
  auto b0 = make_cuda_backend(0);
  auto b1 = make_cuda_backend(1);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      if (t % 2 == 1) ctl().runtime_set_device(1);
      for (int i = 0; i < 200; ++i) {
        device_backend& b = (i + t) % 2 == 0 ? *b0 : *b1;
        void* p = b.allocate_segment(4096, nullptr);
        if (ctl().device_of(reinterpret_cast<std::uintptr_t>(p)) != b.device()) ++wrong;
        b.free_segment(p, 4096);
        if (ctl().current_device() != (t % 2 == 1 ? 1 : -1)) ++wrong;
      }
      if (t % 2 == 1) ctl().runtime_reset(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(ctl().live("allocations"), 0);
}

// --- Segments, events, errors
// ---------------------------------------------------------------------

TEST_F(FakeDriver, OutOfMemoryReturnsNullAndTheDeviceKeepsWorking) {
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->memory_info().total, GiB);
  EXPECT_EQ(b->allocate_segment(2 * GiB, nullptr), nullptr);
  void* p = b->allocate_segment(MiB, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % b->segment_alignment(), 0u);
  EXPECT_EQ(b->memory_info().free, GiB - MiB);
  b->free_segment(p, MiB);
  EXPECT_EQ(ctl().used_bytes(0), 0u);
}

TEST_F(FakeDriver, FailedCallsNameTheCallTheCudaErrorAndTheSourceLocation) {
  auto b = make_cuda_backend(0);
  void* p = b->allocate_segment(MiB, nullptr);
  ctl().fail("cuMemFree", 1, cu::kErrorInvalidValue);
  try {
    b->free_segment(p, MiB);
    FAIL() << "the injected cuMemFree failure was not reported";
  } catch (const backend_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cuMemFree(")) << what;
    EXPECT_TRUE(contains(what, "CUDA_ERROR_INVALID_VALUE (invalid argument)")) << what;
    EXPECT_TRUE(contains(e.file(), "cuda_backend")) << e.file();
    EXPECT_GT(e.line(), 0);
  }
  b->free_segment(p, MiB);  // nothing changed: it can still be freed
  ctl().fail("cuMemAlloc", 1, cu::kErrorInvalidDevice);
  try {
    (void)b->allocate_segment(MiB, nullptr);
    FAIL() << "an allocation error other than out of memory must throw";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "cuMemAlloc(")) << e.what();
    EXPECT_TRUE(contains(e.what(), "CUDA_ERROR_INVALID_DEVICE")) << e.what();
  }
  ctl().fail("cuEventQuery", 1, 12345);
  const event_t ev = b->create_event();
  try {
    (void)b->query_event(ev);
    FAIL();
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA driver error 12345")) << e.what();
  }
  b->destroy_event(ev);
}

TEST_F(FakeDriver, EveryDriverCallIsTimedAndCountedByKind) {
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->call_stats().timing, device_timing::measured);
  EXPECT_EQ(b->allocate_segment(2 * GiB, nullptr), nullptr);  // a failed call is counted too
  void* p = b->allocate_segment(MiB, nullptr);
  ASSERT_NE(p, nullptr);
  b->free_segment(p, MiB);
  const event_t ev = b->create_event();
  b->record_event(ev, nullptr);
  EXPECT_TRUE(b->query_event(ev));
  b->synchronize_event(ev);
  b->synchronize_device();
  b->destroy_event(ev);
  void* range = b->reserve_address_range(4 * kGranularity);
  ASSERT_NE(range, nullptr);
  ASSERT_TRUE(b->map_chunk(range, kGranularity));
  b->unmap_chunk(range, kGranularity);
  b->release_address_range(range, 4 * kGranularity);
  const device_call_stats s = b->call_stats();
  const std::pair<device_call, std::uint64_t> want[] = {
      {device_call::segment_alloc, 2}, {device_call::segment_free, 1},
      {device_call::event_create, 1},  {device_call::event_record, 1},
      {device_call::event_query, 1},   {device_call::event_sync, 1},
      {device_call::device_sync, 1},   {device_call::range_reserve, 1},
      {device_call::range_release, 1}, {device_call::chunk_create, 1},
      {device_call::chunk_map, 1},     {device_call::chunk_access, 1},
      {device_call::chunk_unmap, 1},   {device_call::chunk_release, 1},
      {device_call::stream_sync, 0},   {device_call::copy, 0}};
  for (const auto& [kind, calls] : want) {
    EXPECT_EQ(s.calls_of(kind), calls) << device_call_name(kind);
  }
  EXPECT_EQ(s.total_calls(), 15u);
  EXPECT_EQ(s.implied_syncs, 1u);    // the cuMemFree
  EXPECT_EQ(s.implied_sync_ns, 0u);  // measured: inside the free's own time
  std::uint64_t sum = 0;
  for (const std::uint64_t ns : s.ns) sum += ns;
  EXPECT_EQ(s.total_ns(), sum);  // wall times (any value: never asserted)
  // The allocator on top reports the backend's figures.
  allocator a(config::parse("backend:cuda,device:0"), b);
  a.deallocate(a.allocate(MiB, nullptr));
  const memory_stats st = a.stats();
  EXPECT_EQ(st.device.timing, device_timing::measured);
  EXPECT_EQ(st.device.calls_of(device_call::segment_alloc), 3u);
}

TEST_F(FakeDriver, EventsHaveTimingDisabledAndQueryFollowsTheStream) {
  auto b = make_cuda_backend(0);
  const event_t ev = b->create_event();
  EXPECT_EQ(ctl().last_event_flags(), cu::kEventDisableTiming);
  const stream_t s = handle(0x7000);
  ctl().hold_stream(s, 1);
  b->record_event(ev, s);
  EXPECT_FALSE(b->query_event(ev));
  EXPECT_FALSE(b->query_event(ev));
  ctl().hold_stream(s, 0);
  EXPECT_TRUE(b->query_event(ev));
  b->destroy_event(ev);
  EXPECT_EQ(ctl().live("events"), 0);
}

TEST_F(FakeDriver, RuntimeStreamHandlesReachTheDriverUnchanged) {
  auto b = make_cuda_backend(0);
  const event_t ev = b->create_event();
  for (const std::uintptr_t h :
       {std::uintptr_t{0}, std::uintptr_t{0x1}, std::uintptr_t{0x2}, std::uintptr_t{0x123450}}) {
    b->record_event(ev, handle(h));
    EXPECT_EQ(ctl().last_record_stream(), handle(h));
  }
  b->destroy_event(ev);
}

TEST_F(FakeDriver, ShutdownErrorsOfReleasingCallsAreNoOps) {
  auto b = make_cuda_backend(0);
  void* seg = b->allocate_segment(MiB, nullptr);
  const event_t ev = b->create_event();
  void* range = b->reserve_address_range(2 * kGranularity);
  ASSERT_TRUE(b->map_chunk(range, kGranularity));
  ctl().set_deinitialized(1);  // the driver is shutting down: every call says so
  EXPECT_NO_THROW(b->free_segment(seg, MiB));
  EXPECT_NO_THROW(b->destroy_event(ev));
  EXPECT_NO_THROW(b->unmap_chunk(range, kGranularity));
  EXPECT_NO_THROW(b->release_address_range(range, 2 * kGranularity));
  try {
    (void)b->allocate_segment(MiB, nullptr);
    FAIL() << "an allocation while the driver shuts down must fail";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA_ERROR_DEINITIALIZED")) << e.what();
  }
  EXPECT_NO_THROW(b.reset());  // releasing the primary context at exit is a no-op too
  ctl().set_deinitialized(0);
  ctl().reclaim();  // what the driver does at exit: the segment, event and chunk are gone
  // Context destroyed (e.g. by a reset) counts the same for a free.
  auto b2 = make_cuda_backend(0);
  void* seg2 = b2->allocate_segment(MiB, nullptr);
  ctl().fail("cuMemFree", 1, cu::kErrorContextIsDestroyed);
  EXPECT_NO_THROW(b2->free_segment(seg2, MiB));
  b2.reset();
  ctl().reclaim();
}

// --- Virtual memory
// -------------------------------------------------------------------------------

TEST_F(FakeDriver, VirtualMemoryUsesTheMinimumGranularity) {
  auto b = make_cuda_backend(0);
  EXPECT_TRUE(b->supports_virtual_memory());
  EXPECT_EQ(b->vm_granularity(), kGranularity) << "the fake's recommended one is 4 MiB";
}

TEST_F(FakeDriver, MapsAndUnmapsChunksWithAccessForTheDevice) {
  auto b = make_cuda_backend(1);
  char* range = static_cast<char*>(b->reserve_address_range(16 * kGranularity));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(range) % kGranularity, 0u);
  ASSERT_TRUE(b->map_chunk(range, kGranularity));
  ASSERT_TRUE(b->map_chunk(range + kGranularity, 10 * kGranularity));
  EXPECT_EQ(ctl().live("mappings"), 2);
  EXPECT_EQ(ctl().used_bytes(1), 11 * kGranularity);
  EXPECT_EQ(ctl().mapping_access(reinterpret_cast<std::uintptr_t>(range)), 1u << 1);
  EXPECT_EQ(ctl().device_of(reinterpret_cast<std::uintptr_t>(range + kGranularity)), 1);
  b->unmap_chunk(range + kGranularity, 10 * kGranularity);
  b->unmap_chunk(range, kGranularity);
  EXPECT_EQ(ctl().live("mappings"), 0);
  EXPECT_EQ(ctl().live("handles"), 0);
  EXPECT_EQ(ctl().used_bytes(1), 0u);
  // A hole in the middle can be mapped again after its unmap.
  ASSERT_TRUE(b->map_chunk(range + 4 * kGranularity, kGranularity));
  b->unmap_chunk(range + 4 * kGranularity, kGranularity);
  b->release_address_range(range, 16 * kGranularity);
  EXPECT_EQ(ctl().live("reservations"), 0);
}

TEST_F(FakeDriver, ChunksAreUnmappedWholeAndContractBreachesChangeNothing) {
  auto b = make_cuda_backend(0);
  char* range = static_cast<char*>(b->reserve_address_range(16 * kGranularity));
  ASSERT_TRUE(b->map_chunk(range, 4 * kGranularity));
  EXPECT_THROW(b->unmap_chunk(range, kGranularity), backend_error);  // part of a chunk
  EXPECT_THROW(b->unmap_chunk(range + kGranularity, kGranularity), backend_error);
  EXPECT_THROW(b->unmap_chunk(range + 8 * kGranularity, kGranularity), backend_error);
  EXPECT_THROW((void)b->map_chunk(range + kGranularity, kGranularity), backend_error);
  EXPECT_THROW((void)b->map_chunk(range + 8 * kGranularity, MiB), backend_error);
  EXPECT_THROW((void)b->map_chunk(range + MiB, kGranularity), backend_error);
  EXPECT_THROW((void)b->reserve_address_range(3 * MiB), backend_error);
  EXPECT_THROW(b->release_address_range(range, 16 * kGranularity), backend_error);
  EXPECT_EQ(ctl().live("mappings"), 1);
  EXPECT_EQ(ctl().live("handles"), 1);
  b->unmap_chunk(range, 4 * kGranularity);
  b->release_address_range(range, 16 * kGranularity);
}

TEST_F(FakeDriver, AFailedMapLeavesNothingBehind) {
  auto b = make_cuda_backend(0);
  char* range = static_cast<char*>(b->reserve_address_range(16 * kGranularity));
  // Out of memory at each step: false, nothing mapped, nothing allocated.
  for (const char* step : {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}) {
    ctl().fail(step, 1, cu::kErrorOutOfMemory);
    EXPECT_FALSE(b->map_chunk(range, kGranularity)) << step;
    EXPECT_EQ(ctl().live("mappings"), 0) << step;
    EXPECT_EQ(ctl().live("handles"), 0) << step;
    EXPECT_EQ(ctl().used_bytes(0), 0u) << step;
  }
  // Any other failure: backend_error naming the call, nothing left either.
  for (const char* step : {"cuMemMap", "cuMemSetAccess"}) {
    ctl().fail(step, 1, cu::kErrorInvalidValue);
    try {
      (void)b->map_chunk(range, kGranularity);
      FAIL() << step;
    } catch (const backend_error& e) {
      EXPECT_TRUE(contains(e.what(), step)) << e.what();
    }
    EXPECT_EQ(ctl().live("mappings"), 0) << step;
    EXPECT_EQ(ctl().live("handles"), 0) << step;
  }
  // A chunk larger than the device: out of memory from the driver itself.
  char* big = static_cast<char*>(b->reserve_address_range(1024 * kGranularity));
  EXPECT_FALSE(b->map_chunk(big, 1024 * kGranularity));
  EXPECT_EQ(ctl().used_bytes(0), 0u);
  // And the range still works.
  ASSERT_TRUE(b->map_chunk(range, kGranularity));
  b->unmap_chunk(range, kGranularity);
  b->release_address_range(big, 1024 * kGranularity);
  b->release_address_range(range, 16 * kGranularity);
}

TEST_F(FakeDriver, AFailedUnmapKeepsTheChunkMapped) {
  auto b = make_cuda_backend(0);
  char* range = static_cast<char*>(b->reserve_address_range(4 * kGranularity));
  ASSERT_TRUE(b->map_chunk(range, kGranularity));
  ctl().fail("cuMemUnmap", 1, cu::kErrorUnknown);
  EXPECT_THROW(b->unmap_chunk(range, kGranularity), backend_error);
  EXPECT_EQ(ctl().live("mappings"), 1);
  b->unmap_chunk(range, kGranularity);  // the retry works: the backend still knows the chunk
  EXPECT_EQ(ctl().live("handles"), 0);
  b->release_address_range(range, 4 * kGranularity);
}

TEST_F(FakeDriver, ChunksStillMappedAreReleasedWithTheBackend) {
  {
    auto b = make_cuda_backend(0);
    char* range = static_cast<char*>(b->reserve_address_range(4 * kGranularity));
    ASSERT_TRUE(b->map_chunk(range, kGranularity));
    ASSERT_TRUE(b->map_chunk(range + kGranularity, 2 * kGranularity));
    EXPECT_EQ(ctl().used_bytes(0), 3 * kGranularity);
  }
  EXPECT_EQ(ctl().live("mappings"), 0);
  EXPECT_EQ(ctl().live("handles"), 0);
  EXPECT_EQ(ctl().used_bytes(0), 0u);
  ctl().reclaim();  // the reservation, which the engine would have released
}

TEST_F(FakeDriver, PeersGetAccessToMappedChunks) {
  auto b = make_cuda_backend(0, {1});
  char* range = static_cast<char*>(b->reserve_address_range(4 * kGranularity));
  ASSERT_TRUE(b->map_chunk(range, 2 * kGranularity));
  EXPECT_EQ(ctl().mapping_access(reinterpret_cast<std::uintptr_t>(range)), 0b11u);
  b->unmap_chunk(range, 2 * kGranularity);
  b->release_address_range(range, 4 * kGranularity);
  b.reset();
  EXPECT_THROW((void)make_cuda_backend(0, {0}), invalid_argument);
  EXPECT_THROW((void)make_cuda_backend(0, {1, 1}), invalid_argument);
  EXPECT_THROW((void)make_cuda_backend(0, {2}), backend_error);
  ctl().configure("peers=0");
  try {
    (void)make_cuda_backend(0, {1});
    FAIL() << "a peer without access must be refused";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot access the memory of device 0")) << e.what();
  }
  EXPECT_EQ(ctl().primary_refcount(0), 0) << "a failed construction kept the context";
}

TEST_F(FakeDriver, ADeviceWithoutVirtualMemoryManagementSaysWhy) {
  ctl().configure("vmm_off=1");
  auto b = make_cuda_backend(1);
  EXPECT_FALSE(b->supports_virtual_memory());
  try {
    (void)b->reserve_address_range(kGranularity);
    FAIL();
  } catch (const not_supported& e) {
    EXPECT_TRUE(contains(e.what(), "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0")) << e.what();
  }
  void* p = b->allocate_segment(MiB, nullptr);  // segments work as before
  b->free_segment(p, MiB);
}

// --- Graph capture ------------------------------------------------------------------------------

TEST_F(FakeDriver, ReportsCaptureOfAStreamAndOfTheLegacyStream) {
  auto b = make_cuda_backend(0);
  const stream_t s = handle(0x8000);
  EXPECT_FALSE(b->is_capturing(s));
  EXPECT_FALSE(b->is_capturing(nullptr));
  ctl().begin_capture(0, s, cu::kStreamCaptureModeThreadLocal);
  EXPECT_TRUE(b->is_capturing(s));
  EXPECT_FALSE(b->is_capturing(handle(0x9000)));
  EXPECT_TRUE(b->is_capturing(nullptr)) << "the legacy stream is implicitly captured";
  EXPECT_TRUE(b->is_capturing(handle(0x1)));
  EXPECT_FALSE(b->is_capturing(handle(0x2)));
  EXPECT_EQ(ctl().end_capture(s), 0) << "querying the capture invalidated it";
  EXPECT_FALSE(b->is_capturing(s));
}

// Another thread captures in global mode: a cuMemAlloc from this thread is prohibited and breaks
// that capture (issue 9 item 7), unless this thread's mode is this_thread or relaxed.
TEST_F(FakeDriver, TheCaptureModeScopeKeepsAnotherThreadsGlobalCaptureValid) {
  auto b = make_cuda_backend(0);
  const stream_t s = handle(0x8100);
  on_new_thread([&] { ctl().begin_capture(0, s, cu::kStreamCaptureModeGlobal); });
  try {
    (void)b->allocate_segment(MiB, nullptr);
    FAIL() << "the fake should prohibit cuMemAlloc during another thread's global capture";
  } catch (const backend_error& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED")) << e.what();
  }
  EXPECT_EQ(ctl().end_capture(s), cu::kErrorStreamCaptureInvalidated);

  on_new_thread([&] { ctl().begin_capture(0, s, cu::kStreamCaptureModeGlobal); });
  void* p = nullptr;
  {
    const capture_mode_scope scope(*b, capture_mode::this_thread);
    EXPECT_EQ(ctl().thread_capture_mode(), cu::kStreamCaptureModeThreadLocal);
    p = b->allocate_segment(MiB, nullptr);
    const event_t ev = b->create_event();
    b->record_event(ev, handle(0x9100));
    EXPECT_TRUE(b->query_event(ev));
    b->destroy_event(ev);
  }
  EXPECT_EQ(ctl().thread_capture_mode(), cu::kStreamCaptureModeGlobal) << "mode not restored";
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(ctl().end_capture(s), 0) << "the scope did not keep the capture valid";
  b->free_segment(p, MiB);
}

TEST_F(FakeDriver, ExchangeCaptureModeReturnsThePreviousMode) {
  auto b = make_cuda_backend(0);
  EXPECT_EQ(b->exchange_capture_mode(capture_mode::relaxed), capture_mode::global);
  EXPECT_EQ(b->exchange_capture_mode(capture_mode::this_thread), capture_mode::relaxed);
  EXPECT_EQ(b->exchange_capture_mode(capture_mode::global), capture_mode::this_thread);
  ctl().fail("cuThreadExchangeStreamCaptureMode", 1, cu::kErrorUnknown);
  EXPECT_THROW((void)b->exchange_capture_mode(capture_mode::relaxed), backend_error);
  EXPECT_EQ(ctl().thread_capture_mode(), cu::kStreamCaptureModeGlobal);
}

// --- Events on streams of other contexts (cuEventRecord: "hEvent and hStream must be from the
// same context") ----------------------------------------------------------------------------------

TEST_F(FakeDriver, TheFakeRefusesAnEventAndAStreamOfDifferentContexts) {
  const cu::driver_api& d = cu::driver();
  void* s0 = ctl().create_stream(0);
  void* s1 = ctl().create_stream(1);
  on_new_thread([&] {
    ctl().runtime_set_device(0);
    cu::CUevent e = nullptr;
    ASSERT_EQ(d.EventCreate(&e, cu::kEventDisableTiming), cu::kSuccess);
    EXPECT_EQ(d.EventRecord(e, static_cast<cu::CUstream>(s1)), cu::kErrorInvalidHandle);
    EXPECT_EQ(d.EventRecord(e, static_cast<cu::CUstream>(s0)), cu::kSuccess);
    cu::CUcontext ctx = nullptr;
    ASSERT_EQ(d.StreamGetCtx(static_cast<cu::CUstream>(s1), &ctx), cu::kSuccess);
    cu::CUcontext ctx1 = nullptr;
    ASSERT_EQ(d.DevicePrimaryCtxRetain(&ctx1, 1), cu::kSuccess);
    EXPECT_EQ(ctx, ctx1);
    (void)d.DevicePrimaryCtxRelease(1);
    EXPECT_EQ(d.EventDestroy(e), cu::kSuccess);
    ctl().runtime_reset(0);
  });
  ctl().destroy_stream(s0);
  ctl().destroy_stream(s1);
}

TEST_F(FakeDriver, AnEventIsRecordedOnAnotherDevicesStreamInThatStreamsContext) {
  auto b = make_cuda_backend(0);
  void* s1 = ctl().create_stream(1);
  const event_t ev = b->create_event();
  ctl().hold_stream(s1, 1);
  ASSERT_NO_THROW(b->record_event(ev, s1));
  EXPECT_EQ(ctl().last_record_stream(), s1);
  EXPECT_EQ(ctl().live("events"), 2) << "an event of device 1's context, created on first use";
  EXPECT_FALSE(b->query_event(ev)) << "the query follows device 1's stream";
  ctl().hold_stream(s1, 0);
  EXPECT_TRUE(b->query_event(ev));
  b->record_event(ev, s1);  // the event of that context is reused
  EXPECT_EQ(ctl().live("events"), 2);
  b->synchronize_event(ev);
  b->record_event(ev, nullptr);  // and the home event serves the backend's own streams again
  EXPECT_TRUE(b->query_event(ev));
  EXPECT_EQ(ctl().current_device(), -1);
  b->destroy_event(ev);
  EXPECT_EQ(ctl().live("events"), 0) << "both events destroyed";
  ctl().destroy_stream(s1);
}

TEST_F(FakeDriver, AFreeOfABlockUsedOnAnotherDevicesStreamWaitsForThatStream) {
  void* s0 = ctl().create_stream(0);
  void* s1 = ctl().create_stream(1);
  {
    allocator a(config::parse("backend:cuda,device:0"));
    void* p = a.allocate(MiB, s0);
    a.record_stream(p, s1);
    ctl().hold_stream(s1, 1);
    ASSERT_NO_THROW(a.deallocate(p)) << "the event must be recorded in device 1's context";
    EXPECT_EQ(a.stats().num_pending_blocks, 1u);
    a.process_events();
    EXPECT_EQ(a.stats().num_pending_blocks, 1u) << "device 1's stream still runs";
    ctl().hold_stream(s1, 0);
    a.process_events();
    EXPECT_EQ(a.stats().num_pending_blocks, 0u);
    EXPECT_EQ(a.allocate(MiB, s0), p);
    a.deallocate(p);
    EXPECT_EQ(ctl().current_device(), -1);
  }
  EXPECT_EQ(ctl().live("events"), 0);
  ctl().destroy_stream(s0);
  ctl().destroy_stream(s1);
}

// --- The allocator on the driver backend
// ----------------------------------------------------------

TEST_F(FakeDriver, TheAllocatorRunsOnTheDriverBackend) {
  config cfg = config::parse("backend:cuda,device:1");
  {
    allocator a(cfg);
    std::vector<void*> ptrs;
    for (int i = 0; i < 50; ++i) ptrs.push_back(a.allocate(std::size_t(i + 1) * 100 * KiB));
    for (void* p : ptrs) {
      EXPECT_EQ(ctl().device_of(reinterpret_cast<std::uintptr_t>(p)), 1);
      a.deallocate(p);
    }
    EXPECT_GT(ctl().used_bytes(1), 0u);
    a.empty_cache();
    EXPECT_EQ(ctl().used_bytes(1), 0u);
    EXPECT_EQ(a.stats().reserved_bytes.all.current, 0u);
    EXPECT_THROW((void)a.allocate(2 * GiB), out_of_memory);
  }
  EXPECT_EQ(ctl().primary_refcount(1), 0);
  EXPECT_EQ(ctl().live("allocations"), 0);
}

// The sleep and wake of a tenant pool on the CUDA backend: the pinned host buffer
// (cuMemHostAlloc, cuMemFreeHost), the copies on the pool's stream (cuMemcpyDtoHAsync,
// cuMemcpyHtoDAsync), the device memory given back and mapped again at the same addresses. The
// fake driver keeps no contents, so the bytes themselves are checked on a GPU
// (cuda_sleep_test.cpp) and on the host-backed simulated device (pool_sleep_test.cpp).
TEST_F(FakeDriver, APoolSleepsAndWakesThroughPinnedHostCopiesOnTheDriverBackend) {
  void* s0 = ctl().create_stream(0);
  {
    allocator a(config::parse("backend:cuda,device:0,expandable_segments:1"));
    pool_options o;
    o.name = "batch";
    const pool_id batch = a.create_pool(o);
    void* p = a.allocate(3 * MiB, s0, batch);
    void* q = a.allocate(5 * MiB, s0, batch);
    ASSERT_GT(ctl().used_bytes(0), 0u);
    const long out0 = ctl().calls("cuMemcpyDtoHAsync");
    const long in0 = ctl().calls("cuMemcpyHtoDAsync");

    // Out of pinned memory: the sleep fails with out_of_memory and the pool stays awake.
    ctl().fail("cuMemHostAlloc", 1, cu::kErrorOutOfMemory);
    EXPECT_THROW((void)a.sleep(batch, sleep_mode::offload), out_of_memory);
    EXPECT_FALSE(a.pools()[batch].asleep);
    EXPECT_EQ(ctl().live("host"), 0);

    ASSERT_TRUE(a.sleep(batch, sleep_mode::offload));
    EXPECT_EQ(ctl().used_bytes(0), 0u) << "the sleeping pool gave its device memory back";
    EXPECT_EQ(ctl().live("host"), 1) << "one pinned buffer holds the live blocks";
    EXPECT_GT(ctl().calls("cuMemcpyDtoHAsync"), out0);
    EXPECT_GE(a.stats(batch).sleep.bytes_offloaded, 8 * MiB);
    EXPECT_EQ(a.stats(batch).reserved_bytes.all.current, 0u);
    EXPECT_THROW((void)a.allocate(MiB, s0, batch), pool_asleep);
    EXPECT_EQ(ctl().current_device(), -1);

    ASSERT_TRUE(a.wake(batch));
    EXPECT_GT(ctl().used_bytes(0), 0u);
    EXPECT_EQ(ctl().device_of(reinterpret_cast<std::uintptr_t>(p)), 0) << "mapped again";
    EXPECT_EQ(ctl().device_of(reinterpret_cast<std::uintptr_t>(q)), 0) << "mapped again";
    EXPECT_GT(ctl().calls("cuMemcpyHtoDAsync"), in0);
    EXPECT_EQ(ctl().live("host"), 0) << "the pinned buffer is freed after the copy back";
    EXPECT_EQ(a.pool_of(p), batch);

    // Discard: no pinned memory and no copies either way.
    const long out1 = ctl().calls("cuMemcpyDtoHAsync");
    const long in1 = ctl().calls("cuMemcpyHtoDAsync");
    ASSERT_TRUE(a.sleep(batch, sleep_mode::discard));
    EXPECT_EQ(ctl().used_bytes(0), 0u);
    EXPECT_EQ(ctl().live("host"), 0);
    ASSERT_TRUE(a.wake(batch));
    EXPECT_EQ(ctl().calls("cuMemcpyDtoHAsync"), out1);
    EXPECT_EQ(ctl().calls("cuMemcpyHtoDAsync"), in1);
    EXPECT_EQ(a.stats(batch).sleep.num_wakes, 2u);
    a.deallocate(p, s0);
    a.deallocate(q, s0);
    EXPECT_EQ(ctl().current_device(), -1);
  }
  EXPECT_EQ(ctl().live("allocations"), 0);
  EXPECT_EQ(ctl().live("host"), 0);
  ctl().destroy_stream(s0);
}

}  // namespace
}  // namespace cachalot::testing
