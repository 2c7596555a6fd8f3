// Stream sets: logged handles on the simulated device, real CUDA streams on a GPU.
#include "trace/streams.hpp"

#include "cachalot/errors.hpp"

#if defined(CACHALOT_TOOLS_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace cachalot::tools {

stream_set::stream_set(const device_backend& backend, const std::vector<std::uintptr_t>& logged) {
  const bool is_cuda = backend.name() == "cuda";
  for (const std::uintptr_t handle : logged) add(is_cuda, handle);
}

stream_set::stream_set(const device_backend& backend, std::size_t count) {
  const bool is_cuda = backend.name() == "cuda";
  for (std::size_t i = 0; i < count; ++i) add(is_cuda, 0x1000 + 0x100 * i);
}

void stream_set::add(bool is_cuda, std::uintptr_t logged) {
  if (logged == 0) {
    streams_.push_back(nullptr);
    return;
  }
  if (!is_cuda) {
    streams_.push_back(reinterpret_cast<stream_t>(logged));
    return;
  }
#if defined(CACHALOT_TOOLS_WITH_CUDA)
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    throw backend_error("cannot create a CUDA stream for the replay");
  }
  created_.push_back(s);
  streams_.push_back(s);
#else
  throw backend_error("a CUDA backend in a build of the tools without CUDA");
#endif
}

stream_set::~stream_set() {
#if defined(CACHALOT_TOOLS_WITH_CUDA)
  for (stream_t s : created_) cudaStreamDestroy(static_cast<cudaStream_t>(s));
#endif
}

}  // namespace cachalot::tools
