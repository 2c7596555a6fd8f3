// Consumer of an installed cachalot through the C++ API.
#include <cachalot/cachalot.hpp>

int main() {
  cachalot::allocator a(cachalot::config::parse("backend:simulated,capacity:1GiB"));
  void* p = a.allocate(4096);
  a.deallocate(p);
  return a.stats().num_frees == 1 ? 0 : 1;
}
