// The parent project's program: allocates through cachalot built as a subproject.
#include <cachalot/cachalot.hpp>

int main() {
  cachalot::allocator a(cachalot::config::parse("backend:simulated,capacity:1GiB"));
  a.deallocate(a.allocate(1 << 20));
  return a.stats().num_allocs == 1 ? 0 : 1;
}
