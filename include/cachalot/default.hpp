// Process-wide default allocators: one cachalot::allocator per device, created on first use
// and shared by everything in the process that asks for it (the framework hooks of hooks.h
// among them). Invariants:
//  - creation is thread-safe and happens once per device; a creation that throws leaves the
//    slot empty, so a later call retries;
//  - the config comes from the CACHALOT_CONF environment variable (config::from_environment),
//    read at creation, with `device` overridden by the requested device;
//  - default allocators are never destroyed: at process exit the CUDA runtime may already be
//    unloading, and the driver reclaims device memory of a dying process anyway, so they are
//    leaked on purpose (they stay reachable from a static table: not a reported leak).
#pragma once

#include "cachalot/allocator.hpp"

namespace cachalot {

/// Number of device ordinals that can have a default allocator: 0 to max_default_devices - 1.
inline constexpr int max_default_devices = 64;

/// The default allocator of `device`, created on first use from CACHALOT_CONF.
/// @throws invalid_argument for a device outside [0, max_default_devices) or a bad CACHALOT_CONF
/// @throws backend_error when the backend cannot start (e.g. `backend:cuda` without a GPU)
allocator& default_allocator(int device = 0);

/// The default allocator of `device` if it was created already, else nullptr. Never creates
/// one and never throws.
allocator* default_allocator_if_created(int device) noexcept;

/// The created default allocator that owns `ptr` as a live allocation, or nullptr.
allocator* default_allocator_owning(const void* ptr) noexcept;

/// Calls empty_cache() on every default allocator created so far.
/// @throws backend_error when a device call fails
void empty_default_caches();

}  // namespace cachalot
