// CUDA graph capture on the simulated device: which stream captures, from which thread and in
// which mode, and the rules of docs/cuda.md "What a capture permits" applied to each call.
//  - A potentially unsafe call (segment allocation, a query or synchronization of an event
//    recorded outside a capture) is refused when the calling thread's capture interaction mode
//    is not relaxed and the thread has a capture not begun in relaxed mode, or when the mode is
//    global and another thread has a capture begun in global mode.
//  - A call that conflicts with every capture (a segment free, a device synchronization) is
//    refused while any stream captures.
//  - Querying or synchronizing an event recorded on a capturing stream is always refused.
// A refused call invalidates the captures it conflicts with (end_capture then reports it) and
// throws backend_error, as CUDA fails it with cudaErrorStreamCaptureUnsupported. Not
// thread-safe: the simulated device's mutex guards it.
#pragma once

#include <cstdint>
#include <thread>
#include <unordered_map>

#include "cachalot/backend.hpp"

namespace cachalot::detail {

/// The captures of one simulated device.
class sim_capture_model {
 public:
  /// Begins capturing `stream` from the calling thread. False if it captures already.
  bool begin(stream_t stream, capture_mode mode) {
    return captures_.emplace(stream, capture{std::this_thread::get_id(), mode, true}).second;
  }
  /// Ends the capture of `stream`: 1 valid, 0 invalidated, -1 not capturing.
  int end(stream_t stream) {
    const auto it = captures_.find(stream);
    if (it == captures_.end()) return -1;
    const bool valid = it->second.valid;
    captures_.erase(it);
    return valid ? 1 : 0;
  }
  /// True if `stream` captures; the legacy stream (nullptr) while any stream does (work on it
  /// would join that capture; the CUDA backend reports it so).
  bool capturing(stream_t stream) const {
    return stream == nullptr ? !captures_.empty() : captures_.count(stream) != 0;
  }
  /// A potentially unsafe call from the calling thread, whose interaction mode is `mode`.
  bool allow_unsafe(capture_mode mode) {
    if (mode == capture_mode::relaxed) return true;
    const std::thread::id me = std::this_thread::get_id();
    bool refused = false;
    for (auto& [stream, c] : captures_) {
      const bool own = c.thread == me && c.mode != capture_mode::relaxed;
      const bool others_global =
          mode == capture_mode::global && c.thread != me && c.mode == capture_mode::global;
      if (own || others_global) {
        c.valid = false;
        refused = true;
      }
    }
    return count(refused);
  }
  /// A call that conflicts with every capture.
  bool allow_conflicting() {
    for (auto& entry : captures_) entry.second.valid = false;
    return count(!captures_.empty());
  }
  /// A query or synchronization of an event recorded during a capture of `stream`.
  bool allow_captured_event(stream_t stream) {
    if (auto it = captures_.find(stream); it != captures_.end()) it->second.valid = false;
    return count(true);
  }
  /// Calls refused so far.
  std::uint64_t violations() const noexcept { return violations_; }

 private:
  struct capture {
    std::thread::id thread;
    capture_mode mode;
    bool valid;
  };
  bool count(bool refused) noexcept {
    if (refused) ++violations_;
    return !refused;
  }
  std::unordered_map<stream_t, capture> captures_;
  std::uint64_t violations_ = 0;
};

}  // namespace cachalot::detail
