// A Thrust temporary-storage allocator over a cachalot::allocator, for
// `thrust::cuda::par(alloc).on(stream)`: Thrust calls allocate(n) for its scratch buffers and
// deallocate(p, n) when the algorithm is done. Every block is allocated and freed on the one
// stream given at construction, which must be the stream the algorithm runs on. The adapter
// holds a reference: the allocator must outlive it. It needs no Thrust header.
#pragma once

#include <cstddef>

#include "cachalot/allocator.hpp"

namespace cachalot {

/// Thrust allocator (value_type char) drawing from a cachalot::allocator on one stream.
class thrust_allocator {
 public:
  /// Element type Thrust allocates.
  using value_type = char;

  /// Allocates from `alloc` on `stream` (the stream the Thrust algorithm runs on).
  explicit thrust_allocator(allocator& alloc, stream_t stream = nullptr) noexcept
      : alloc_(&alloc), stream_(stream) {}

  /// Allocates `n` bytes. @throws out_of_memory as allocator::allocate
  char* allocate(std::ptrdiff_t n) {
    return static_cast<char*>(alloc_->allocate(static_cast<std::size_t>(n), stream_));
  }
  /// Frees a buffer from allocate; `n` is checked in the allocator's checked mode.
  void deallocate(char* p, std::size_t n) { alloc_->deallocate(p, n, stream_); }

  /// The underlying allocator.
  allocator& underlying() const noexcept { return *alloc_; }
  /// The stream blocks are allocated and freed on.
  stream_t stream() const noexcept { return stream_; }

  /// Equal when both draw from the same allocator on the same stream.
  friend bool operator==(const thrust_allocator& a, const thrust_allocator& b) noexcept {
    return a.alloc_ == b.alloc_ && a.stream_ == b.stream_;
  }
  /// Negation of operator==.
  friend bool operator!=(const thrust_allocator& a, const thrust_allocator& b) noexcept {
    return !(a == b);
  }

 private:
  allocator* alloc_;
  stream_t stream_;
};

}  // namespace cachalot
