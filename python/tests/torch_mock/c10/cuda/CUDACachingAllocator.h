// Test double of <c10/cuda/CUDACachingAllocator.h>: the pool id types and the allocator base.
#pragma once

#include <utility>

namespace c10::cuda {
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
namespace CUDACachingAllocator {
struct CUDAAllocator {
  virtual ~CUDAAllocator() = default;
};
}  // namespace CUDACachingAllocator
}  // namespace c10::cuda
