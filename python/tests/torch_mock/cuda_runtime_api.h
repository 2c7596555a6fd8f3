// Test double of <cuda_runtime_api.h>: the stream type and cudaStreamGetCaptureInfo, whose
// answers the harness sets per stream (mock_capture_ids: stream -> the capture id it captures
// into; a stream not in it does not capture). The three-argument form is the one CUDA 11, 12
// and 13 all accept (later arguments have defaults in CUDA 12 and 13).
#pragma once

#include <map>

typedef struct CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

inline std::map<cudaStream_t, unsigned long long>& mock_capture_ids() {
  static std::map<cudaStream_t, unsigned long long> ids;
  return ids;
}

inline cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                            unsigned long long* id) {
  const auto it = mock_capture_ids().find(stream);
  *status =
      it == mock_capture_ids().end() ? cudaStreamCaptureStatusNone : cudaStreamCaptureStatusActive;
  if (id != nullptr) *id = it == mock_capture_ids().end() ? 0 : it->second;
  return cudaSuccess;
}
