// The CUDA baselines: cudaMalloc/cudaFree, cudaMallocAsync on a warm pool (release threshold at
// its maximum) and CUB's CachingDeviceAllocator, run on the same workloads as cachalot. They
// live in gpu_baselines.cu, compiled only where nvcc exists; elsewhere a stub says why not.
#pragma once

#include <string>

namespace cachalot::bench {

/// Registers the GPU baselines when a device exists. Returns false, with the reason in `why`,
/// where they cannot run.
bool register_gpu_baselines(std::string& why);

}  // namespace cachalot::bench
