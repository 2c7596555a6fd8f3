// What the calling thread is doing inside an engine's user callbacks: the out-of-memory
// callback and the retries it asks for (engine_knobs.cpp), and the reclaim callbacks of memory
// pools (pool_reclaim.cpp). Scopes are per thread and per engine, and nest: a callback of one
// allocator may allocate from another or from its own, and each scope ends by restoring what it
// found. Invariants:
//  - inside an engine's out-of-memory callback, or a retry it asked for, an allocation of that
//    engine never calls the callback again;
//  - inside a retry (the innermost scope of the engine), that engine's out-of-memory failures
//    are quiet: fail_oom throws oom_retry, which the retry loop catches, so it never leaves the
//    engine;
//  - inside an engine's reclaim callback, an allocation of that engine that meets pressure calls
//    no reclaim callback of that engine, and is no retry (the reclaim scope is innermost): its
//    failures are out_of_memory, which user code may catch, never the retry's private signal;
//  - another engine's callbacks are unaffected by either.
#pragma once

#include <cstdint>

namespace cachalot::detail {

/// Thrown by fail_oom instead of out_of_memory inside a retry the out-of-memory callback asked
/// for; caught by engine::retry_after_oom_callback, never seen outside the engine.
struct oom_retry {};

/// One user callback of one engine running on this thread (RAII).
class callback_scope {
 public:
  enum kind : std::uint8_t {
    oom_callback,  ///< the out-of-memory callback itself
    retry,         ///< an allocation retried because the out-of-memory callback asked
    reclaim,       ///< a memory pool's reclaim callback
  };

  callback_scope(const void* engine, kind k) noexcept : engine_(engine), kind_(k), up_(top_) {
    top_ = this;
  }
  ~callback_scope() { top_ = up_; }
  callback_scope(const callback_scope&) = delete;
  callback_scope& operator=(const callback_scope&) = delete;

  /// True if this thread is inside a scope of kind `k` of `engine`, at any depth.
  static bool inside(const void* engine, kind k) noexcept {
    for (const callback_scope* s = top_; s != nullptr; s = s->up_) {
      if (s->engine_ == engine && s->kind_ == k) return true;
    }
    return false;
  }
  /// True if the innermost scope of `engine` on this thread is a retry.
  static bool retrying(const void* engine) noexcept {
    for (const callback_scope* s = top_; s != nullptr; s = s->up_) {
      if (s->engine_ == engine) return s->kind_ == retry;
    }
    return false;
  }

 private:
  const void* const engine_;
  const kind kind_;
  callback_scope* const up_;
  static inline thread_local callback_scope* top_ = nullptr;
};

}  // namespace cachalot::detail
