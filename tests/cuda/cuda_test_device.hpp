// The CUDA instance of the backend conformance suite: what a backend-generic test needs from a
// real GPU that the simulated device offers by itself. A typed or parameterized suite asks
// cuda_test_device::create() for the device and skips with the given reason when there is
// none. Streams are real cudaStream_t; "holding" a stream (work still running there, as
// simulated_device::hold_stream) launches a kernel that waits on a host-mapped flag until
// release_stream sets it (or a 30 s safety timeout passes). Everything created is destroyed
// with the object, holds released first. Not thread-safe: one test thread drives it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cachalot/backend.hpp"

namespace cachalot::testing {

/// A CUDA device prepared for backend-generic tests. See the file comment.
class cuda_test_device {
 public:
  /// The device, or nullptr with `*skip_reason` set ("no CUDA device: ...") when there is no
  /// usable GPU. @throws backend_error when a device exists but its backend cannot start
  static std::unique_ptr<cuda_test_device> create(int device, std::string* skip_reason);
  /// Why there is no usable device now ("" when there is one).
  static std::string no_device_reason();

  ~cuda_test_device();
  cuda_test_device(const cuda_test_device&) = delete;
  cuda_test_device& operator=(const cuda_test_device&) = delete;

  /// The CUDA backend of the device.
  std::shared_ptr<device_backend> backend() const { return backend_; }
  /// The device ordinal.
  int device() const noexcept { return device_; }
  /// A new non-blocking stream, destroyed with this object.
  stream_t new_stream();
  /// True when hold_stream works (the test kernels were built: nvcc was available).
  bool can_hold() const noexcept;
  /// Makes work on `stream` "still running" until release_stream(stream).
  void hold_stream(stream_t stream);
  /// Lets the held work on `stream` finish, and waits for it.
  void release_stream(stream_t stream);

 private:
  explicit cuda_test_device(int device);

  int device_;
  std::shared_ptr<device_backend> backend_;
  std::vector<stream_t> streams_;
  std::map<stream_t, std::vector<int*>> holds_;
};

}  // namespace cachalot::testing
