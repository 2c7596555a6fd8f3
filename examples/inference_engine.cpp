// An inference-engine-like workload on the C++ API: a stack of transformer-ish layers runs
// batches of varying sequence length. Each layer allocates its output activation and an
// attention scratch buffer on the compute stream, while the next layer's weights-sized
// prefetch buffer is allocated on a copy stream and then used on the compute stream
// (record_stream), so its reuse waits for the compute work. At the end it prints the memory
// summary. On a GPU the streams are real (cudaStreamCreate) and buffers are touched with
// cudaMemsetAsync; without one it runs on the simulated device with fake stream handles.
// Usage: inference_engine [--steps N] [--help]; a bad argument exits with status 2 and says why.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "cachalot/cachalot.hpp"

#ifdef CACHALOT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

struct engine_streams {
  cachalot::stream_t compute = nullptr;
  cachalot::stream_t copy = nullptr;
  bool real = false;
};

engine_streams make_streams(bool gpu) {
  engine_streams s;
#ifdef CACHALOT_WITH_CUDA
  if (gpu) {
    cudaStream_t a = nullptr;
    cudaStream_t b = nullptr;
    if (cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess &&
        cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess) {
      s.compute = a;
      s.copy = b;
      s.real = true;
      return s;
    }
  }
#endif
  (void)gpu;
  static int compute_tag = 0;  // any distinct pointers name streams on the simulated device
  static int copy_tag = 0;
  s.compute = &compute_tag;
  s.copy = &copy_tag;
  return s;
}

// Stands for a kernel writing `bytes` at `p` on `stream` (a memset on a GPU).
void touch(void* p, std::size_t bytes, const engine_streams& s, cachalot::stream_t stream) {
#ifdef CACHALOT_WITH_CUDA
  if (s.real) (void)cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream));
#endif
  (void)p, (void)bytes, (void)s, (void)stream;
}

constexpr const char* kUsage =
    "usage: inference_engine [--steps N] [--help]\n"
    "Runs a transformer-like inference loop on two streams with cachalot (on the GPU where one\n"
    "exists, else on a 16 GiB simulated device) and prints the memory summary.\n"
    "  --steps N   batches to run, 1 to 1000000 (default 50); also --steps=N\n"
    "  --help      print this and exit\n";
constexpr int kMaxSteps = 1000000;

/// The steps asked for, or nullopt after printing why the arguments are wrong.
std::optional<int> parse_steps(int argc, char** argv, bool& help) {
  int steps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
      return steps;
    }
    std::string_view value;
    if (a == "--steps") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "inference_engine: --steps needs a value\n%s", kUsage);
        return std::nullopt;
      }
      value = argv[++i];
    } else if (a.substr(0, 8) == "--steps=") {
      value = a.substr(8);
    } else {
      std::fprintf(stderr, "inference_engine: unknown argument '%s'\n%s", argv[i], kUsage);
      return std::nullopt;
    }
    int n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc{} || end != value.data() + value.size() || n < 1 || n > kMaxSteps) {
      std::fprintf(stderr,
                   "inference_engine: --steps: '%.*s' is not a whole number from 1 to %d\n%s",
                   static_cast<int>(value.size()), value.data(), kMaxSteps, kUsage);
      return std::nullopt;
    }
    steps = n;
  }
  return steps;
}

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  const std::optional<int> parsed = parse_steps(argc, argv, help);
  if (!parsed) return 2;
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const int steps = *parsed;

  const bool gpu = cachalot::cuda_device_count() > 0;
  cachalot::config cfg;
  if (gpu) {
    cfg.backend = cachalot::backend_kind::cuda;
    cfg.memory_limit = 8 * cachalot::GiB;  // stay well below the card's capacity
  } else {
    cfg.backend = cachalot::backend_kind::simulated;
    cfg.capacity = 16 * cachalot::GiB;
  }
  try {
    cachalot::allocator alloc(cfg);
    const engine_streams s = make_streams(gpu);
    std::printf("inference_engine: %s backend, %d steps\n", alloc.backend().name().c_str(), steps);

    constexpr int kLayers = 12;
    constexpr std::size_t kHidden = 2048;
    constexpr std::size_t kBatch = 8;
    const std::size_t prefetch_bytes = kHidden * kHidden * 2;  // one fp16 weight matrix
    std::mt19937 rng(1234);
    std::uniform_int_distribution<std::size_t> seq_len(16, 1024);

    for (int step = 0; step < steps; ++step) {
      const std::size_t seq = seq_len(rng);
      const std::size_t act_bytes = kBatch * seq * kHidden * 2;
      void* input = alloc.allocate(act_bytes, s.compute);
      touch(input, act_bytes, s, s.compute);
      void* prefetch = alloc.allocate(prefetch_bytes, s.copy);
      touch(prefetch, prefetch_bytes, s, s.copy);
      for (int layer = 0; layer < kLayers; ++layer) {
        // The weights prefetched on the copy stream are read on the compute stream.
        alloc.record_stream(prefetch, s.compute);
        void* next_prefetch = alloc.allocate(prefetch_bytes, s.copy);
        touch(next_prefetch, prefetch_bytes, s, s.copy);

        const std::size_t scratch_bytes = kBatch * seq * seq * 2;  // attention scores
        void* scratch = alloc.allocate(scratch_bytes, s.compute);
        touch(scratch, scratch_bytes, s, s.compute);
        void* output = alloc.allocate(act_bytes, s.compute);
        touch(output, act_bytes, s, s.compute);

        alloc.deallocate(scratch, s.compute);
        alloc.deallocate(input, s.compute);
        alloc.deallocate(prefetch, s.copy);  // reused only once the compute work read it
        input = output;
        prefetch = next_prefetch;
      }
      alloc.deallocate(input, s.compute);
      alloc.deallocate(prefetch, s.copy);
      alloc.process_events();
    }
#ifdef CACHALOT_WITH_CUDA
    if (s.real) {
      (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.compute));
      (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s.copy));
    }
#endif
    std::printf("%s\n", alloc.memory_summary().c_str());
    const cachalot::memory_stats st = alloc.stats();
    std::printf("allocations %llu, device segment allocations %llu, deferred frees %llu\n",
                static_cast<unsigned long long>(st.num_allocs),
                static_cast<unsigned long long>(st.num_segment_allocs),
                static_cast<unsigned long long>(st.num_deferred_frees));
    alloc.empty_cache();
#ifdef CACHALOT_WITH_CUDA
    if (s.real) {
      (void)cudaStreamDestroy(static_cast<cudaStream_t>(s.compute));
      (void)cudaStreamDestroy(static_cast<cudaStream_t>(s.copy));
    }
#endif
    return st.allocations.all.current == 0 ? 0 : 1;
  } catch (const cachalot::error& e) {
    std::fprintf(stderr, "inference_engine: %s (%s:%d)\n", e.what(), e.file(), e.line());
    return 1;
  }
}
