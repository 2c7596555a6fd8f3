// The allocators the benchmarks compare, as pools (see workloads.hpp), and the environment
// they run in: on CUDA (backend:auto) when a device exists, else on the simulated device.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/config.hpp"
#include "trace/streams.hpp"

namespace cachalot::bench {

/// Where the benchmarks run.
struct environment {
  bool gpu = false;             ///< a CUDA device exists
  std::string config;           ///< base config string (backend, capacity)
  std::size_t max_live = 0;     ///< live-bytes bound of the random workloads
  bool virtual_memory = false;  ///< the backend can map chunks (expandable segments run)
  std::unique_ptr<tools::stream_set> streams;  ///< 10 distinct non-default streams
};

/// The environment, set up once by init_environment().
environment& env();
/// Detects the device and fills env().
void init_environment();

/// cachalot, caching or pass-through, with fixed or expandable segments, on env()'s backend.
class cachalot_pool {
 public:
  explicit cachalot_pool(bool caching, bool expandable = false);
  void* alloc(std::size_t n, stream_t s) { return alloc_->allocate(n, s); }
  void free(void* p, stream_t s) { alloc_->deallocate(p, s); }
  /// The allocator itself.
  allocator& get() { return *alloc_; }

 private:
  std::unique_ptr<allocator> alloc_;
};

/// glibc malloc/free: the host bookkeeping reference.
struct malloc_pool {
  void* alloc(std::size_t n, stream_t) { return std::malloc(n); }
  void free(void* p, stream_t) { std::free(p); }
};

}  // namespace cachalot::bench
