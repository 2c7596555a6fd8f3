// Test support: the backends and configurations the conformance suite runs against. Every
// case names a backend factory, a config and a way to make distinct stream handles. The CUDA
// case is added only when a device exists; without one the suite says so in a skipped test.
// With CACHALOT_TEST_FAKE_CUDA set (and CACHALOT_CUDA_DRIVER naming the fake driver of
// tests/cuda/fake_driver), the CUDA backend runs on the fake driver's devices instead, with
// made-up stream handles.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"

#ifdef CACHALOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace cachalot::testing {

/// One backend + configuration of the conformance suite.
struct backend_case {
  std::string name;          ///< test-name suffix
  std::string conf;          ///< config string (backend key included)
  bool simulated = true;     ///< simulated device (inspectable)
  bool host_backed = false;  ///< contents readable and writable
  std::function<std::shared_ptr<device_backend>(const config&)> make;  ///< backend factory
  bool fake_streams = true;  ///< made-up stream handles (else real CUDA streams)
  /// "" (the default pool), or the memory pool every allocation is routed to: "graph" (a graph
  /// pool: segments kept until it is released) or "tenant" (a tenant pool with a limit, a
  /// guarantee and a priority).
  std::string pool;
};

/// Routes every allocation of `a` to a new pool of the kind `c.pool` names (nothing for "").
/// Returns the pool (default_pool for "").
inline pool_id route_to_case_pool(allocator& a, const backend_case& c) {
  if (c.pool.empty()) return default_pool;
  pool_options o;
  o.name = c.pool;
  if (c.pool == "graph") {
    o.type = pool_type::graph;
    o.declares_capture = false;  // a private pool used outside captures (capture_test.cpp)
  } else {
    o.limit = 6 * GiB;
    o.guarantee = 1 * GiB;
    o.priority = 1;
  }
  const pool_id id = a.create_pool(o);
  a.begin_allocate_to_pool(id, [](stream_t) { return true; });
  return id;
}

inline std::shared_ptr<device_backend> make_sim(const config& c) {
  sim_options o;
  o.capacity = c.capacity;
  o.host_backing = c.host_backing;
  return std::make_shared<simulated_device>(o);
}

/// The cases: simulated device bare and host-backed, with the default and a tuned config, with
/// fixed and with expandable segments, and with every allocation routed to a graph pool or to a
/// tenant pool (fixed and expandable); CUDA with the default config when a device exists.
/// The CUDA case makes its streams with the CUDA runtime: it needs the runtime to see a device
/// too, not only cachalot's driver (a driver the runtime does not use, such as the fake one, or
/// one older than the runtime the tests link, gives no runtime device).
inline bool runtime_sees_a_device() {
#ifdef CACHALOT_WITH_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

inline std::vector<backend_case> conformance_cases() {
  std::vector<backend_case> cases = {
      {"sim_default", "backend:simulated,capacity:8GiB", true, false, make_sim, true, ""},
      {"sim_host_backed", "backend:simulated,capacity:1GiB,host_backing:1", true, true, make_sim,
       true, ""},
      {"sim_max_split", "backend:simulated,capacity:8GiB,max_split_size:64MiB", true, false,
       make_sim, true, ""},
      {"sim_limit", "backend:simulated,capacity:80GiB,memory_limit:2GiB", true, false, make_sim,
       true, ""},
      {"sim_expandable", "backend:simulated,capacity:8GiB,expandable_segments:1", true, false,
       make_sim, true, ""},
      {"sim_expandable_host_backed",
       "backend:simulated,capacity:1GiB,host_backing:1,expandable_segments:1", true, true, make_sim,
       true, ""},
      {"sim_expandable_limit",
       "backend:simulated,capacity:80GiB,memory_limit:2GiB,expandable_segments:1", true, false,
       make_sim, true, ""},
      {"sim_graph_pool", "backend:simulated,capacity:8GiB", true, false, make_sim, true, "graph"},
      {"sim_tenant_pool", "backend:simulated,capacity:8GiB", true, false, make_sim, true, "tenant"},
      {"sim_expandable_tenant_pool", "backend:simulated,capacity:8GiB,expandable_segments:1", true,
       false, make_sim, true, "tenant"},
  };
  const char* fake = std::getenv("CACHALOT_TEST_FAKE_CUDA");
  if (fake != nullptr && *fake != '\0') {
    if (cuda_device_count() > 0) {
      cases.push_back({"cuda_fake_driver", "backend:cuda,memory_limit:8GiB", false, false,
                       [](const config& c) { return make_backend(c); }, true, ""});
    }
  } else if (cuda_device_count() > 0 && runtime_sees_a_device()) {
    cases.push_back({"cuda_default", "backend:cuda,memory_limit:8GiB", false, false,
                     [](const config& c) { return make_backend(c); }, false, ""});
  }
  return cases;
}

/// Distinct stream handles for a case: made-up handles (the simulated device, the fake CUDA
/// driver), or real streams on CUDA (destroyed with the pool).
class stream_pool {
 public:
  explicit stream_pool(bool fake_handles) : simulated_(fake_handles) {}
  ~stream_pool() {
#ifdef CACHALOT_WITH_CUDA
    for (void* s : owned_) cudaStreamDestroy(static_cast<cudaStream_t>(s));
#endif
  }
  stream_pool(const stream_pool&) = delete;
  stream_pool& operator=(const stream_pool&) = delete;

  /// The i-th stream (i >= 1; 0 is the default stream).
  stream_t get(int i) {
    if (i == 0) return nullptr;
    if (simulated_) return reinterpret_cast<stream_t>(static_cast<std::uintptr_t>(0x5000 + i * 16));
#ifdef CACHALOT_WITH_CUDA
    while (static_cast<int>(owned_.size()) < i) {
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      owned_.push_back(s);
    }
    return owned_[static_cast<std::size_t>(i - 1)];
#else
    return nullptr;
#endif
  }

 private:
  bool simulated_;
  std::vector<void*> owned_;
};

}  // namespace cachalot::testing

namespace cachalot::testing {
/// Prints a case by name in test output.
inline void PrintTo(const backend_case& c, std::ostream* os) {
  *os << c.name;
}
}  // namespace cachalot::testing
