// Names of the status codes.
#include "cachalot/errors.hpp"

namespace cachalot {

const char* status_name(status s) noexcept {
  switch (s) {
    case status::success:
      return "success";
    case status::out_of_memory:
      return "out of memory";
    case status::invalid_argument:
      return "invalid argument";
    case status::invalid_pointer:
      return "invalid pointer";
    case status::backend:
      return "backend error";
    case status::pool_asleep:
      return "pool asleep";
    case status::not_supported:
      return "not supported";
  }
  return "unknown status";
}

}  // namespace cachalot
