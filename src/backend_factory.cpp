// Backend selection: `backend:auto` takes CUDA where it is built in and a device exists, else
// the simulated device, and says so once per process on stderr (warn level: memory of the
// simulated device must never reach a kernel); `cuda` and `simulated` are taken as asked. In
// a build without the CUDA backend this file also answers the CUDA queries (no device, and
// why).
#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/simulated_device.hpp"
#include "detail/checks.hpp"
#include "detail/format.hpp"
#include "detail/log.hpp"

#ifdef CACHALOT_CUDA_BACKEND
#include "detail/cuda_factory.hpp"
#endif

namespace cachalot {

#ifndef CACHALOT_CUDA_BACKEND
bool cuda_backend_built() noexcept {
  return false;
}
int cuda_device_count() noexcept {
  return 0;
}
std::string cuda_unavailable_reason() {
  return "this build of cachalot has no CUDA backend (configured with CACHALOT_CUDA=OFF)";
}
int cuda_driver_version() noexcept {
  return 0;
}
#endif

namespace {
std::shared_ptr<device_backend> make_simulated(const config& cfg) {
  sim_options o;
  o.capacity = cfg.capacity;
  o.host_backing = cfg.host_backing;
  o.device = cfg.device;
  o.cost = cfg.cost;
  return std::make_shared<simulated_device>(o);
}

std::shared_ptr<device_backend> make_cuda(const config& cfg) {
#ifdef CACHALOT_CUDA_BACKEND
  return detail::make_cuda_backend(cfg.device);
#else
  CACHALOT_FAIL(not_supported,
                "backend 'cuda': this build of cachalot has no CUDA support (device {})",
                cfg.device);
#endif
}
}  // namespace

std::shared_ptr<device_backend> make_backend(const config& cfg) {
  switch (cfg.backend) {
    case backend_kind::simulated:
      return make_simulated(cfg);
    case backend_kind::cuda:
      return make_cuda(cfg);
    case backend_kind::automatic:
      break;
  }
  if (cfg.device < cuda_device_count()) return make_cuda(cfg);
  if (detail::log_enabled(detail::log_level::warn)) {
    std::string why = cuda_unavailable_reason();
    if (why.empty()) why = detail::format("the machine has {} CUDA devices", cuda_device_count());
    detail::log_once(detail::log_level::warn,
                     detail::format("backend:auto found no CUDA device {} ({}): this allocator, "
                                    "and every later one with backend:auto, runs on the "
                                    "SIMULATED device, whose memory is host memory, not GPU "
                                    "memory; never hand it to kernels. Set backend:cuda to "
                                    "require a GPU, or backend:simulated to choose the "
                                    "simulated device (and silence this)",
                                    cfg.device, why),
                     "backend:auto fell back to the simulated device");
  }
  return make_simulated(cfg);
}

}  // namespace cachalot
