// Allocator configuration and its string form. The string is a comma-separated list of
// `key:value` pairs, the same syntax as the CACHALOT_CONF environment variable, e.g.
// "backend:simulated,capacity:80GiB,max_split_size:256MiB". Sizes accept the suffixes B, KiB,
// MiB and GiB (and TiB); booleans accept 0/1/true/false. An unknown key, a missing value, a bad
// unit or an overflowing number is an invalid_argument naming the key and the value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cachalot/types.hpp"

namespace cachalot {

/// Which device backend an allocator uses.
enum class backend_kind : std::uint8_t {
  automatic,  ///< CUDA where a device exists, else the simulated device
  cuda,       ///< the CUDA runtime (fails where no device or no CUDA support is built in)
  simulated,  ///< the simulated device
};

/// Every tunable of an allocator. Defaults follow the well-known PyTorch layout: 512 B
/// granularity, a small pool of 2 MiB segments for requests up to 1 MiB, 20 MiB segments for
/// requests under 10 MiB, and larger requests in segments rounded up to 2 MiB.
struct config {
  backend_kind backend = backend_kind::automatic;  ///< key `backend`: auto|cuda|simulated
  int device = 0;                                  ///< key `device`: device ordinal

  // Simulated device.
  std::size_t capacity = 80 * GiB;  ///< key `capacity`: simulated device memory
  bool host_backing = false;        ///< key `host_backing`: back simulated memory with host pages

  // Size classes.
  std::size_t granularity = 512;              ///< key `granularity`: rounding of every request
  std::size_t small_size = 1 * MiB;           ///< key `small_size`: largest small-pool request
  std::size_t small_segment_size = 2 * MiB;   ///< key `small_segment`: small-pool segment size
  std::size_t large_segment_size = 20 * MiB;  ///< key `large_segment`: segment for mid requests
  std::size_t mid_size_limit = 10 * MiB;      ///< key `mid_size`: requests below get a
                                              ///< `large_segment_size` segment
  std::size_t segment_rounding = 2 * MiB;     ///< key `segment_rounding`: rounding of big segments
  std::size_t small_split_remainder = 512;    ///< key `small_split_min`: smallest small remainder
  std::size_t large_split_remainder = 1 * MiB;  ///< key `large_split_min`: a large block is split
                                                ///< only when more than this remains

  /// key `max_split_size`: blocks at least this big are never split, and requests below it never
  /// take them, so that large cached segments stay whole for large requests (and can be given
  /// back whole under memory pressure). SIZE_MAX ("none" in strings) means every block may be
  /// split. Must be larger than `large_segment_size`. Default 32 MiB (PyTorch's default is none;
  /// docs/benchmarks.md has the replays that chose it). Ignored with expandable segments.
  std::size_t max_split_size = 32 * MiB;

  /// key `memory_limit`: most bytes the allocator may reserve; 0 means no limit. A value in
  /// percent ("90%") is a fraction of the device capacity, resolved when the allocator starts.
  std::size_t memory_limit = 0;
  /// Fraction form of the memory limit (0 = not set); set by "memory_limit:NN%" or
  /// `memory_fraction:0.9`.
  double memory_fraction = 0.0;

  /// key `gc_threshold`: when a new segment would take reserved memory above this fraction of
  /// the memory limit (or of the device), cached segments that nothing fits in are returned
  /// first, largest first, only as many as needed. 0 turns it off (then the cache is released
  /// only when the device refuses a segment). Like PyTorch's garbage_collection_threshold, it
  /// keeps reserved memory close to what is in use when memory is tight.
  double gc_threshold = 0.9;

  /// key `expandable_segments` (PyTorch's name): each stream and pool grows one segment in
  /// place, a virtual address range whose physical chunks (of the backend's vm_granularity) are
  /// mapped on demand and unmapped when memory is released, holes in the middle included.
  /// Needs a backend with virtual memory (else the allocator fails to start with
  /// not_supported); ignored in pass-through mode (caching:0). Default off (docs/design.md).
  bool expandable_segments = false;

  /// key `trace_file`: write every allocate and free to this CSV (RMM log format); empty: off.
  std::string trace_file;
  /// key `debug`: checked mode (extra validation of every free).
  bool debug = false;
  /// key `caching`: false gives pass-through mode (every allocation its own segment).
  bool caching = true;

  /// Parses a config string; nullptr-equivalent empty string gives the defaults.
  /// @throws invalid_argument naming the offending key or value
  static config parse(std::string_view text);

  /// Parses the CACHALOT_CONF environment variable (defaults where unset).
  /// @throws invalid_argument as parse()
  static config from_environment();

  /// Checks the relations between fields (sizes are multiples of the granularity, ...).
  /// @throws invalid_argument naming the offending field
  void validate() const;

  /// The config in string form; `parse(to_string())` gives back an equal config.
  std::string to_string() const;
};

/// Parses a size such as "512", "4KiB", "2 MiB", "80GiB".
/// @throws invalid_argument on a bad number, a bad unit or an overflow
std::size_t parse_size(std::string_view text);

/// Formats a byte count for people: "512 B", "1.50 MiB", "80.00 GiB".
std::string format_bytes(std::size_t bytes);

}  // namespace cachalot
