// Drives cachalot's PyTorch extension (_torch_ext.cpp, included whole) against the test doubles
// of PyTorch's headers in this folder, for one generation of the graph-pool setters
// (-DMOCK_GEN=1|2|3), with fake cachalot entry points: every hook is wired; an out-of-memory
// status throws c10::OutOfMemoryError and any other failure c10::Error, both with cachalot's
// message; the free hook never throws; graph pools: a begin routes exactly what PyTorch's own
// allocator of that generation routes (the filter handed to cachalot), the matching end ends
// the route of that pool (generations 1 and 2 name the route by capture id or stream, not by
// pool: two routes open at once end each in its own pool), a refused begin throws before
// anything else happens and leaves no route, an end with no route and a failed release only
// warn; a second install is refused. Prints "ok" and exits 0, or the first failed check and
// exits 1.
#include "../../cachalot/_torch_ext.cpp"  // NOLINT: the extension's TU, anonymous namespace too

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

namespace fake {
std::string error;
int empty_cache_device = 7;
int frees = 0;
// The graph-pool calls made, in order ("begin 42", "end 42", "release 42": the pool's first
// id), and each begun route's filter, as cachalot keeps it until the route ends.
std::vector<std::string> pool_calls;
struct route {
  uint64_t pool;
  int (*filter)(void*, void*);
  void* context;
};
std::vector<route> routes;

int malloc(int, void** out, size_t size, void*) {
  if (size == 666) return error = "out of memory: test numbers", 1;
  if (size == 777) return error = "backend trouble", 4;
  *out = reinterpret_cast<void*>(0x1000);
  return 0;
}
void free(void*, size_t, int, void*) {
  ++frees;
}
int record_stream(void* ptr, void*) {
  if (ptr == reinterpret_cast<void*>(0xbad)) return error = "not a live allocation", 3;
  return 0;
}
int empty_cache(int device) {
  return empty_cache_device = device, 0;
}
int set_memory_fraction(int device, double) {
  if (device == 9) return error = "exists already", 5;
  return 0;
}
int begin(int, uint64_t id0, uint64_t, int (*filter)(void*, void*), void* context) {
  if (id0 == 13) return error = "graph pools are refused here", 5;
  pool_calls.push_back("begin " + std::to_string(id0));
  routes.push_back({id0, filter, context});
  return 0;
}
int end(int, uint64_t id0, uint64_t) {
  // cachalot ends the most recent route into the pool.
  for (auto it = routes.rbegin(); it != routes.rend(); ++it) {
    if (it->pool == id0) {
      routes.erase(std::next(it).base());
      pool_calls.push_back("end " + std::to_string(id0));
      return 0;
    }
  }
  return error = "no route into pool " + std::to_string(id0), 5;
}
int release(int, uint64_t id0, uint64_t) {
  if (id0 == 99) return error = "no pool", 5;
  pool_calls.push_back("release " + std::to_string(id0));
  return 0;
}
// What the open route into `pool` answers for `stream`: 1, 0, or -1 without a filter (every
// stream), -2 without a route.
int routed(uint64_t pool, uintptr_t stream) {
  for (auto it = routes.rbegin(); it != routes.rend(); ++it) {
    if (it->pool != pool) continue;
    if (it->filter == nullptr) return -1;
    return it->filter(it->context, reinterpret_cast<void*>(stream));
  }
  return -2;
}
const char* last_error() {
  return error.c_str();
}
}  // namespace fake

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

template <class E, class F>
std::string thrown(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "<another exception>";
  }
  return "<nothing thrown>";
}

template <class T>
uint64_t addr(T fn) {
  return reinterpret_cast<uint64_t>(fn);
}

int main() {
  mock_module m;
  mock_init(m);
  const std::map<std::string, uint64_t> fns = {
      {"cachalot_default_malloc", addr(&fake::malloc)},
      {"cachalot_torch_free", addr(&fake::free)},
      {"cachalot_default_record_stream", addr(&fake::record_stream)},
      {"cachalot_default_empty_cache", addr(&fake::empty_cache)},
      {"cachalot_default_set_memory_fraction", addr(&fake::set_memory_fraction)},
      {"cachalot_torch_begin_allocate_to_pool", addr(&fake::begin)},
      {"cachalot_torch_end_allocate_to_pool", addr(&fake::end)},
      {"cachalot_torch_release_pool", addr(&fake::release)},
      {"cachalot_last_error", addr(&fake::last_error)},
  };
  auto missing = fns;
  missing.erase("cachalot_torch_release_pool");
  CHECK(thrown<c10::Error>([&] { m.fns.at("install")(missing); }).find("missing entry point") !=
        std::string::npos);

  const std::string wired = m.fns.at("install")(fns);
  std::printf("wired: %s\n", wired.c_str());
  for (const char* hook : {"malloc", "free", "init", "reset(empty_cache)", "memory_fraction",
                           "record_stream", "release_pool"}) {
    if (MOCK_GEN == 1 && std::string(hook) == "release_pool") hook = "capture_destroy";
    CHECK(wired.find(hook) != std::string::npos);
  }
  namespace plug = torch::cuda::CUDAPluggableAllocator;
  auto* a = static_cast<plug::CUDAPluggableAllocator*>(plug::current_allocator.get());
  CHECK(a != nullptr);

  // malloc: a pointer, torch.OutOfMemoryError, or a RuntimeError; never a NULL tensor.
  CHECK(a->alloc_fn_(100, 0, nullptr) == reinterpret_cast<void*>(0x1000));
  const std::string oom = thrown<c10::OutOfMemoryError>([&] { a->alloc_fn_(666, 0, nullptr); });
  CHECK(oom.find("out of memory: test numbers") != std::string::npos);
  const std::string other = thrown<c10::Error>([&] { a->alloc_fn_(777, 0, nullptr); });
  CHECK(other.find("backend trouble") != std::string::npos);
  CHECK(thrown<c10::OutOfMemoryError>([&] { a->alloc_fn_(777, 0, nullptr); }) ==
        "<another exception>");
  a->free_fn_(reinterpret_cast<void*>(0x1000), 100, 0, nullptr);
  CHECK(fake::frees == 1);

  a->init_fn_(8);
  a->reset_fn_();
  CHECK(fake::empty_cache_device == kAllDevices);
  a->fraction_fn_(0.5, 0);
  CHECK(thrown<c10::Error>([&] { a->fraction_fn_(0.5, 9); }).find("exists already") !=
        std::string::npos);
  a->record_fn_(reinterpret_cast<void*>(0x1000), nullptr);
  CHECK(thrown<c10::Error>([&] {
          a->record_fn_(reinterpret_cast<void*>(0xbad), nullptr);
        }).find("not a live allocation") != std::string::npos);

  // Graph pools. Streams A and B capture (capture ids 5 and 6), C does not.
  const auto stream = [](uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); };
  const uintptr_t A = 0x77, B = 0x88, C = 0x99;
  mock_capture_ids()[stream(A)] = 5;
  mock_capture_ids()[stream(B)] = 6;
  const c10::cuda::MempoolId_t p42{42, 0}, p43{43, 0}, refused{13, 0};
  std::string why;
  std::size_t warnings = mock_warnings().size();
#if MOCK_GEN == 1
  // notifyCaptureBegin(device, capture id, pool) .. notifyCaptureAboutToEnd(device, id).
  auto begin_a = [&] { a->begin1_(0, 5, p42); };
  auto begin_b = [&] { a->begin1_(0, 6, p43); };
  auto end_a = [&] { a->end1_(0, 5); };
  auto end_b = [&] { a->end1_(0, 6); };
  auto begin_refused = [&] { a->begin1_(0, 7, refused); };
  auto end_refused = [&] { a->end1_(0, 7); };
#elif MOCK_GEN == 2
  // beginAllocateStreamToPool(device, stream, pool) .. endAllocateStreamToPool(device, stream).
  auto begin_a = [&] { a->begin2_(0, stream(A), p42); };
  auto begin_b = [&] { a->begin2_(0, stream(B), p43); };
  auto end_a = [&] { a->end2_(0, stream(A)); };
  auto end_b = [&] { a->end2_(0, stream(B)); };
  auto begin_refused = [&] { a->begin2_(0, stream(C), refused); };
  auto end_refused = [&] { a->end2_(0, stream(C)); };
#else
  // beginAllocateToPool(device, pool, filter) .. endAllocateToPool(device, pool).
  const auto only = [&](uintptr_t s) {
    return std::function<bool(cudaStream_t)>(
        [s, &stream](cudaStream_t x) { return x == stream(s); });
  };
  auto begin_a = [&] { a->begin3_(0, p42, only(A)); };
  auto begin_b = [&] { a->begin3_(0, p43, only(B)); };
  auto end_a = [&] { a->end3_(0, p42); };
  auto end_b = [&] { a->end3_(0, p43); };
  auto begin_refused = [&] { a->begin3_(0, refused, only(C)); };
  auto end_refused = [&] { a->end3_(0, refused); };
#endif
  // Two routes open at once, each routing only its own capture's stream.
  begin_a();
  begin_b();
  CHECK(fake::routed(42, A) == 1 && fake::routed(42, B) == 0 && fake::routed(42, C) == 0);
  CHECK(fake::routed(43, B) == 1 && fake::routed(43, A) == 0 && fake::routed(43, C) == 0);
  // Each end ends its own pool's route (never pool {0, 0}), in any order.
  end_b();
  CHECK(fake::routed(43, B) == -2 && fake::routed(42, A) == 1);
  end_a();
  CHECK(fake::routes.empty());
  CHECK(mock_warnings().size() == warnings);
  a->release_(0, p42);
  a->release_(0, p43);
  const std::vector<std::string> expected = {"begin 42", "begin 43",   "end 43",
                                             "end 42",   "release 42", "release 43"};
  CHECK(fake::pool_calls == expected);
  // A second capture into the same pool is a new route, ended like the first.
  begin_a();
  CHECK(fake::routed(42, A) == 1);
  end_a();
  CHECK(fake::routes.empty() && fake::pool_calls.size() == expected.size() + 2);
  // A refused begin throws with cachalot's message and leaves no route: its end only warns.
  why = thrown<c10::Error>(begin_refused);
  CHECK(why.find("graph pools are refused here") != std::string::npos);
  end_refused();
  CHECK(fake::pool_calls.size() == expected.size() + 2);
  CHECK(mock_warnings().size() == warnings + 1);
#if MOCK_GEN == 3
  CHECK(mock_warnings().back().find("end of graph pool") != std::string::npos);
#else
  CHECK(mock_warnings().back().find("no graph pool was begun for") != std::string::npos);
#endif
  // A failed release only warns.
  a->release_(0, c10::cuda::MempoolId_t{99, 0});
  CHECK(mock_warnings().size() == warnings + 2);
  CHECK(mock_warnings().back().find("release of graph pool") != std::string::npos);

  CHECK(thrown<c10::Error>([&] { m.fns.at("install")(fns); }).find("installed already") !=
        std::string::npos);
  std::printf("ok\n");
  return 0;
}
