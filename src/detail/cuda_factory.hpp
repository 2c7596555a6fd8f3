// The seam between the backend factory (backend_factory.cpp, always built) and the CUDA
// backend (cuda_backend.cpp). In CUDA builds (CACHALOT_WITH_CUDA) cuda_backend.cpp defines
// make_cuda_backend, cuda_device_count and cuda_backend_built; without CUDA the factory
// provides the fallbacks of the last two and never calls make_cuda_backend.
#pragma once

#include <memory>

#include "cachalot/backend.hpp"

namespace cachalot::detail {

/// Creates the CUDA runtime backend of `device`.
/// @throws backend_error when there is no driver, no such device, or the device cannot start
std::shared_ptr<device_backend> make_cuda_backend(int device);

}  // namespace cachalot::detail
