// The seam between the backend factory (backend_factory.cpp, always built) and the CUDA
// backend (cuda_backend.cpp). In builds with the CUDA backend (CACHALOT_CUDA_BACKEND)
// cuda_backend.cpp defines make_cuda_backend, cuda_device_count, cuda_unavailable_reason,
// cuda_driver_version and cuda_backend_built; without it the factory provides the fallbacks of
// the last four and never calls make_cuda_backend.
#pragma once

#include <memory>

#include "cachalot/backend.hpp"

namespace cachalot::detail {

/// Creates the CUDA (driver API) backend of `device`.
/// @throws backend_error when there is no driver, no such device, or the device cannot start
std::shared_ptr<device_backend> make_cuda_backend(int device);

}  // namespace cachalot::detail
