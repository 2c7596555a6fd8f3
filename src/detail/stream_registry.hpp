// Finding a stream's state: the engine's registry maps (pool, stream) to a stream_state, and a
// small thread-local cache in front of it lets the hot path find its state without touching
// shared memory. Invariant: a cache entry matches only under the routing key it was filled
// with; keys are never reused (unique_key), and an engine takes a new one whenever an answer
// could change (routes, released pools), so a stale entry never matches.
#pragma once

#include <array>
#include <cstdint>
#include <functional>

#include "cachalot/pool.hpp"
#include "cachalot/types.hpp"

namespace cachalot::detail {

struct stream_state;
struct pool_record;

/// A few (routing key, stream) -> state entries per thread, so that the hot path finds its
/// stream state without touching shared memory. A routing key names one engine's routing at
/// one time: keys come from the counter of engine ids and are never reused, and an engine
/// takes a new one whenever an answer could change (routes, released pools), so a stale entry
/// never matches. (`pool`: the pool of an explicit allocation, default_pool for a routed one.)
struct stream_cache {
  struct entry {
    std::uint64_t engine_id = 0;
    stream_t stream = nullptr;
    stream_state* state = nullptr;
    pool_id pool = default_pool;
  };
  std::array<entry, 4> entries{};
  unsigned next = 0;
};
inline thread_local stream_cache t_stream_cache;
inline thread_local stream_cache t_pool_stream_cache;  ///< explicit pool allocations

/// A fresh key (engine id or routing key): never returned twice in a process.
std::uint64_t unique_key() noexcept;

/// A key of the engine's registry of stream states.
struct state_key {
  const pool_record* pool;
  stream_t stream;
  bool operator==(const state_key&) const = default;
};
struct state_key_hash {
  std::size_t operator()(const state_key& k) const noexcept {
    return std::hash<const void*>()(k.pool) * 31 + std::hash<const void*>()(k.stream);
  }
};

}  // namespace cachalot::detail
