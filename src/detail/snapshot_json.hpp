// A memory snapshot as JSON text (the format cachalot_memory_snapshot documents in cachalot.h).
#pragma once

#include <string>

#include "cachalot/stats.hpp"

namespace cachalot::detail {

/// `snap` of the allocator of `device` on backend `backend` as one JSON object.
std::string snapshot_to_json(const memory_snapshot& snap, int device, const std::string& backend);

}  // namespace cachalot::detail
