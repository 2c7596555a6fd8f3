// The C shim's per-thread error message, shared by every file that implements a C entry point
// (c_api.cpp defines it; hooks.cpp uses it). cachalot_last_error() returns what the calling
// thread stored last.
#pragma once

#include <string>

namespace cachalot::detail {

/// Stores `message` as the calling thread's last error (read back by cachalot_last_error()).
void set_last_error(const std::string& message);

}  // namespace cachalot::detail

#include <cstddef>

#include "cachalot/cachalot.h"
#include "cachalot/stats.hpp"

namespace cachalot::detail {

/// Copies `text` into a caller's buffer as cachalot_memory_summary documents.
cachalot_status copy_text(const std::string& text, char* buf, std::size_t capacity,
                          std::size_t* needed);

/// Fills a C stats struct from the C++ stats; INVALID_ARGUMENT for a NULL `out`.
cachalot_status fill_stats(const memory_stats& s, cachalot_stats* out);

}  // namespace cachalot::detail
