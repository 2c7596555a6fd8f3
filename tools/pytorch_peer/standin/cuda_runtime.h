// Host-only stand-in for <cuda_runtime.h> (tools/pytorch_peer): the runtime API declarations.
#pragma once

#include "cuda_runtime_api.h"
