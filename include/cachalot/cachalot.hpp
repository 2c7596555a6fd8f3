// Umbrella header of the C++ API.
#pragma once

#include "cachalot/allocator.hpp"    // IWYU pragma: export
#include "cachalot/backend.hpp"      // IWYU pragma: export
#include "cachalot/buffer.hpp"       // IWYU pragma: export
#include "cachalot/config.hpp"       // IWYU pragma: export
#include "cachalot/errors.hpp"       // IWYU pragma: export
#include "cachalot/fault_injection.hpp"  // IWYU pragma: export
#include "cachalot/pool.hpp"         // IWYU pragma: export
#include "cachalot/simulated_device.hpp"  // IWYU pragma: export
#include "cachalot/stats.hpp"        // IWYU pragma: export
#include "cachalot/types.hpp"        // IWYU pragma: export
