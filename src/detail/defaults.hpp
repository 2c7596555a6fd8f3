// Operations on the default allocators shared by the C entry points (default C API, framework
// hooks): they find the right default allocator and report out-of-memory errors on stderr
// (log_oom: one line at warn, the memory summary at info) before letting them propagate.
#pragma once

#include <cstddef>

#include "cachalot/types.hpp"

namespace cachalot::detail {

/// Allocates on the default allocator of `device` (created if needed).
/// @throws out_of_memory (after logging it) and what default_allocator throws
void* default_allocate(int device, std::size_t size, stream_t stream);

/// Frees `ptr` (`size` 0: unknown) last used on `stream` with the default allocator of
/// `device` or, if that one does not own it, with the default allocator that does.
/// @throws invalid_pointer when none owns it (with the reason, when `device`'s allocator knows)
void default_free(int device, void* ptr, std::size_t size, stream_t stream);

/// Marks the live allocation `ptr` of whichever default allocator owns it as used on `stream`.
/// @throws invalid_pointer when none owns it
void default_record_stream(void* ptr, stream_t stream);

}  // namespace cachalot::detail
