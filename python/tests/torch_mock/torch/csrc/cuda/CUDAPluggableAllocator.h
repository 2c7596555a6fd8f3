// Test double of <torch/csrc/cuda/CUDAPluggableAllocator.h> in its three generations of
// graph-pool setters (MOCK_GEN), with the setter signatures read from PyTorch's headers:
//  1: set_capture_begin_fn / set_capture_about_to_end_fn / set_capture_ended_fn /
//     set_capture_destroy_fn (capture ids);
//  2: set_begin_allocate_stream_to_pool / set_end_allocate_stream_to_pool_fn /
//     set_release_pool (a stream);
//  3: set_begin_allocate_to_pool / set_end_allocate_to_pool_fn / set_release_pool (a filter).
// The hooks set are kept in public members for the harness to call.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>

#include <functional>
#include <memory>

namespace torch::cuda::CUDAPluggableAllocator {

using c10::cuda::CaptureId_t;
using c10::cuda::MempoolId_t;
using Base = c10::cuda::CUDACachingAllocator::CUDAAllocator;

struct CUDAPluggableAllocator : Base {
  CUDAPluggableAllocator(std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
                         std::function<void(void*, size_t, int, cudaStream_t)> free_fn)
      : alloc_fn_(std::move(alloc_fn)), free_fn_(std::move(free_fn)) {}
  void set_init_fn(std::function<void(int)> f) { init_fn_ = std::move(f); }
  void set_reset_fn(std::function<void()> f) { reset_fn_ = std::move(f); }
  void set_memory_fraction_fn(std::function<void(double, int)> f) { fraction_fn_ = std::move(f); }
  void set_base_alloc_fn(std::function<void*(void*, size_t*)> f) { base_fn_ = std::move(f); }
  void set_record_stream_fn(std::function<void(void*, cudaStream_t)> f) {
    record_fn_ = std::move(f);
  }
#if MOCK_GEN == 1
  void set_capture_begin_fn(std::function<void(int, CaptureId_t, MempoolId_t)> f) {
    begin1_ = std::move(f);
  }
  void set_capture_about_to_end_fn(std::function<void(int, CaptureId_t)> f) {
    end1_ = std::move(f);
  }
  void set_capture_ended_fn(std::function<void(int, CaptureId_t)> f) {
    ended1_ = std::move(f);
  }
  void set_capture_destroy_fn(std::function<void(int, MempoolId_t)> f) {
    release_ = std::move(f);
  }
  std::function<void(int, CaptureId_t, MempoolId_t)> begin1_;
  std::function<void(int, CaptureId_t)> end1_, ended1_;
#elif MOCK_GEN == 2
  void set_begin_allocate_stream_to_pool(std::function<void(int, cudaStream_t, MempoolId_t)> f) {
    begin2_ = std::move(f);
  }
  void set_end_allocate_stream_to_pool_fn(std::function<void(int, cudaStream_t)> f) {
    end2_ = std::move(f);
  }
  void set_release_pool(std::function<void(int, MempoolId_t)> f) {
    release_ = std::move(f);
  }
  std::function<void(int, cudaStream_t, MempoolId_t)> begin2_;
  std::function<void(int, cudaStream_t)> end2_;
#else
  void set_begin_allocate_to_pool(
      std::function<void(int, MempoolId_t, std::function<bool(cudaStream_t)>)> f) {
    begin3_ = std::move(f);
  }
  void set_end_allocate_to_pool_fn(std::function<void(int, MempoolId_t)> f) {
    end3_ = std::move(f);
  }
  void set_release_pool(std::function<void(int, MempoolId_t)> f) {
    release_ = std::move(f);
  }
  std::function<void(int, MempoolId_t, std::function<bool(cudaStream_t)>)> begin3_;
  std::function<void(int, MempoolId_t)> end3_;
#endif
  std::function<void*(size_t, int, cudaStream_t)> alloc_fn_;
  std::function<void(void*, size_t, int, cudaStream_t)> free_fn_;
  std::function<void(int)> init_fn_;
  std::function<void()> reset_fn_;
  std::function<void(double, int)> fraction_fn_;
  std::function<void*(void*, size_t*)> base_fn_;
  std::function<void(void*, cudaStream_t)> record_fn_;
  std::function<void(int, MempoolId_t)> release_;
};

inline std::shared_ptr<Base> current_allocator;

inline std::shared_ptr<Base> createCustomAllocator(
    std::function<void*(size_t, int, cudaStream_t)> alloc_fn,
    std::function<void(void*, size_t, int, cudaStream_t)> free_fn) {
  return std::make_shared<CUDAPluggableAllocator>(std::move(alloc_fn), std::move(free_fn));
}

inline void changeCurrentAllocator(const std::shared_ptr<Base>& allocator) {
  current_allocator = allocator;
}

}  // namespace torch::cuda::CUDAPluggableAllocator
