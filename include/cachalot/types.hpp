// Basic vocabulary shared by every public header: stream and event handles, pool kinds and
// size helpers. Streams are opaque `void*` handles (a cudaStream_t on the CUDA backend, any
// pointer on the simulated device); nullptr is the default stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cachalot {

/// Opaque stream handle: a `cudaStream_t` on the CUDA backend; nullptr is the default stream.
using stream_t = void*;

/// Opaque event handle owned by a device backend.
using event_t = void*;

/// The two block pools of an allocator. Small requests never share segments with large ones.
enum class pool_kind : std::uint8_t {
  small = 0,  ///< requests up to `config::small_size`, carved from small segments
  large = 1,  ///< everything else
};

/// Number of pools (for arrays indexed by pool_kind).
inline constexpr std::size_t pool_count = 2;

/// Identifies a memory pool of one allocator (cachalot/pool.hpp): a set of streams' segments
/// with its own limits and stats. Ids are never reused within an allocator.
using pool_id = std::uint64_t;
/// The default pool, where every allocation goes unless routed elsewhere. Always exists.
inline constexpr pool_id default_pool = 0;

/// One kibibyte.
inline constexpr std::size_t KiB = std::size_t{1} << 10;
/// One mebibyte.
inline constexpr std::size_t MiB = std::size_t{1} << 20;
/// One gibibyte.
inline constexpr std::size_t GiB = std::size_t{1} << 30;

}  // namespace cachalot
