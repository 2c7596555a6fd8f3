// context_guard (see detail/cuda_context.hpp): save the caller's current context, make the
// backend's current, restore the caller's (NULL included) afterwards.
#include "detail/cuda_context.hpp"

namespace cachalot::detail::cu {

context_guard::context_guard(const driver_api& api, CUcontext context) : api_(api) {
  const CUresult res = api_.CtxGetCurrent(&previous_);
  if (is_shutdown_error(res)) return;  // process exit: the guarded call reports it
  CACHALOT_CU_CHECK(res, "cuCtxGetCurrent(&previous)");
  if (previous_ == context) return;
  CACHALOT_CU_TRY(api_, CtxSetCurrent, context);
  switched_ = true;
}

context_guard::~context_guard() {
  // cuCtxSetCurrent(NULL) pops the context we pushed onto an empty stack; any other previous
  // context replaces ours at the top of the caller's stack.
  if (switched_) (void)api_.CtxSetCurrent(previous_);
}

}  // namespace cachalot::detail::cu
