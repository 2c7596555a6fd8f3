// Streams for replays and benchmarks: on the simulated device any non-null pointer is a
// stream, so logged handles are used as they are; on CUDA real streams are created (and
// destroyed with the set), the logged null stream staying the default stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cachalot/backend.hpp"
#include "cachalot/types.hpp"

namespace cachalot::tools {

/// A set of streams usable on one backend, indexed densely. Not copyable.
class stream_set {
 public:
  /// Streams standing for `logged` handles (0 stays the default stream).
  /// @throws cachalot::backend_error if a CUDA stream cannot be created
  stream_set(const device_backend& backend, const std::vector<std::uintptr_t>& logged);
  /// `count` distinct non-default streams.
  stream_set(const device_backend& backend, std::size_t count);
  ~stream_set();
  stream_set(const stream_set&) = delete;
  stream_set& operator=(const stream_set&) = delete;

  /// The stream of index `i`.
  stream_t operator[](std::size_t i) const noexcept { return streams_[i]; }
  /// Number of streams.
  std::size_t size() const noexcept { return streams_.size(); }

 private:
  void add(bool is_cuda, std::uintptr_t logged);

  std::vector<stream_t> streams_;
  std::vector<stream_t> created_;
};

}  // namespace cachalot::tools
