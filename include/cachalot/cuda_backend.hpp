// The CUDA runtime backend, created directly (most users let cachalot::allocator pick it with
// `backend:auto` or `backend:cuda`). It maps segments to cudaMalloc/cudaFree, events to
// cudaEvent_t (timing disabled) and streams to cudaStream_t; every call runs with the
// backend's device current and restores the caller's current device afterwards. See
// docs/cuda.md for the behaviour under CUDA graph capture and at process exit.
#pragma once

#include <memory>

#include "cachalot/backend.hpp"

namespace cachalot {

/// Creates the CUDA backend of device `device`.
/// @throws not_supported in a build without CUDA (see cuda_backend_built())
/// @throws backend_error when there is no usable driver or no such device
std::shared_ptr<device_backend> make_cuda_backend(int device);

}  // namespace cachalot
