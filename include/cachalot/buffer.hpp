// A move-only RAII owner of one allocation: freed on its stream when it goes out of scope.
#pragma once

#include <cstddef>
#include <utility>

#include "cachalot/allocator.hpp"

namespace cachalot {

/// Owns one allocation of an allocator; frees it on destruction. Move-only.
class buffer {
 public:
  /// An empty buffer.
  buffer() noexcept = default;
  /// Allocates `bytes` on `stream` from `alloc`. @throws out_of_memory as allocator::allocate
  buffer(allocator& alloc, std::size_t bytes, stream_t stream = nullptr)
      : alloc_(&alloc), ptr_(alloc.allocate(bytes, stream)), size_(bytes), stream_(stream) {}
  ~buffer() { reset(); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  /// Takes ownership from `other`, which becomes empty.
  buffer(buffer&& other) noexcept
      : alloc_(std::exchange(other.alloc_, nullptr)),
        ptr_(std::exchange(other.ptr_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(std::exchange(other.stream_, nullptr)) {}
  /// Frees what this buffer holds, then takes ownership from `other`.
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      reset();
      alloc_ = std::exchange(other.alloc_, nullptr);
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }

  /// Device address (nullptr when empty).
  void* data() const noexcept { return ptr_; }
  /// Requested size in bytes.
  std::size_t size() const noexcept { return size_; }
  /// Stream the buffer was allocated on.
  stream_t stream() const noexcept { return stream_; }
  /// True if the buffer holds an allocation.
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

  /// Frees the allocation now (no-op when empty). Never throws: a buffer only holds pointers
  /// its allocator handed out.
  void reset() noexcept {
    if (ptr_ != nullptr) {
      try {
        alloc_->deallocate(ptr_, stream_);
      } catch (...) {  // unreachable for a pointer the allocator returned
      }
    }
    alloc_ = nullptr;
    ptr_ = nullptr;
    size_ = 0;
  }
  /// Gives up ownership without freeing; the caller frees the pointer.
  void* release() noexcept {
    alloc_ = nullptr;
    size_ = 0;
    return std::exchange(ptr_, nullptr);
  }

 private:
  allocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  stream_t stream_ = nullptr;
};

}  // namespace cachalot
