// The CUDA backend, created directly (most users let cachalot::allocator pick it with
// `backend:auto` or `backend:cuda`). It calls the CUDA driver API, loaded at run time from
// libcuda.so.1 (no CUDA runtime, no link-time dependency): segments are cuMemAlloc/cuMemFree,
// events are CUevent (timing disabled), streams are CUstream, which is what a runtime
// cudaStream_t is, the legacy (NULL, cudaStreamLegacy) and per-thread (cudaStreamPerThread)
// default streams included. Every call runs in the device's primary context and restores the
// caller's current context afterwards (none stays none). See docs/cuda.md for the supported
// drivers, virtual memory, CUDA graph capture and process exit.
#pragma once

#include <memory>
#include <vector>

#include "cachalot/backend.hpp"

namespace cachalot {

/// Creates the CUDA backend of device `device`.
/// @throws not_supported in a build without CUDA (see cuda_backend_built())
/// @throws backend_error when there is no usable driver or no such device
std::shared_ptr<device_backend> make_cuda_backend(int device);

/// Creates the CUDA backend of device `device` whose mapped chunks (map_chunk) are also
/// readable and writable by the devices in `peers`.
/// @throws invalid_argument if a peer is `device` itself or appears twice
/// @throws backend_error if a peer does not exist or cannot access `device`'s memory
/// @throws not_supported in a build without CUDA
std::shared_ptr<device_backend> make_cuda_backend(int device, const std::vector<int>& peers);

}  // namespace cachalot
