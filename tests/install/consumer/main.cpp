// Consumer of an installed cachalot through the C++ API; checks the version macros against the
// version the test installed.
#include <cachalot/cachalot.hpp>
#include <cstring>

static_assert(CACHALOT_VERSION == CACHALOT_VERSION_MAJOR * 10000 + CACHALOT_VERSION_MINOR * 100 +
                                      CACHALOT_VERSION_PATCH);

int main() {
  if (std::strcmp(CACHALOT_VERSION_STRING, CACHALOT_WANT) != 0) return 2;
  cachalot::allocator a(cachalot::config::parse("backend:simulated,capacity:1GiB"));
  void* p = a.allocate(4096);
  a.deallocate(p);
  return a.stats().num_frees == 1 ? 0 : 1;
}
