// Stand-in for the header PyTorch's CMake generates from c10/macros/cmake_macros.h.in
// (tools/pytorch_peer): a static c10, without glog, gflags or NUMA.
#ifndef C10_MACROS_CMAKE_MACROS_H_
#define C10_MACROS_CMAKE_MACROS_H_
#endif  // C10_MACROS_CMAKE_MACROS_H_
