// The default allocators through the C API, each scenario in a fresh child process (fork), since
// default allocators live as long as their process: never the simulated device unless asked
// for, a clear error naming the cause otherwise (printed once on stderr); a bad CACHALOT_CONF
// named and printed once; configure-before-use rules; memory fractions; malloc/free/record/
// empty/reset/snapshot; reading before first use creating nothing; out-of-memory errors logged
// as one line (the summary at info); the graph-pool hooks refusing loudly; CACHALOT_LOG levels.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "cachalot/allocator.hpp"
#include "cachalot/cachalot.h"
#include "cachalot/config.hpp"
#include "cachalot/hooks.h"
#include "detail/log.hpp"
#include "support/isolated.hpp"

namespace {

using cachalot::detail::log_level;
using cachalot::test::child;
using cachalot::test::count;
using cachalot::test::isolated;

cachalot_stats stats(int device) {
  cachalot_stats s;
  cachalot_stats_init(&s);
  CHILD_EXPECT(cachalot_default_get_stats(device, &s) == CACHALOT_SUCCESS, cachalot_last_error());
  return s;
}

TEST(default_c_api, BackendAutoIsCudaOrAClearErrorNeverTheSimulatedDevice) {
  isolated(nullptr, log_level::warn, [](child& c) {
    void* p = nullptr;
    const cachalot_status st = cachalot_default_malloc(0, &p, 1024, nullptr);
    if (cachalot::cuda_device_count() > 0) {  // a GPU machine: CUDA serves
      CHILD_EXPECT(st == CACHALOT_SUCCESS, cachalot_last_error());
      std::size_t needed = 0;
      cachalot_default_memory_snapshot(0, nullptr, 0, &needed);
      std::string text(needed, '\0');
      cachalot_default_memory_snapshot(0, text.data(), needed, nullptr);
      CHILD_EXPECT(text.find(R"("backend":"cuda")") != std::string::npos, text);
      cachalot_default_free(0, p, 1024, nullptr);
      return;
    }
    CHILD_EXPECT(st == CACHALOT_ERROR_BACKEND || st == CACHALOT_ERROR_NOT_SUPPORTED,
                 cachalot_status_string(st));
    CHILD_EXPECT(p == nullptr, "no pointer on failure");
    const std::string why = cachalot_last_error();
    CHILD_EXPECT(why.find("cannot start on CUDA") != std::string::npos, why);
    CHILD_EXPECT(why.find("never fall back to the simulated device") != std::string::npos, why);
    CHILD_EXPECT(cachalot_default_exists(0) == 0, "nothing was created");
    // Every later call fails the same way (the hooks too), but stderr has it once.
    CHILD_EXPECT(cachalot_torch_malloc(1024, 0, nullptr) == nullptr, "hook returns NULL");
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 1024, nullptr) == st, "same status again");
    const std::string err = c.stderr_text();
    CHILD_EXPECT(count(err, "cannot start on CUDA") == 1, err);
    CHILD_EXPECT(err.rfind("cachalot [error] ", 0) == 0, err);
  });
}

TEST(default_c_api, BadConfigIsNamedAndPrintedOnce) {
  isolated("memory_limt:90%", log_level::warn, [](child& c) {
    void* p = nullptr;
    for (int i = 0; i < 3; ++i) {
      CHILD_EXPECT(cachalot_default_malloc(0, &p, 64, nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
                   cachalot_last_error());
    }
    CHILD_EXPECT(std::string(cachalot_last_error()).find("memory_limt") != std::string::npos,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_torch_malloc(64, 0, nullptr) == nullptr, "hook");
    CHILD_EXPECT(cachalot_default_configure(nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "configure(NULL) checks CACHALOT_CONF now");
    const std::string err = c.stderr_text();
    CHILD_EXPECT(count(err, "memory_limt") == 1, err);
    CHILD_EXPECT(count(err, "CACHALOT_CONF") == 1, err);
  });
}

TEST(default_c_api, ConfigureBeforeFirstUse) {
  isolated("backend:cuda", log_level::warn, [](child&) {
    CHILD_EXPECT(cachalot_default_configure("bogus_key:1") == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "bad config rejected");
    CHILD_EXPECT(std::string(cachalot_last_error()).find("bogus_key") != std::string::npos,
                 cachalot_last_error());
    const char* conf = "backend:simulated,capacity:1GiB";
    CHILD_EXPECT(cachalot_default_configure(conf) == CACHALOT_SUCCESS, cachalot_last_error());
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 4096, nullptr) == CACHALOT_SUCCESS,
                 cachalot_last_error());  // simulated, not the environment's backend:cuda
    CHILD_EXPECT(cachalot_default_exists(0) == 1 && cachalot_default_exists(1) == 0, "exists");
    CHILD_EXPECT(cachalot_default_configure(conf) == CACHALOT_SUCCESS, "same config again");
    CHILD_EXPECT(
        cachalot_default_configure("backend:simulated,capacity:1GiB,device:5") == CACHALOT_SUCCESS,
        "the device key does not make a config different");
    CHILD_EXPECT(cachalot_default_configure("backend:simulated,capacity:2GiB") ==
                     CACHALOT_ERROR_INVALID_ARGUMENT,
                 "another config after first use");
    const std::string why = cachalot_last_error();
    CHILD_EXPECT(why.find("device 0 exists already") != std::string::npos, why);
    CHILD_EXPECT(cachalot_default_configure(nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "CACHALOT_CONF differs from the config in use");
    // Nothing changed: device 1 is created with the configured config too.
    CHILD_EXPECT(cachalot_default_malloc(1, &p, 4096, nullptr) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(stats(1).reserved_bytes.all.current == 2u << 20, "device 1 works");
  });
}

TEST(default_c_api, MemoryFractionOnlyBeforeCreation) {
  isolated("backend:simulated,capacity:1GiB", log_level::off, [](child&) {
    CHILD_EXPECT(cachalot_default_set_memory_fraction(1, 0.25) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_default_set_memory_fraction(1, 1.5) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "fraction out of range");
    CHILD_EXPECT(cachalot_default_set_memory_fraction(64, 0.5) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "device out of range");
    void* p = nullptr;
    CHILD_EXPECT(
        cachalot_default_malloc(1, &p, 300u << 20, nullptr) == CACHALOT_ERROR_OUT_OF_MEMORY,
        "256 MiB limit on device 1");
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 300u << 20, nullptr) == CACHALOT_SUCCESS,
                 "no limit on device 0");
    CHILD_EXPECT(cachalot_default_set_memory_fraction(0, 0.5) == CACHALOT_ERROR_NOT_SUPPORTED,
                 "device 0 exists already");
    CHILD_EXPECT(
        std::string(cachalot_last_error()).find("before its first allocation") != std::string::npos,
        cachalot_last_error());
    CHILD_EXPECT(cachalot_default_set_memory_fraction(1, 0.25) == CACHALOT_SUCCESS,
                 "the fraction it has");
    cachalot_torch_set_memory_fraction(0.5, 0);  // the hook logs the failure, never throws
    CHILD_EXPECT(std::string(cachalot_last_error()).find("cachalot_torch_set_memory_fraction") !=
                     std::string::npos,
                 cachalot_last_error());
  });
}

TEST(default_c_api, AllocateFreeRecordEmptyReset) {
  isolated("backend:simulated,capacity:1GiB", log_level::off, [](child&) {
    void* p = nullptr;
    void* s1 = reinterpret_cast<void*>(0x100);
    void* s2 = reinterpret_cast<void*>(0x200);
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 0, nullptr) == CACHALOT_SUCCESS && p == nullptr,
                 "size 0");
    CHILD_EXPECT(
        cachalot_default_malloc(0, nullptr, 16, nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
        "NULL out");
    CHILD_EXPECT(cachalot_default_malloc(2, &p, 3u << 20, s1) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_default_record_stream(p, s2) == CACHALOT_SUCCESS, cachalot_last_error());
    CHILD_EXPECT(cachalot_default_free(0, p, 3u << 20, s1) == CACHALOT_SUCCESS,
                 "device 0 has no allocator: the owner frees it");
    CHILD_EXPECT(stats(2).active_bytes.all.current == 3u << 20, "awaits stream 2");
    CHILD_EXPECT(cachalot_default_free(2, p, 0, s1) == CACHALOT_ERROR_INVALID_POINTER,
                 "double free");
    CHILD_EXPECT(
        std::string(cachalot_last_error()).find("not a live allocation") != std::string::npos,
        cachalot_last_error());
    int local = 0;
    CHILD_EXPECT(cachalot_default_record_stream(&local, s2) == CACHALOT_ERROR_INVALID_POINTER,
                 "foreign pointer");
    CHILD_EXPECT(cachalot_default_free(2, nullptr, 0, nullptr) == CACHALOT_SUCCESS, "NULL");
    CHILD_EXPECT(stats(2).reserved_bytes.all.peak == 20u << 20, "peak");
    CHILD_EXPECT(cachalot_default_empty_cache(2) == CACHALOT_SUCCESS, cachalot_last_error());
    CHILD_EXPECT(stats(2).reserved_bytes.all.current == 0, "empty_cache completes the event");
    CHILD_EXPECT(cachalot_default_reset_peak_stats(2) == CACHALOT_SUCCESS, "reset");
    CHILD_EXPECT(stats(2).reserved_bytes.all.peak == 0, "peak reset");
    CHILD_EXPECT(cachalot_default_empty_cache(5) == CACHALOT_SUCCESS && !cachalot_default_exists(5),
                 "empty_cache creates nothing");
    CHILD_EXPECT(cachalot_default_empty_cache(CACHALOT_ALL_DEVICES) == CACHALOT_SUCCESS, "all");
    CHILD_EXPECT(cachalot_default_empty_cache(-7) == CACHALOT_ERROR_INVALID_ARGUMENT, "bad");
    CHILD_EXPECT(cachalot_default_reset_peak_stats(64) == CACHALOT_ERROR_INVALID_ARGUMENT, "bad");
    char small[4];
    CHILD_EXPECT(
        cachalot_default_memory_snapshot(2, nullptr, 4, nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
        "NULL buffer with a capacity");
    CHILD_EXPECT(
        cachalot_default_memory_snapshot(2, small, sizeof small, nullptr) == CACHALOT_SUCCESS &&
            std::string(small) == "{\"d",
        small);
  });
}

// Stats, summary and snapshot before the first allocation are zeros and create nothing, so
// that configuring afterwards still works (as torch.cuda.memory_stats() before CUDA starts).
TEST(default_c_api, ReadingBeforeFirstUseCreatesNothing) {
  isolated("backend:simulated,capacity:1GiB", log_level::warn, [](child& c) {
    cachalot_stats s = stats(0);
    CHILD_EXPECT(s.size == sizeof s, "filled whole");
    CHILD_EXPECT(s.reserved_bytes.all.current == 0 && s.allocated_bytes.all.peak == 0 &&
                     s.num_allocs == 0 && s.num_segment_allocs == 0 && s.num_streams == 0,
                 "zeros");
    CHILD_EXPECT(s.max_split_size == cachalot::config{}.max_split_size, "the config's");
    std::size_t needed = 0;
    CHILD_EXPECT(cachalot_default_memory_summary(0, nullptr, 0, &needed) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    std::string summary(needed, '\0');
    cachalot_default_memory_summary(0, summary.data(), needed, nullptr);
    summary.resize(needed - 1);
    CHILD_EXPECT(summary.find("device 0: no default allocator yet") != std::string::npos, summary);
    CHILD_EXPECT(summary.find("simulated backend") != std::string::npos, summary);
    CHILD_EXPECT(summary.find("| Allocated memory") != std::string::npos, summary);
    std::string snap(256, '\0');
    CHILD_EXPECT(
        cachalot_default_memory_snapshot(3, snap.data(), snap.size(), nullptr) == CACHALOT_SUCCESS,
        cachalot_last_error());
    CHILD_EXPECT(snap.c_str() == std::string(R"x({"device":3,"backend":"simulated","segments":[],)x"
                                             R"x("sleeping_pools":[]})x"),
                 snap);
    for (int d : {0, 3}) CHILD_EXPECT(cachalot_default_exists(d) == 0, "nothing created");
    // So another config can still be set, and it is the one used.
    CHILD_EXPECT(cachalot_default_configure("backend:simulated,capacity:2GiB") == CACHALOT_SUCCESS,
                 cachalot_last_error());
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 1536u << 20, nullptr) == CACHALOT_SUCCESS,
                 "the 2 GiB device");
    CHILD_EXPECT(stats(0).allocated_bytes.all.current == 1536u << 20, "now the allocator's");
    CHILD_EXPECT(count(c.stderr_text(), "[error]") == 0, c.stderr_text());
  });
  // Without a usable driver the stats are zeros too (the error comes with the first allocation).
  isolated("backend:cuda", log_level::warn, [](child&) {
    if (cachalot::cuda_device_count() > 0) return;
    CHILD_EXPECT(stats(0).num_allocs == 0 && cachalot_default_exists(0) == 0, "zeros");
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 64, nullptr) != CACHALOT_SUCCESS, "no device");
  });
  // A bad config is an error, named once on stderr, and still creates nothing.
  isolated("memory_limt:90%", log_level::warn, [](child& c) {
    cachalot_stats s;
    cachalot_stats_init(&s);
    for (int i = 0; i < 2; ++i) {
      CHILD_EXPECT(cachalot_default_get_stats(0, &s) == CACHALOT_ERROR_INVALID_ARGUMENT, "bad");
    }
    CHILD_EXPECT(std::string(cachalot_last_error()).find("memory_limt") != std::string::npos,
                 cachalot_last_error());
    CHILD_EXPECT(count(c.stderr_text(), "memory_limt") == 1, c.stderr_text());
    CHILD_EXPECT(cachalot_default_exists(0) == 0, "nothing created");
  });
}

// cudaStreamPerThread (0x2) names another stream on every thread: the default allocators serve
// it on the first thread that uses it; another thread's allocation or record_stream on it is
// refused with a message, and its free waits for that thread's stream, then frees the block on
// its own stream (nothing lost, stats exact).
TEST(default_c_api, PerThreadDefaultStreamIsOneThreadsStream) {
  isolated("backend:simulated,capacity:1GiB", log_level::off, [](child&) {
    void* const ptds = reinterpret_cast<void*>(0x2);
    void* mine = nullptr;
    void* kept = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &mine, 4096, ptds) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_default_malloc(0, &kept, 4096, ptds) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_default_free(0, mine, 4096, ptds) == CACHALOT_SUCCESS, "same thread");
    std::string refused, record_refused;
    cachalot_status other = CACHALOT_SUCCESS, record = CACHALOT_SUCCESS,
                    own_stream = CACHALOT_ERROR_BACKEND, free_there = CACHALOT_ERROR_BACKEND;
    void* hook = reinterpret_cast<void*>(1);
    std::thread second([&] {
      void* p = nullptr;
      other = cachalot_default_malloc(0, &p, 4096, ptds);
      refused = cachalot_last_error();
      hook = cachalot_torch_malloc(4096, 0, ptds);
      record = cachalot_default_record_stream(kept, ptds);
      record_refused = cachalot_last_error();
      void* q = nullptr;
      own_stream = cachalot_default_malloc(0, &q, 4096, reinterpret_cast<void*>(0x300));
      cachalot_default_free(0, q, 4096, reinterpret_cast<void*>(0x300));
      free_there = cachalot_default_free(0, kept, 4096, ptds);  // waits, then frees
    });
    second.join();
    CHILD_EXPECT(other == CACHALOT_ERROR_NOT_SUPPORTED, cachalot_status_string(other));
    CHILD_EXPECT(refused.find("allocation on stream cudaStreamPerThread (0x2) from a second "
                              "thread") != std::string::npos,
                 refused);
    CHILD_EXPECT(refused.find("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM") != std::string::npos, refused);
    CHILD_EXPECT(hook == nullptr, "the hook returns NULL");
    CHILD_EXPECT(record == CACHALOT_ERROR_NOT_SUPPORTED, record_refused);
    CHILD_EXPECT(
        record_refused.find("record_stream on stream cudaStreamPerThread") != std::string::npos,
        record_refused);
    CHILD_EXPECT(own_stream == CACHALOT_SUCCESS, "a stream of its own is fine");
    CHILD_EXPECT(free_there == CACHALOT_SUCCESS, "a free from there is served");
    const cachalot_stats st = stats(0);
    CHILD_EXPECT(st.allocated_bytes.all.current == 0, "every block freed, nothing lost");
    CHILD_EXPECT(st.num_deferred_frees == 0, "freed on its own stream after the wait");
    // The owner thread keeps its stream, and reuses the block freed from the other thread.
    void* again = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &again, 4096, ptds) == CACHALOT_SUCCESS, "owner");
    CHILD_EXPECT(again == kept || again == mine, "reused");
  });
}

TEST(default_c_api, OutOfMemoryIsLoggedWithTheSummary) {
  isolated("backend:simulated,capacity:1GiB", log_level::warn, [](child& c) {
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 2u << 30, nullptr) == CACHALOT_ERROR_OUT_OF_MEMORY,
                 "2 GiB on 1 GiB");
    CHILD_EXPECT(cachalot_torch_malloc(2u << 30, 0, nullptr) == nullptr, "hook: NULL");
    const std::string err = c.stderr_text();
    CHILD_EXPECT(
        count(err, "cachalot [warn] cachalot: out of memory: tried to allocate 2.00 GiB") == 2,
        err);
    CHILD_EXPECT(count(err, "Reserved memory") == 0, "no summary at warn: " + err);
    CHILD_EXPECT(count(err, "SIMULATED") == 1, err);  // the explicit simulated device, once
    // One line per error, after the one line of the simulated device.
    CHILD_EXPECT(cachalot::test::lines(err) == 3, err);
    CHILD_EXPECT(count(err, "(CACHALOT_LOG=info adds the memory summary)\n") == 2, err);
    CHILD_EXPECT(stats(0).num_ooms == 2, "counted");
  });
  // At info, each error's line (warn) is followed by the summary (info).
  isolated("backend:simulated,capacity:1GiB", log_level::info, [](child& c) {
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 2u << 30, nullptr) == CACHALOT_ERROR_OUT_OF_MEMORY,
                 "2 GiB on 1 GiB");
    const std::string err = c.stderr_text();
    const std::size_t oom = err.find("cachalot [warn] cachalot: out of memory");
    CHILD_EXPECT(oom != std::string::npos, err);
    CHILD_EXPECT(err.find("cachalot [info] |======", oom) == err.find('\n', oom) + 1, err);
    CHILD_EXPECT(count(err, "cachalot [info] | Reserved memory") == 1, err);
    CHILD_EXPECT(count(err, "adds the memory summary") == 0, err);
  });
}

TEST(default_c_api, LogLevels) {
  isolated("backend:simulated,capacity:1GiB", log_level::info, [](child& c) {
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(3, &p, 64, nullptr) == CACHALOT_SUCCESS, "alloc");
    const std::string err = c.stderr_text();
    CHILD_EXPECT(count(err,
                       "cachalot [info] default allocator of device 3: backend simulated, "
                       "device memory 1.00 GiB") == 1,
                 err);
  });
  isolated("backend:simulated,capacity:1GiB", log_level::off, [](child& c) {
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 2u << 30, nullptr) == CACHALOT_ERROR_OUT_OF_MEMORY,
                 "oom");
    CHILD_EXPECT(c.stderr_text().empty(), c.stderr_text());
  });
}

TEST(default_c_api, GraphPoolHooksRouteToAPoolAndGiveItBack) {
  isolated("backend:simulated,capacity:1GiB", log_level::warn, [](child&) {
    // PyTorch's MempoolId_t (1, 0): begin routes every stream (NULL filter) to a graph pool.
    CHILD_EXPECT(
        cachalot_torch_begin_allocate_to_pool(0, 1, 0, nullptr, nullptr) == CACHALOT_SUCCESS,
        cachalot_last_error());
    void* p = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &p, 4096, nullptr) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    CHILD_EXPECT(cachalot_torch_end_allocate_to_pool(0, 1, 0) == CACHALOT_SUCCESS,
                 cachalot_last_error());
    // Eager work after the route never gets the pool's block.
    void* q = nullptr;
    CHILD_EXPECT(cachalot_default_malloc(0, &q, 4096, nullptr) == CACHALOT_SUCCESS, "eager");
    CHILD_EXPECT(q != p, "eager work got the graph pool's block");
    CHILD_EXPECT(cachalot_default_free(0, q, 0, nullptr) == CACHALOT_SUCCESS, "eager free");
    CHILD_EXPECT(cachalot_default_free(0, p, 0, nullptr) == CACHALOT_SUCCESS, "pool free");
    cachalot_default_empty_cache(0);
    CHILD_EXPECT(stats(0).reserved_bytes.all.current == 2u << 20,
                 "the graph pool keeps its segment until it is released");
    CHILD_EXPECT(cachalot_torch_release_pool(0, 1, 0) == CACHALOT_SUCCESS, cachalot_last_error());
    cachalot_default_empty_cache(0);
    CHILD_EXPECT(stats(0).reserved_bytes.all.current == 0, "released with its pool");
    // Unknown pools are errors with a message, never a crash.
    CHILD_EXPECT(cachalot_torch_end_allocate_to_pool(0, 7, 7) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "end of an unknown pool");
    CHILD_EXPECT(cachalot_torch_release_pool(0, 1, 0) == CACHALOT_ERROR_INVALID_ARGUMENT,
                 "release twice");
  });
}

// cachalot_default_handle: the default allocator as a cachalot_allocator, the same one the
// hooks allocate from: a tenant pool routed by stream gets cachalot_default_malloc's blocks,
// sleeps and wakes; cachalot_destroy on the handle does nothing.
TEST(default_c_api, HandleReachesTheDefaultAllocatorsPools) {
  isolated("backend:simulated,capacity:64MiB,host_backing:1,expandable_segments:1", log_level::warn,
           [](child&) {
             cachalot_allocator* h = nullptr;
             CHILD_EXPECT(cachalot_default_handle(0, nullptr) == CACHALOT_ERROR_INVALID_ARGUMENT,
                          "NULL out");
             CHILD_EXPECT(
                 cachalot_default_handle(64, &h) == CACHALOT_ERROR_INVALID_ARGUMENT && h == nullptr,
                 "bad device");
             CHILD_EXPECT(cachalot_default_handle(0, &h) == CACHALOT_SUCCESS && h != nullptr,
                          cachalot_last_error());
             cachalot_allocator* again = nullptr;
             CHILD_EXPECT(cachalot_default_handle(0, &again) == CACHALOT_SUCCESS && again == h,
                          "one handle per device");
             cachalot_pool_options o;
             std::memset(&o, 0, sizeof o);
             o.size = sizeof o;
             o.name = "batch";
             cachalot_pool_id pool = 0;
             CHILD_EXPECT(cachalot_pool_create(h, &o, &pool) == CACHALOT_SUCCESS && pool != 0,
                          cachalot_last_error());
             void* s = reinterpret_cast<void*>(0x50);
             CHILD_EXPECT(cachalot_pool_begin_allocate(h, pool, s) == CACHALOT_SUCCESS,
                          cachalot_last_error());
             void* p = nullptr;
             CHILD_EXPECT(cachalot_default_malloc(0, &p, 1u << 20, s) == CACHALOT_SUCCESS,
                          cachalot_last_error());
             CHILD_EXPECT(cachalot_pool_end_allocate(h, pool) == CACHALOT_SUCCESS, "end");
             cachalot_pool_id of = 0;
             CHILD_EXPECT(cachalot_pool_of(h, p, &of) == CACHALOT_SUCCESS && of == pool,
                          "the hook's allocation came from the routed pool");
             std::memset(p, 0x3C, 1u << 20);
             int did = 0;
             CHILD_EXPECT(
                 cachalot_pool_sleep(h, pool, CACHALOT_SLEEP_OFFLOAD, &did) == CACHALOT_SUCCESS &&
                     did == 1,
                 cachalot_last_error());
             CHILD_EXPECT(stats(0).reserved_bytes.all.current == 0, "asleep: nothing reserved");
             CHILD_EXPECT(cachalot_pool_wake(h, pool, &did) == CACHALOT_SUCCESS && did == 1,
                          cachalot_last_error());
             CHILD_EXPECT(static_cast<unsigned char*>(p)[(1u << 20) - 1] == 0x3C, "bytes back");
             cachalot_destroy(h);  // does nothing on a default allocator's handle
             CHILD_EXPECT(cachalot_default_free(0, p, 0, s) == CACHALOT_SUCCESS,
                          cachalot_last_error());
             CHILD_EXPECT(cachalot_pool_release(h, pool) == CACHALOT_SUCCESS,
                          "the handle still works after cachalot_destroy");
           });
}

}  // namespace
