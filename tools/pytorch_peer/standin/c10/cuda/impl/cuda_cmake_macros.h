// Stand-in for the header PyTorch's CMake generates from c10/cuda/impl/cuda_cmake_macros.h.in
// (tools/pytorch_peer): c10_cuda linked statically.
#pragma once
