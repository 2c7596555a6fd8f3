// A CCCL `cuda::mr` memory resource over a cachalot::allocator (the interface RMM and CCCL
// containers use). It provides both generations of the CCCL resource interface:
//  - CCCL 3.0: allocate(bytes, align) / deallocate(ptr, bytes, align) and
//    allocate_async(bytes, align, stream) / deallocate_async(ptr, bytes, align, stream);
//  - CCCL 3.1 and later: allocate_sync / deallocate_sync and
//    allocate(stream, bytes, align) / deallocate(stream, ptr, bytes, align);
// and static_asserts the concepts of the CCCL it is compiled against. Memory is device
// accessible. Synchronous calls use the resource's default stream (given at construction):
// a synchronous deallocate is fine only once the work using the memory was ordered before
// later work on that stream. Two resources are equal when they draw from the same allocator,
// so either may free the other's memory. The resource holds a reference: the allocator must
// outlive it. Requires the CCCL headers (CUDA 12.x/13.x toolkit, `<cuda/memory_resource>`).
#pragma once

#if !__has_include(<cuda/memory_resource>)
#error "cachalot/cuda_mr.hpp needs CCCL's <cuda/memory_resource> (add the toolkit's include/cccl)"
#endif

#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE  // required by CCCL 3.0
#endif

#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cachalot/allocator.hpp"
#include "cachalot/errors.hpp"

namespace cachalot {

/// CCCL memory resource backed by a cachalot::allocator. See the file comment.
class cuda_memory_resource {
 public:
  /// Draws from `alloc`; synchronous calls use `default_stream`.
  explicit cuda_memory_resource(allocator& alloc, stream_t default_stream = nullptr) noexcept
      : alloc_(&alloc), default_stream_(default_stream) {}

  // --- CCCL 3.0 interface ---------------------------------------------------------------

  /// Allocates `bytes` aligned to `alignment` on the default stream.
  /// @throws invalid_argument for an alignment the allocator cannot give, out_of_memory
  void* allocate(std::size_t bytes, std::size_t alignment = 256) {
    return allocate_on(bytes, alignment, default_stream_);
  }
  /// Frees `ptr` on the default stream.
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment = 256) {
    (void)alignment;
    alloc_->deallocate(ptr, bytes, default_stream_);
  }
  /// Allocates `bytes` aligned to `alignment` for work on `stream`.
  void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return allocate_on(bytes, alignment, handle(stream));
  }
  /// Frees `ptr` once the work queued on `stream` so far is done.
  void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment,
                        ::cuda::stream_ref stream) {
    (void)alignment;
    alloc_->deallocate(ptr, bytes, handle(stream));
  }

  // --- CCCL 3.1+ interface --------------------------------------------------------------

  /// Synchronous allocation (the default stream).
  void* allocate_sync(std::size_t bytes, std::size_t alignment = 256) {
    return allocate_on(bytes, alignment, default_stream_);
  }
  /// Synchronous free (the default stream).
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment = 256) {
    deallocate(ptr, bytes, alignment);
  }
  /// Stream-ordered allocation on `stream`.
  void* allocate(::cuda::stream_ref stream, std::size_t bytes, std::size_t alignment = 256) {
    return allocate_on(bytes, alignment, handle(stream));
  }
  /// Stream-ordered free on `stream`.
  void deallocate(::cuda::stream_ref stream, void* ptr, std::size_t bytes,
                  std::size_t alignment = 256) {
    deallocate_async(ptr, bytes, alignment, stream);
  }

  /// Equal when both draw from the same allocator.
  bool operator==(const cuda_memory_resource& other) const noexcept {
    return alloc_ == other.alloc_;
  }
  /// Negation of operator==.
  bool operator!=(const cuda_memory_resource& other) const noexcept { return !(*this == other); }

  /// Memory of this resource is device accessible.
  friend constexpr void get_property(const cuda_memory_resource&,
                                     ::cuda::mr::device_accessible) noexcept {}

  /// The underlying allocator.
  allocator& underlying() const noexcept { return *alloc_; }

 private:
  static stream_t handle(::cuda::stream_ref stream) noexcept {
    return static_cast<stream_t>(stream.get());
  }

  void* allocate_on(std::size_t bytes, std::size_t alignment, stream_t stream) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      throw invalid_argument("cuda_memory_resource: alignment " + std::to_string(alignment) +
                             " is not a power of two");
    }
    void* p = alloc_->allocate(bytes, stream);
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
      alloc_->deallocate(p, stream);
      throw invalid_argument("cuda_memory_resource: alignment " + std::to_string(alignment) +
                             " exceeds what the allocator guarantees");
    }
    return p;
  }

  allocator* alloc_;
  stream_t default_stream_;
};

#if defined(CCCL_MAJOR_VERSION) && \
    (CCCL_MAJOR_VERSION > 3 || (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION >= 1))
static_assert(::cuda::mr::synchronous_resource<cuda_memory_resource>,
              "cuda_memory_resource must model cuda::mr::synchronous_resource");
static_assert(::cuda::mr::resource_with<cuda_memory_resource, ::cuda::mr::device_accessible>,
              "cuda_memory_resource must model cuda::mr::resource (stream-ordered)");
#else
static_assert(::cuda::mr::resource_with<cuda_memory_resource, ::cuda::mr::device_accessible>,
              "cuda_memory_resource must model cuda::mr::resource");
static_assert(::cuda::mr::async_resource_with<cuda_memory_resource, ::cuda::mr::device_accessible>,
              "cuda_memory_resource must model cuda::mr::async_resource");
#endif

}  // namespace cachalot
