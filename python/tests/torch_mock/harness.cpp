// Drives cachalot's PyTorch extension (_torch_ext.cpp, included whole) against the test doubles
// of PyTorch's headers in this folder, for one generation of the graph-pool setters
// (-DMOCK_GEN=1|2|3), with fake cachalot entry points: every hook is wired; an out-of-memory
// status throws c10::OutOfMemoryError and any other failure c10::Error, both with cachalot's
// message; the free hook never throws; beginning a graph pool throws before anything else
// happens (the filter handed to cachalot works); ending or releasing one only warns; a second
// install is refused. Prints "ok" and exits 0, or the first failed check and exits 1.
#include "../../cachalot/_torch_ext.cpp"  // NOLINT: the extension's TU, anonymous namespace too

#include <cstdio>
#include <cstdlib>

namespace fake {
std::string error;
int empty_cache_device = 7;
int frees = 0;
bool begin_had_filter = false;
int filter_on_capture = -1;  // the filter's answers, asked during the call (it lives that long)
int filter_on_other = -1;
uint64_t begin_pool_id = 0;

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
  begin_pool_id = id0;
  begin_had_filter = filter != nullptr;
  if (filter != nullptr) {
    filter_on_capture = filter(context, reinterpret_cast<void*>(0x77));
    filter_on_other = filter(context, nullptr);
  }
  return error = "graph pools are not implemented", 5;
}
int end(int, uint64_t, uint64_t) {
  return error = "no pool", 5;
}
int release(int, uint64_t, uint64_t) {
  return error = "no pool", 5;
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

  // Graph pools: beginning throws with cachalot's message; end and release only warn.
  const c10::cuda::MempoolId_t pool{42, 0};
  auto* capture = reinterpret_cast<cudaStream_t>(0x77);
  std::string refused;
#if MOCK_GEN == 1
  refused = thrown<c10::Error>([&] { a->begin1_(0, 5, pool); });
  CHECK(!fake::begin_had_filter);  // no stream known: every stream
  a->end1_(0, 5);
#elif MOCK_GEN == 2
  refused = thrown<c10::Error>([&] { a->begin2_(0, capture, pool); });
  CHECK(fake::filter_on_capture == 1 && fake::filter_on_other == 0);
  a->end2_(0, capture);
#else
  refused = thrown<c10::Error>(
      [&] { a->begin3_(0, pool, [capture](cudaStream_t s) { return s == capture; }); });
  CHECK(fake::filter_on_capture == 1 && fake::filter_on_other == 0);
  a->end3_(0, pool);
#endif
  (void)capture;
  CHECK(refused.find("graph pools are not implemented") != std::string::npos);
  CHECK(fake::begin_pool_id == 42);
  a->release_(0, pool);
  CHECK(mock_warnings().size() == 2);
  CHECK(mock_warnings()[1].find("release of graph pool") != std::string::npos);

  CHECK(thrown<c10::Error>([&] { m.fns.at("install")(fns); }).find("installed already") !=
        std::string::npos);
  std::printf("ok\n");
  return 0;
}
