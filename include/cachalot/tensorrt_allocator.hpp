// A TensorRT 10 GPU allocator (nvinfer1::IGpuAsyncAllocator) over a cachalot::allocator, for
// IBuilder::setGpuAllocator / IRuntime::setGpuAllocator. Invariants of the TensorRT contract:
//  - every call is thread-safe (cachalot::allocator is) and noexcept: failures return nullptr
//    or false, never throw;
//  - size 0 returns nullptr;
//  - memory freed on a stream is reused only once that stream reached the free (cachalot's
//    stream rules), so deallocateAsync never waits;
//  - an alignment above what the allocator guarantees (256 B on CUDA) gives nullptr.
// The adapter holds a reference: the allocator must outlive every engine that uses it.
// Only usable where TensorRT's NvInfer.h is available.
#pragma once

#include <NvInfer.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cachalot/allocator.hpp"

namespace cachalot {

/// TensorRT IGpuAsyncAllocator drawing from a cachalot::allocator. See the file comment.
class tensorrt_allocator final : public nvinfer1::IGpuAsyncAllocator {
 public:
  /// Draws from `alloc`.
  explicit tensorrt_allocator(allocator& alloc) noexcept : alloc_(&alloc) {}

  /// Allocates `size` bytes aligned to `alignment` for work on `stream`; nullptr on failure.
  void* allocateAsync(std::uint64_t const size, std::uint64_t const alignment,
                      nvinfer1::AllocatorFlags const flags, cudaStream_t stream) noexcept override {
    (void)flags;  // resizable allocations (kRESIZABLE) are not offered: reallocate stays default
    if (size == 0) return nullptr;
    if (alignment != 0 && (alignment & (alignment - 1)) != 0) return nullptr;
    try {
      void* p = alloc_->allocate(static_cast<std::size_t>(size), static_cast<stream_t>(stream));
      if (alignment != 0 && reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
        alloc_->deallocate(p, static_cast<stream_t>(stream));
        return nullptr;
      }
      return p;
    } catch (...) {
      return nullptr;
    }
  }

  /// Frees `memory` once the work queued on `stream` so far is done; false for a pointer not
  /// allocated here.
  bool deallocateAsync(void* const memory, cudaStream_t stream) noexcept override {
    try {
      alloc_->deallocate(memory, static_cast<stream_t>(stream));
      return true;
    } catch (...) {
      return false;
    }
  }

  /// The underlying allocator.
  allocator& underlying() const noexcept { return *alloc_; }

 private:
  allocator* alloc_;
};

}  // namespace cachalot
