// The CUDA backend's events, recordable on a stream of any context. cuEventRecord needs the event
// and the stream to belong to the same context (cuda.h: "hEvent and hStream must be from the same
// context otherwise CUDA_ERROR_INVALID_HANDLE is returned"), and a block used on another device's
// stream (record_stream with a stream of GPU 1 on GPU 0's allocator, say) is freed by recording an
// event on that stream. So an event_t of the CUDA backend is a cuda_event: an event of the
// backend's own context, plus one event per other context it has been recorded in, created there
// on first use; query and synchronize look at the one recorded last.
//
// Invariants: the stream's context is the backend's for the special handles (NULL,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, which name the stream of the context current during the
// call: the backend's) and cuStreamGetCtx's answer for any other stream, asked on every record
// (a host-only driver call; stream handles may be reused, so nothing is cached); every driver call
// runs with the context of the event it touches current (context_guard) and the caller's
// restored; every cuEventCreate, cuEventRecord, cuEventQuery and cuEventSynchronize is timed on
// the backend's clock (device_clock: event_create, event_record, event_query, event_sync), the
// lookups of the stream's context are not (host-only, no kind of the cost model); an event is
// used by one thread at a time (the engine's pool hands it out), so a
// cuda_event has no lock; the other contexts must outlive the pending frees recorded there (the
// streams they belong to must anyway).
#pragma once

#include <vector>

#include "detail/cuda_driver.hpp"
#include "detail/device_clock.hpp"

namespace cachalot::detail::cu {

/// An event of the CUDA backend (what its event_t points to). See the file comment.
class cuda_event {
 public:
  /// Creates the event in `home` (timing disabled); the driver calls are timed on `clock`,
  /// which must outlive the event. @throws backend_error
  cuda_event(const driver_api& api, CUcontext home, device_clock& clock);
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  /// Destroys the home event and those of other contexts; errors while the driver shuts down
  /// are ignored, those of other contexts too (best effort). @throws backend_error for the home
  /// event's other errors (after destroying everything it could)
  void destroy();

  /// Records the event on `stream`, in the stream's own context. @throws backend_error
  void record(CUstream stream);
  /// True when the work before the last record has completed. @throws backend_error
  bool query();
  /// Waits for the work before the last record. @throws backend_error
  void synchronize();

 private:
  struct in_context {
    CUcontext context;
    CUevent event;
  };
  CUevent event_in(CUcontext context);  // the event of another context, created on first use

  const driver_api& api_;
  device_clock& clock_;
  in_context home_;
  in_context last_;                 // the one recorded last (home_ until a record elsewhere)
  std::vector<in_context> others_;  // one per other context, created on first use
};

}  // namespace cachalot::detail::cu
