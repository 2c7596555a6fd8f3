// Test double of <torch/extension.h>: only what cachalot's _torch_ext.cpp uses, with the
// behaviour of PyTorch's macros (c10/util/Exception.h: TORCH_CHECK throws c10::Error,
// TORCH_CHECK_WITH(OutOfMemoryError, ...) throws c10::OutOfMemoryError, TORCH_WARN warns) and
// a PYBIND11_MODULE that defines a plain function the harness calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

namespace c10 {
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct OutOfMemoryError : Error {
  using Error::Error;
};
namespace detail {
template <class... A>
std::string cat(const A&... a) {
  std::ostringstream out;
  ((out << a), ...);
  return out.str();
}
}  // namespace detail
}  // namespace c10

inline std::vector<std::string>& mock_warnings() {
  static std::vector<std::string> w;
  return w;
}

#define TORCH_CHECK(cond, ...)                                        \
  do {                                                                \
    if (!(cond)) throw ::c10::Error(::c10::detail::cat(__VA_ARGS__)); \
  } while (0)
#define TORCH_CHECK_WITH(cls, cond, ...)                            \
  do {                                                              \
    if (!(cond)) throw ::c10::cls(::c10::detail::cat(__VA_ARGS__)); \
  } while (0)
#define TORCH_WARN(...) mock_warnings().push_back(::c10::detail::cat(__VA_ARGS__))

struct mock_module {
  std::map<std::string, std::function<std::string(const std::map<std::string, uint64_t>&)>> fns;
  std::string doc_text;
  std::string& doc() { return doc_text; }
  template <class F>
  void def(const char* name, F f, const char*) {
    fns[name] = f;
  }
};
#define PYBIND11_MODULE(name, m) void mock_init(mock_module& m)
