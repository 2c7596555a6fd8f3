// cuda_event (see detail/cuda_event.hpp): an event of the backend's context, and one per other
// context it is recorded in, so that a record on any device's stream uses an event of the
// stream's context.
#include "detail/cuda_event.hpp"

#include "cachalot/errors.hpp"
#include "detail/cuda_context.hpp"

namespace cachalot::detail::cu {

namespace {

bool special_stream(CUstream stream) noexcept {
  return stream == nullptr || stream == stream_legacy() || stream == stream_per_thread();
}

CUevent create_in(const driver_api& api, CUcontext context, device_clock& clock) {
  const context_guard guard(api, context);
  CUevent event = nullptr;
  const timed_call t(clock, device_call::event_create);
  CACHALOT_CU_TRY(api, EventCreate, &event, kEventDisableTiming);
  return event;
}

}  // namespace

cuda_event::cuda_event(const driver_api& api, CUcontext home, device_clock& clock)
    : api_(api), clock_(clock), home_{home, create_in(api, home, clock)}, last_(home_) {}

void cuda_event::destroy() {
  for (const in_context& o : others_) {
    try {
      const context_guard guard(api_, o.context);
      (void)api_.EventDestroy(o.event);
    } catch (const backend_error&) {  // that context is gone: so is its event
    }
  }
  others_.clear();
  const context_guard guard(api_, home_.context);
  const CUresult res = api_.EventDestroy(home_.event);
  if (is_shutdown_error(res)) return;
  CACHALOT_CU_CHECK(res, "cuEventDestroy(event)");
}

CUevent cuda_event::event_in(CUcontext context) {
  for (const in_context& o : others_) {
    if (o.context == context) return o.event;
  }
  others_.reserve(others_.size() + 1);  // no leak if the vector cannot grow
  others_.push_back(in_context{context, create_in(api_, context, clock_)});
  return others_.back().event;
}

void cuda_event::record(CUstream stream) {
  // NULL is the legacy default stream (the entry points are the legacy-stream variants); the
  // handles cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2) are passed as they are.
  const context_guard guard(api_, home_.context);
  CUcontext context = home_.context;
  if (!special_stream(stream)) CACHALOT_CU_TRY(api_, StreamGetCtx, stream, &context);
  if (context == home_.context) {
    const timed_call t(clock_, device_call::event_record);
    CACHALOT_CU_TRY(api_, EventRecord, home_.event, stream);
    last_ = home_;
    return;
  }
  const CUevent event = event_in(context);
  const context_guard there(api_, context);
  {
    const timed_call t(clock_, device_call::event_record);
    CACHALOT_CU_TRY(api_, EventRecord, event, stream);
  }
  last_ = in_context{context, event};
}

bool cuda_event::query() {
  const context_guard guard(api_, last_.context);
  CUresult res = kSuccess;
  {
    const timed_call t(clock_, device_call::event_query);
    res = api_.EventQuery(last_.event);
  }
  if (res == kErrorNotReady) return false;
  CACHALOT_CU_CHECK(res, "cuEventQuery(event)");
  return true;
}

void cuda_event::synchronize() {
  const context_guard guard(api_, last_.context);
  const timed_call t(clock_, device_call::event_sync);
  CACHALOT_CU_TRY(api_, EventSynchronize, last_.event);
}

}  // namespace cachalot::detail::cu
