// Proves that every public C++ header compiles as C++17 on its own terms (this target is
// built with CXX_STANDARD 17 and no extensions) and that the C++ API links.
#include "cachalot/cachalot.hpp"

#include <cstdio>

int main() {
  cachalot::allocator a(cachalot::config::parse("backend:simulated,capacity:1GiB"));
  cachalot::buffer b(a, 1000);
  std::printf("c++17 headers ok: %zu bytes allocated\n",
              static_cast<std::size_t>(a.stats().allocated_bytes.all.current));
  return a.stats().allocated_bytes.all.current == 1024 ? 0 : 1;
}
