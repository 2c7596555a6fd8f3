// PyTorch's graph-pool hooks (cachalot/hooks.h) over the default allocators: PyTorch names a
// private pool by a MempoolId_t (two integers) per device; each maps to one graph pool of that
// device's default allocator. beginAllocateToPool creates the pool or adds a reference to it
// (one per graph sharing it) and routes the filtered streams to it; endAllocateToPool ends that
// route; releasePool drops a reference, and the last one releases the pool. Invariant: a
// MempoolId_t maps to a live (not released) pool, or to nothing. No exception leaves a hook.
#include <map>
#include <mutex>
#include <tuple>

#include "cachalot/default.hpp"
#include "cachalot/errors.hpp"
#include "cachalot/hooks.h"
#include "detail/c_error.hpp"

namespace {

using key = std::tuple<int, std::uint64_t, std::uint64_t>;

struct torch_pools {
  std::mutex mutex;
  std::map<key, cachalot::pool_id> ids;
};

torch_pools& registry() {
  static auto* r = new torch_pools();  // never destroyed, like the default allocators
  return *r;
}

template <class F>
cachalot_status guarded(const char* hook, F&& f) noexcept {
  try {
    f();
    return CACHALOT_SUCCESS;
  } catch (...) {
    return cachalot::detail::status_of_current_exception(hook);
  }
}

// The pool PyTorch calls (`a`, `b`) on `device`; throws invalid_argument if there is none.
cachalot::pool_id known(torch_pools& r, int device, std::uint64_t a, std::uint64_t b) {
  const auto it = r.ids.find(key{device, a, b});
  if (it == r.ids.end()) {
    throw cachalot::invalid_argument("no graph pool was begun with this MempoolId_t on this device",
                                     __FILE__, __LINE__);
  }
  return it->second;
}

}  // namespace

extern "C" {

cachalot_status cachalot_torch_begin_allocate_to_pool(int device, uint64_t pool_id0,
                                                      uint64_t pool_id1,
                                                      cachalot_stream_filter filter,
                                                      void* context) {
  return guarded("cachalot_torch_begin_allocate_to_pool", [&] {
    cachalot::allocator& a = cachalot::default_allocator(device);
    torch_pools& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const key k{device, pool_id0, pool_id1};
    auto it = r.ids.find(k);
    bool created = false;
    if (it == r.ids.end()) {
      cachalot::pool_options o;
      o.name = "torch(" + std::to_string(pool_id0) + "," + std::to_string(pool_id1) + ")";
      o.type = cachalot::pool_type::graph;
      it = r.ids.emplace(k, a.create_pool(o)).first;
      created = true;
    } else {
      a.retain_pool(it->second);
    }
    try {
      cachalot::stream_filter f = [](cachalot::stream_t) { return true; };
      if (filter != nullptr) {
        f = [filter, context](cachalot::stream_t s) { return filter(context, s) != 0; };
      }
      a.begin_allocate_to_pool(it->second, std::move(f));
    } catch (...) {  // undo the reference this call took
      a.release_pool(it->second);
      if (created) r.ids.erase(it);
      throw;
    }
  });
}

cachalot_status cachalot_torch_end_allocate_to_pool(int device, uint64_t pool_id0,
                                                    uint64_t pool_id1) {
  return guarded("cachalot_torch_end_allocate_to_pool", [&] {
    torch_pools& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    cachalot::default_allocator(device).end_allocate_to_pool(known(r, device, pool_id0, pool_id1));
  });
}

cachalot_status cachalot_torch_release_pool(int device, uint64_t pool_id0, uint64_t pool_id1) {
  return guarded("cachalot_torch_release_pool", [&] {
    cachalot::allocator& a = cachalot::default_allocator(device);
    torch_pools& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const cachalot::pool_id id = known(r, device, pool_id0, pool_id1);
    a.release_pool(id);
    for (const cachalot::pool_info& i : a.pools()) {
      if (i.id == id && i.released) r.ids.erase(key{device, pool_id0, pool_id1});
    }
  });
}

}  // extern "C"
