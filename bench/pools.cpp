// Benchmark environment: device detection, configs and the cachalot pools.
#include "pools.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace cachalot::bench {

environment& env() {
  static environment e;
  return e;
}

void init_environment() {
  // glibc serves big blocks with mmap until a freed mmapped block raises its threshold (up to
  // 32 MiB). Raise it now, so that the malloc baseline does not depend on benchmark order.
  std::free(std::malloc(std::size_t{30} << 20));
  environment& e = env();
  e.gpu = cuda_device_count() > 0;
  e.config = e.gpu ? "backend:auto" : "backend:simulated,capacity:256GiB";
  e.max_live = std::size_t{16} << 30;
  std::shared_ptr<device_backend> backend = make_backend(config::parse(e.config));
  if (e.gpu) e.max_live = std::min(e.max_live, backend->memory_info().free / 3);
  try {
    e.streams = std::make_unique<tools::stream_set>(*backend, 10);
  } catch (const backend_error& err) {
    // cachalot's driver sees a device but the CUDA runtime, which makes the streams, does not
    // (a driver older than the runtime linked here, or a fake driver): the simulated device.
    std::fprintf(stderr,
                 "cachalot_bench: %s: cachalot's CUDA driver sees a device, the CUDA runtime "
                 "does not; running on the simulated device\n",
                 err.what());
    e.gpu = false;
    e.config = "backend:simulated,capacity:256GiB";
    e.max_live = std::size_t{16} << 30;
    backend = make_backend(config::parse(e.config));
    e.streams = std::make_unique<tools::stream_set>(*backend, 10);
  }
  e.virtual_memory = backend->supports_virtual_memory();
}

cachalot_pool::cachalot_pool(bool caching, bool expandable) {
  config cfg = config::parse(env().config);
  cfg.caching = caching;
  cfg.expandable_segments = expandable;
  alloc_ = std::make_unique<allocator>(cfg);
}

}  // namespace cachalot::bench
