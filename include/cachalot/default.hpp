// Process-wide default allocators: one cachalot::allocator per device, created on first use
// and shared by everything in the process that asks for it (the framework hooks of hooks.h
// among them). Invariants:
//  - creation is thread-safe and happens once per device; a creation that throws leaves the
//    slot empty, so a later call retries;
//  - the config is the one given to configure_default_allocators() or else the CACHALOT_CONF
//    environment variable (config::from_environment), read at creation, with `device` set to
//    the requested device (and memory_fraction to set_default_memory_fraction's, if any);
//  - they never run on the simulated device unless the config says `backend:simulated`:
//    `backend:auto` means CUDA here, and where CUDA cannot serve, creation fails naming the
//    cause (printed once on stderr, as is a bad config); the backend, device and config of
//    each are logged at info level (CACHALOT_LOG=info) when it is created;
//  - default allocators are never destroyed: at process exit the CUDA runtime may already be
//    unloading, and the driver reclaims device memory of a dying process anyway, so they are
//    leaked on purpose (they stay reachable from a static table: not a reported leak).
#pragma once

#include <string_view>

#include "cachalot/allocator.hpp"

namespace cachalot {

/// Number of device ordinals that can have a default allocator: 0 to max_default_devices - 1.
inline constexpr int max_default_devices = 64;

/// The default allocator of `device`, created on first use (see the file comment).
/// @throws invalid_argument for a device outside [0, max_default_devices) or a bad config
/// @throws backend_error when CUDA cannot start (no driver, no such device), not_supported in a
///         build without CUDA (unless the config says `backend:simulated`)
allocator& default_allocator(int device = 0);

/// Sets the config of the default allocators created from now on (the CACHALOT_CONF syntax).
/// The same config as the existing default allocators' is accepted again.
/// @throws invalid_argument for a bad config, or when a default allocator exists already with
///         another config (nothing is changed then)
void configure_default_allocators(std::string_view config_text);

/// Forgets the config of configure_default_allocators(): CACHALOT_CONF applies again. It is
/// parsed now. @throws invalid_argument as configure_default_allocators
void configure_default_allocators_from_environment();

/// Limits the default allocator of `device` to `fraction` of the device memory (config key
/// memory_fraction; 0: no limit), for when it is created.
/// @throws invalid_argument for a bad device or a fraction outside [0, 1]
/// @throws not_supported when that allocator exists already with another fraction
void set_default_memory_fraction(int device, double fraction);

/// The config of the default allocator of `device`: the one it was created with, or the one
/// default_allocator() would create it with now. Never creates it (so configuring stays open).
/// @throws invalid_argument for a device outside [0, max_default_devices) or a bad config
config default_allocator_config(int device = 0);

/// The default allocator of `device` if it was created already, else nullptr. Never creates
/// one and never throws.
allocator* default_allocator_if_created(int device) noexcept;

/// The created default allocator that owns `ptr` as a live allocation, or nullptr.
allocator* default_allocator_owning(const void* ptr) noexcept;

/// Calls empty_cache() on every default allocator created so far.
/// @throws backend_error when a device call fails
void empty_default_caches();

}  // namespace cachalot
