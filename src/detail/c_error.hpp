// What every file implementing C entry points shares (defined in c_api.cpp and last_error.cpp,
// used by default_c_api.cpp and hooks.cpp): the per-thread last-error message read by
// cachalot_last_error(), the translation of a caught exception into a status, and the copies
// of stats and text into callers' buffers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "cachalot/allocator.hpp"
#include "cachalot/cachalot.h"

namespace cachalot::detail {

/// Stores `message` as the calling thread's last error (read back by cachalot_last_error()).
/// Safe from static destructors and atexit handlers (last_error.cpp); never throws.
void set_last_error(std::string_view message) noexcept;

/// The calling thread's last error, "" if none. Valid until its next failing call.
const char* last_error_text() noexcept;

/// Inside a catch block: turns the exception being handled into its C status and stores its
/// message (prefixed by "`context`: " when `context` is not null) as the last error.
cachalot_status status_of_current_exception(const char* context) noexcept;

/// Copies `text` into a caller's buffer as cachalot_memory_summary documents.
cachalot_status copy_text(const std::string& text, char* buf, std::size_t capacity,
                          std::size_t* needed);

/// Fills the caller's C stats struct from the stats of `a`, as cachalot_get_stats documents.
/// @throws invalid_argument for a NULL `out` or a bad `out->size`
void fill_stats(const allocator& a, cachalot_stats* out);

/// The same from stats already read (a pool's), with the config's max_split_size.
void fill_stats(const memory_stats& s, std::size_t max_split_size, cachalot_stats* out);

/// The snapshot of `a` as JSON text (cachalot_memory_snapshot).
std::string snapshot_json(const allocator& a);

}  // namespace cachalot::detail
