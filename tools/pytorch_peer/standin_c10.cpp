// What c10 takes from outside itself, for the host-only build (tools/pytorch_peer): the driver
// API table (c10/cuda/driver_api.cpp dlopens libcuda.so.1; here it points at the stand-in's
// functions) and the cudaMallocAsync backend, which the stand-in does not provide (c10's
// CUDAMallocAsyncAllocator.cpp is not compiled; choosing backend:cudaMallocAsync fails with a
// message instead).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/driver_api.h>
#include <c10/util/Exception.h>

namespace c10::cuda {

DriverAPI* DriverAPI::get() {
  static DriverAPI api = [] {
    DriverAPI r{};
#define CACHALOT_STANDIN_ENTRY(name) r.name##_ = &name;
    C10_LIBCUDA_DRIVER_API(CACHALOT_STANDIN_ENTRY)
#undef CACHALOT_STANDIN_ENTRY
    return r;
  }();
  return &api;
}

void* DriverAPI::get_nvml_handle() {
  return nullptr;  // no NVML: c10 then leaves process memory figures out of its OOM message
}

namespace CUDACachingAllocator::CudaMallocAsync {

CUDAAllocator* allocator() {
  TORCH_CHECK(false, "backend:cudaMallocAsync is not part of cachalot's host-only stand-in");
  return nullptr;
}

}  // namespace CUDACachingAllocator::CudaMallocAsync
}  // namespace c10::cuda
