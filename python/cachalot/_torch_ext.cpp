// cachalot's PyTorch extension, compiled against the installed torch by cachalot.torch.enable()
// (torch.utils.cpp_extension.load). It builds PyTorch's C++ CUDAPluggableAllocator with
// createCustomAllocator, sets every hook the installed version has (read from
// torch/csrc/cuda/CUDAPluggableAllocator.h of PyTorch 2.x; each setter is detected at compile
// time, so that one source builds against every generation of the graph-pool setters), and
// makes it the current allocator. The hooks call libcachalot through addresses handed over by
// the Python package (the library it loaded), never by linking it.
//
// The three generations of graph-pool setters, as read in PyTorch's sources (the signatures
// are those of the setters; what begins and ends a route is that of PyTorch's callers):
//  1. set_capture_begin_fn(void(int, CaptureId_t, MempoolId_t)),
//     set_capture_about_to_end_fn(void(int, CaptureId_t)), set_capture_ended_fn(same),
//     set_capture_destroy_fn(void(int, MempoolId_t)): torch/csrc/cuda/CUDAPluggableAllocator.h
//     at eellison/pytorch 99c8637a (a fork carrying that version), behind
//     CUDAAllocator::notifyCaptureBegin/AboutToEnd/Ended/Destroy of c10/cuda/
//     CUDACachingAllocator.h (pytorch/pytorch 003ce815). aten/src/ATen/cuda/CUDAGraph.cpp
//     of that generation calls notifyCaptureBegin(dev, id_, mempool_id_) after
//     cudaStreamBeginCapture with id_ from cudaStreamGetCaptureInfo, and
//     notifyCaptureAboutToEnd(dev, id_) before cudaStreamEndCapture; PyTorch's own allocator
//     then routes an allocation to the pool when its stream's capture id is id_
//     (CUDACachingAllocator.cpp, get_pool: capture_to_pool_map). So the route is "streams
//     capturing into capture id_", and it ends by that id.
//  2. set_begin_allocate_stream_to_pool(void(int, cudaStream_t, MempoolId_t)),
//     set_end_allocate_stream_to_pool_fn(void(int, cudaStream_t)),
//     set_release_pool(void(int, MempoolId_t)): CUDAPluggableAllocator.h at
//     ShaoxunZeng/PyTorch-Medusa de68b809 and Pegessi/pytorch_nebula f999424a (forks), behind
//     CUDAAllocator::beginAllocateStreamToPool(int, cudaStream_t, MempoolId_t) and
//     endAllocateStreamToPool(int, cudaStream_t) (c10/cuda/CUDACachingAllocator.h,
//     pytorch/pytorch 4c95f728). CUDAGraph::capture_begin/capture_end pass capture_stream_ to
//     both: the route is "that stream", and it ends by that stream.
//  3. set_begin_allocate_to_pool(void(int, MempoolId_t, std::function<bool(cudaStream_t)>)),
//     set_end_allocate_to_pool_fn(void(int, MempoolId_t)),
//     set_release_pool(void(int, MempoolId_t)): CUDAPluggableAllocator.h at pytorch/pytorch
//     011c9ee1. The route is PyTorch's filter, and it ends by its pool.
// Generations 1 and 2 end a route by what began it, not by its pool: the extension remembers
// which pool each (device, capture id) or (device, stream) was routed to.
//
// Invariants: an allocation cachalot cannot satisfy throws c10::OutOfMemoryError (Python:
// torch.OutOfMemoryError, torch.cuda.OutOfMemoryError) or c10::Error with cachalot's message,
// so no tensor at address 0 exists; hooks PyTorch calls from destructors (free, end/release of
// graph pools) never throw; graph pools refuse before a capture begins.
#include <torch/extension.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr int kSuccess = 0;
constexpr int kOutOfMemory = 1;
constexpr int kAllDevices = -1;

// The libcachalot entry points the hooks call (cachalot/cachalot.h, cachalot/hooks.h).
struct cachalot_api {
  int (*malloc)(int, void**, size_t, void*) = nullptr;
  void (*free)(void*, size_t, int, void*) = nullptr;
  int (*record_stream)(void*, void*) = nullptr;
  int (*empty_cache)(int) = nullptr;
  int (*set_memory_fraction)(int, double) = nullptr;
  int (*begin_pool)(int, uint64_t, uint64_t, int (*)(void*, void*), void*) = nullptr;
  int (*end_pool)(int, uint64_t, uint64_t) = nullptr;
  int (*release_pool)(int, uint64_t, uint64_t) = nullptr;
  const char* (*last_error)() = nullptr;
};
cachalot_api g_api;
bool g_installed = false;

std::string last_error(const char* what) {
  const char* e = g_api.last_error();
  return std::string("cachalot: ") + what + ": " + (e != nullptr ? e : "");
}

// A stream filter handed to cachalot (C) for the life of a pool.
struct pool_filter {
  std::function<bool(cudaStream_t)> accepts;
  static int call(void* self, void* stream) {
    try {
      return static_cast<pool_filter*>(self)->accepts(static_cast<cudaStream_t>(stream)) ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
};
// The filters of the active routes into each pool, most recent last: cachalot calls a route's
// filter until that route ends (end_allocate_to_pool ends the most recent route into the
// pool), so each filter lives exactly that long, whatever releasePool does meanwhile.
std::map<std::pair<uint64_t, uint64_t>, std::vector<std::unique_ptr<pool_filter>>> g_filters;
std::mutex g_filters_mutex;

template <class Pool>
std::pair<uint64_t, uint64_t> key_of(const Pool& pool) {
  return {static_cast<uint64_t>(pool.first), static_cast<uint64_t>(pool.second)};
}

// beginAllocateToPool: throws (before PyTorch begins the capture) when cachalot refuses.
void begin_pool(int device, std::pair<uint64_t, uint64_t> pool,
                std::function<bool(cudaStream_t)> accepts) {
  auto filter = std::make_unique<pool_filter>();
  filter->accepts = std::move(accepts);
  pool_filter* raw = filter->accepts ? filter.get() : nullptr;
  const int st = g_api.begin_pool(device, pool.first, pool.second,
                                  raw != nullptr ? &pool_filter::call : nullptr, raw);
  TORCH_CHECK(st == kSuccess, last_error("graph pool"));
  std::lock_guard<std::mutex> lock(g_filters_mutex);
  g_filters[pool].push_back(std::move(filter));
}

// endAllocateToPool and releasePool: may run in destructors, so they warn instead of throwing.
void end_pool(int device, std::pair<uint64_t, uint64_t> pool) {
  if (g_api.end_pool(device, pool.first, pool.second) != kSuccess) {
    TORCH_WARN(last_error("end of graph pool"));
    return;  // no route ended: its filter stays
  }
  std::lock_guard<std::mutex> lock(g_filters_mutex);
  auto it = g_filters.find(pool);
  if (it == g_filters.end() || it->second.empty()) return;
  it->second.pop_back();
  if (it->second.empty()) g_filters.erase(it);
}

// The routes begun by setter generations 1 and 2, by what ends them: (device, capture id or
// stream) -> the pools routed to, most recent last (guarded by g_filters_mutex).
std::map<std::pair<int, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>> g_routes;

template <class Handle>
uint64_t route_key(Handle h) {
  if constexpr (std::is_pointer_v<Handle>) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
  } else {
    return static_cast<uint64_t>(h);
  }
}

// A begin of generation 1 or 2: begins the pool's route and remembers it under `route`.
[[maybe_unused]] void begin_route(int device, uint64_t route, std::pair<uint64_t, uint64_t> pool,
                                  std::function<bool(cudaStream_t)> accepts) {
  begin_pool(device, pool, std::move(accepts));  // throws when cachalot refuses: no route
  std::lock_guard<std::mutex> lock(g_filters_mutex);
  g_routes[{device, route}].push_back(pool);
}

// An end of generation 1 or 2 (`what` names the route in a warning, e.g. "stream 0x7f..."):
// ends the pool's route begun last under `route`.
[[maybe_unused]] void end_route(int device, uint64_t route, const std::string& what) {
  std::pair<uint64_t, uint64_t> pool;
  {
    std::lock_guard<std::mutex> lock(g_filters_mutex);
    auto it = g_routes.find({device, route});
    if (it == g_routes.end()) {
      TORCH_WARN("cachalot: end of graph pool: no graph pool was begun for ", what, " on device ",
                 device);
      return;
    }
    pool = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) g_routes.erase(it);
  }
  end_pool(device, pool);
}

// Generation 1's route: streams capturing into capture `id` (what PyTorch's own allocator of
// that generation routes, by cudaStreamGetCaptureInfo). A template, instantiated only where
// generation 1 is wired, so that no other build refers to the runtime's symbol.
template <class Stream>
bool captures_into(Stream stream, unsigned long long id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long stream_id = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &stream_id) != cudaSuccess) return false;
  return status != cudaStreamCaptureStatusNone && stream_id == id;
}

void release_pool(int device, std::pair<uint64_t, uint64_t> pool) {
  if (g_api.release_pool(device, pool.first, pool.second) != kSuccess) {
    TORCH_WARN(last_error("release of graph pool"));
  }
}

// --- detection of the setters of the installed PyTorch --------------------------------------
#define CACHALOT_HAS_SETTER(setter)         \
  template <class A, class = void>          \
  struct has_##setter : std::false_type {}; \
  template <class A>                        \
  struct has_##setter<A, std::void_t<decltype(&A::setter)>> : std::true_type {};

CACHALOT_HAS_SETTER(set_init_fn)
CACHALOT_HAS_SETTER(set_reset_fn)
CACHALOT_HAS_SETTER(set_memory_fraction_fn)
CACHALOT_HAS_SETTER(set_record_stream_fn)
CACHALOT_HAS_SETTER(set_begin_allocate_to_pool)          // generation 3: (device, pool, filter)
CACHALOT_HAS_SETTER(set_end_allocate_to_pool_fn)         // generation 3: (device, pool)
CACHALOT_HAS_SETTER(set_begin_allocate_stream_to_pool)   // generation 2: (device, stream, pool)
CACHALOT_HAS_SETTER(set_end_allocate_stream_to_pool_fn)  // generation 2: (device, stream)
CACHALOT_HAS_SETTER(set_release_pool)                    // generations 2 and 3: (device, pool)
CACHALOT_HAS_SETTER(set_capture_begin_fn)                // generation 1: (device, capture id, pool)
CACHALOT_HAS_SETTER(set_capture_about_to_end_fn)         // generation 1: (device, capture id)
CACHALOT_HAS_SETTER(set_capture_destroy_fn)              // generation 1: (device, pool)
#undef CACHALOT_HAS_SETTER

// The graph-pool hooks, whichever generation of setters `A` has. Their lambdas name their
// return type, so that a generic parameter is deduced without instantiating the body.
template <class A>
std::string wire_pools(A& a) {
  std::string wired;
  if constexpr (has_set_begin_allocate_to_pool<A>::value) {
    a.set_begin_allocate_to_pool([](int device, auto pool, auto filter) -> void {
      begin_pool(device, key_of(pool), std::function<bool(cudaStream_t)>(std::move(filter)));
    });
    wired += " begin_allocate_to_pool";
  } else if constexpr (has_set_begin_allocate_stream_to_pool<A>::value) {
    a.set_begin_allocate_stream_to_pool([](int device, cudaStream_t stream, auto pool) -> void {
      begin_route(device, route_key(stream), key_of(pool),
                  [stream](cudaStream_t s) { return s == stream; });
    });
    wired += " begin_allocate_stream_to_pool";
  } else if constexpr (has_set_capture_begin_fn<A>::value) {
    a.set_capture_begin_fn([](int device, auto capture_id, auto pool) -> void {
      const unsigned long long id = capture_id;
      begin_route(device, route_key(id), key_of(pool),
                  [id](cudaStream_t s) { return captures_into(s, id); });
    });
    wired += " capture_begin";
  }
  if constexpr (has_set_end_allocate_to_pool_fn<A>::value) {
    a.set_end_allocate_to_pool_fn(
        [](int device, auto pool) -> void { end_pool(device, key_of(pool)); });
    wired += " end_allocate_to_pool";
  } else if constexpr (has_set_end_allocate_stream_to_pool_fn<A>::value) {
    a.set_end_allocate_stream_to_pool_fn([](int device, cudaStream_t stream) -> void {
      char name[32];
      std::snprintf(name, sizeof name, "stream %p", static_cast<void*>(stream));
      end_route(device, route_key(stream), name);
    });
    wired += " end_allocate_stream_to_pool";
  } else if constexpr (has_set_capture_about_to_end_fn<A>::value) {
    a.set_capture_about_to_end_fn([](int device, auto capture_id) -> void {
      const unsigned long long id = capture_id;
      end_route(device, route_key(id), "capture id " + std::to_string(id));
    });
    wired += " capture_about_to_end";
  }
  if constexpr (has_set_release_pool<A>::value) {
    a.set_release_pool([](int device, auto pool) -> void { release_pool(device, key_of(pool)); });
    wired += " release_pool";
  } else if constexpr (has_set_capture_destroy_fn<A>::value) {
    a.set_capture_destroy_fn(
        [](int device, auto pool) -> void { release_pool(device, key_of(pool)); });
    wired += " capture_destroy";
  }
  return wired;
}

template <class A>
std::string wire(A& a) {
  std::string wired = "malloc free";
  if constexpr (has_set_init_fn<A>::value) {
    // Nothing to do: each default allocator is created at the first allocation on its device,
    // so that no CUDA context is made on a device PyTorch does not use.
    a.set_init_fn([](int) {});
    wired += " init";
  }
  if constexpr (has_set_reset_fn<A>::value) {
    a.set_reset_fn(
        [] { TORCH_CHECK(g_api.empty_cache(kAllDevices) == kSuccess, last_error("empty_cache")); });
    wired += " reset(empty_cache)";
  }
  if constexpr (has_set_memory_fraction_fn<A>::value) {
    a.set_memory_fraction_fn([](double fraction, int device) {
      TORCH_CHECK(g_api.set_memory_fraction(device, fraction) == kSuccess,
                  last_error("set_per_process_memory_fraction"));
    });
    wired += " memory_fraction";
  }
  if constexpr (has_set_record_stream_fn<A>::value) {
    a.set_record_stream_fn([](void* ptr, cudaStream_t stream) {
      TORCH_CHECK(g_api.record_stream(ptr, stream) == kSuccess, last_error("record_stream"));
    });
    wired += " record_stream";
  }
  return wired + wire_pools(a);
}

template <class T>
void take(const std::map<std::string, uint64_t>& fns, const char* name, T& out) {
  const auto it = fns.find(name);
  TORCH_CHECK(it != fns.end() && it->second != 0, "cachalot: missing entry point ", name);
  out = reinterpret_cast<T>(static_cast<uintptr_t>(it->second));
}

// Installs cachalot as PyTorch's CUDA allocator; returns the hooks it wired.
std::string install(const std::map<std::string, uint64_t>& fns) {
  TORCH_CHECK(!g_installed, "cachalot: the allocator is installed already");
  take(fns, "cachalot_default_malloc", g_api.malloc);
  take(fns, "cachalot_torch_free", g_api.free);
  take(fns, "cachalot_default_record_stream", g_api.record_stream);
  take(fns, "cachalot_default_empty_cache", g_api.empty_cache);
  take(fns, "cachalot_default_set_memory_fraction", g_api.set_memory_fraction);
  take(fns, "cachalot_torch_begin_allocate_to_pool", g_api.begin_pool);
  take(fns, "cachalot_torch_end_allocate_to_pool", g_api.end_pool);
  take(fns, "cachalot_torch_release_pool", g_api.release_pool);
  take(fns, "cachalot_last_error", g_api.last_error);

  auto alloc = [](size_t size, int device, cudaStream_t stream) -> void* {
    void* p = nullptr;
    const int st = g_api.malloc(device, &p, size, stream);
    if (st == kSuccess) return p;
    const std::string message = last_error("allocation failed");
    TORCH_CHECK_WITH(OutOfMemoryError, st != kOutOfMemory, message);
    TORCH_CHECK(false, message);
    return nullptr;  // not reached
  };
  // PyTorch's deleter: never throws (cachalot logs a failed free on stderr).
  auto release = [](void* ptr, size_t size, int device, cudaStream_t stream) {
    g_api.free(ptr, size, device, stream);
  };
  namespace plug = torch::cuda::CUDAPluggableAllocator;
  auto base = plug::createCustomAllocator(alloc, release);
  auto pluggable = std::static_pointer_cast<plug::CUDAPluggableAllocator>(base);
  const std::string wired = wire(*pluggable);
  plug::changeCurrentAllocator(base);
  g_installed = true;
  return wired;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cachalot as PyTorch's CUDA allocator (built by cachalot.torch.enable())";
  m.def("install", &install, "Makes cachalot PyTorch's CUDA allocator; returns the hooks wired");
}
