// Scaling sweeps of the cold paths against cached segments and streams (scaling.cpp).
#pragma once

namespace cachalot::bench {

/// Registers release_sweep, gc_sweep, growth_sweep and peak_sweep (on a simulated device).
void register_scaling();

}  // namespace cachalot::bench
