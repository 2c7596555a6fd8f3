// A memory snapshot as JSON text (the format cachalot_memory_snapshot documents in cachalot.h),
// with the device calls of the backend.
#pragma once

#include <string>

#include "cachalot/device_cost.hpp"
#include "cachalot/stats.hpp"

namespace cachalot::detail {

/// `snap` of the allocator of `device` on backend `backend` as one JSON object; with `calls`, a
/// "device_calls" member after the segments (cachalot::to_json of the backend's call figures).
std::string snapshot_to_json(const memory_snapshot& snap, int device, const std::string& backend,
                             const device_call_stats* calls = nullptr);

}  // namespace cachalot::detail
