// Stand-in for gpu_baselines.cu in builds without a CUDA compiler.
#include "gpu_baselines.hpp"

namespace cachalot::bench {

bool register_gpu_baselines(std::string& why) {
  why = "this build has no CUDA compiler";
  return false;
}

}  // namespace cachalot::bench
