// cachalot_device_costs: measures, through the CUDA driver API alone, the latency of every device
// call the simulated device's cost model prices, and prints them as a Markdown table and as ONE
// cost-model config line (the `cost_*` keys of the config string; see docs/gpu-results.md), so
// that the first GPU run calibrates the simulated device. scripts/gpu-check.sh runs it on the GPU
// machine; CI runs it on the fake driver (the figures are meaningless there, the format is
// checked by scripts/check_cost_line.py), so that it cannot rot.
//
// What it measures, on device 0's primary context, host wall clock (steady_clock), each figure
// the median of its repetitions (the table also gives the fastest and slowest):
//   cuMemAlloc / cuMemFree of 1 MiB to 1 GiB on an idle device, and again with other work
//   queued (memsets of a 1 GiB buffer, about 10 ms of work on a current GPU) to see whether an
//   allocation waits and whether a free synchronizes (the table says if the queued work was done
//   when cuMemFree returned); cuMemAddressReserve / cuMemAddressFree of 2 MiB to 64 GiB;
//   cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease of 2 MiB and 20 MiB chunks;
//   cuEventCreate, cuEventRecord (idle stream), cuEventQuery and cuEventSynchronize (completed
//   event), cuStreamSynchronize and cuCtxSynchronize with nothing queued, cuStreamGetCtx (which the
//   backend calls on each event record); pinned host <-> device copies of 1 MiB to 256 MiB.
// Sized calls become `<fixed>+<per GiB>/GiB` by a least-squares line through the medians
// (both parts clamped at 0). cost_segment_free is cuMemFree on an idle device less
// cost_device_sync, because the cost model charges a device synchronization on top of every
// segment free; cost_copy is the mean of the two directions.
// Usage: cachalot_device_costs [--quick]   (--quick: fewer repetitions). The driver is
// $CACHALOT_CUDA_DRIVER when set, else libcuda.so.1. Exit 0, 1 on a driver error, 77 without a
// driver or a device.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr double kGiB = double(std::size_t{1} << 30);

struct driver_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The entry points, by the ABI versions of cudaTypedefs.h.
struct api {
  PFN_cuDeviceGetCount_v2000 DeviceGetCount;
  PFN_cuDeviceGet_v2000 DeviceGet;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemAddressReserve_v10020 MemAddressReserve;
  PFN_cuMemAddressFree_v10020 MemAddressFree;
  PFN_cuMemCreate_v10020 MemCreate;
  PFN_cuMemMap_v10020 MemMap;
  PFN_cuMemSetAccess_v10020 MemSetAccess;
  PFN_cuMemUnmap_v10020 MemUnmap;
  PFN_cuMemRelease_v10020 MemRelease;
  PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuEventRecord_v2000 EventRecord;
  PFN_cuEventQuery_v2000 EventQuery;
  PFN_cuEventSynchronize_v2000 EventSynchronize;
  PFN_cuEventDestroy_v4000 EventDestroy;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuStreamGetCtx_v9020 StreamGetCtx;
  PFN_cuMemHostAlloc_v2020 MemHostAlloc;
  PFN_cuMemFreeHost_v2000 MemFreeHost;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
  PFN_cuMemsetD32Async_v3020 MemsetD32Async;
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
};

api g;

void ck(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (g.GetErrorName == nullptr || g.GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  throw driver_failure(std::string(call) + " failed: " + (name != nullptr ? name : "error ") +
                       (name != nullptr ? "" : std::to_string(static_cast<int>(r))));
}
#define CK(call) ck((call), #call)

// Loads the driver and resolves every entry point; false with `why` when there is none.
bool load(std::string& why) {
  const char* env = std::getenv("CACHALOT_CUDA_DRIVER");
  const std::string path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    why = "cannot load the CUDA driver " + path + ": " + dlerror();
    return false;
  }
  auto init = reinterpret_cast<PFN_cuInit_v2000>(dlsym(lib, "cuInit"));
  auto version = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(dlsym(lib, "cuDriverGetVersion"));
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  g.GetErrorName = reinterpret_cast<PFN_cuGetErrorName_v6000>(dlsym(lib, "cuGetErrorName"));
  int v = 0;
  if (init == nullptr || version == nullptr || version(&v) != CUDA_SUCCESS) {
    why = path + " is not a CUDA driver";
    return false;
  }
  if (get_proc == nullptr) {
    why = path + " (CUDA " + std::to_string(v) + ") has no cuGetProcAddress_v2 (CUDA 12.0+)";
    return false;
  }
  if (const CUresult r = init(0); r != CUDA_SUCCESS) {
    why = "cuInit(0) failed: error " + std::to_string(static_cast<int>(r));
    return false;
  }
  bool ok = true;
  auto find = [&](auto& fn, const char* name, int abi) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc(name, &p, abi, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) != CUDA_SUCCESS ||
        p == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {
      if (ok) why = std::string("the driver lacks ") + name;
      ok = false;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
#define FIND(name, abi) find(g.name, "cu" #name, abi)
  FIND(DeviceGetCount, 2000);
  FIND(DeviceGet, 2000);
  FIND(DevicePrimaryCtxRetain, 7000);
  FIND(DevicePrimaryCtxRelease, 11000);
  FIND(CtxSetCurrent, 4000);
  FIND(CtxSynchronize, 2000);
  FIND(MemAlloc, 3020);
  FIND(MemFree, 3020);
  FIND(MemAddressReserve, 10020);
  FIND(MemAddressFree, 10020);
  FIND(MemCreate, 10020);
  FIND(MemMap, 10020);
  FIND(MemSetAccess, 10020);
  FIND(MemUnmap, 10020);
  FIND(MemRelease, 10020);
  FIND(MemGetAllocationGranularity, 10020);
  FIND(EventCreate, 2000);
  FIND(EventRecord, 2000);
  FIND(EventQuery, 2000);
  FIND(EventSynchronize, 2000);
  FIND(EventDestroy, 4000);
  FIND(StreamCreate, 2000);
  FIND(StreamDestroy, 4000);
  FIND(StreamSynchronize, 2000);
  FIND(StreamGetCtx, 9020);
  FIND(MemHostAlloc, 2020);
  FIND(MemFreeHost, 2000);
  FIND(MemcpyHtoDAsync, 3020);
  FIND(MemcpyDtoHAsync, 3020);
  FIND(MemsetD32Async, 3020);
#undef FIND
  std::printf("device_costs: driver %s, CUDA %d.%d\n", path.c_str(), v / 1000, (v % 1000) / 10);
  return ok;
}

using clock_type = std::chrono::steady_clock;

double ns_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
}

// Nanosecond samples of one call kind at one size.
struct samples {
  std::vector<double> ns;
  double median() const {
    std::vector<double> v = ns;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
  double min() const { return ns.empty() ? 0 : *std::min_element(ns.begin(), ns.end()); }
  double max() const { return ns.empty() ? 0 : *std::max_element(ns.begin(), ns.end()); }
};

void row(const char* call, const std::string& size, const samples& s, const char* note = "") {
  std::printf("| %s | %s | %.2f | %.2f-%.2f | %zu | %s |\n", call, size.c_str(), s.median() / 1000,
              s.min() / 1000, s.max() / 1000, s.ns.size(), note);
}

std::string mib(std::size_t bytes) {
  return std::to_string(bytes / MiB) + " MiB";
}

// A fixed part and a part per GiB, in nanoseconds.
struct line_fit {
  double fixed = 0;
  double per_gib = 0;
};

// Least squares through (bytes, median ns), both parts clamped at 0.
line_fit fit(const std::vector<std::pair<std::size_t, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(points.size());
  for (const auto& [bytes, ns] : points) {
    const double x = static_cast<double>(bytes) / kGiB;
    sx += x;
    sy += ns;
    sxx += x * x;
    sxy += x * ns;
  }
  line_fit f;
  const double den = n * sxx - sx * sx;
  f.per_gib = den > 0 ? (n * sxy - sx * sy) / den : 0;
  if (f.per_gib < 0) f.per_gib = 0;
  f.fixed = (sy - f.per_gib * sx) / n;
  if (f.fixed < 0) f.fixed = 0;
  return f;
}

// A duration in the config syntax: a number and a unit (ns, us, ms, s).
std::string duration(double ns) {
  const char* unit = "ns";
  double v = ns;
  if (ns >= 1e9) {
    v = ns / 1e9;
    unit = "s";
  } else if (ns >= 1e6) {
    v = ns / 1e6;
    unit = "ms";
  } else if (ns >= 1e3) {
    v = ns / 1e3;
    unit = "us";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f" : v < 100 ? "%.1f" : "%.0f", v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s + unit;
}

std::string sized(const line_fit& f) {
  return duration(f.fixed) + "+" + duration(f.per_gib) + "/GiB";
}

struct measurer {
  int reps;
  int batch;  // calls per timed batch for the sub-microsecond calls
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;  // non-blocking: the "other work" goes here

  // Queues about 10 ms of memsets on `stream` over `busy` and returns an event after them.
  CUevent queue_work(CUdeviceptr busy, std::size_t bytes, CUevent after) const {
    for (int i = 0; i < 32; ++i) CK(g.MemsetD32Async(busy, unsigned(i), bytes / 4, stream));
    CK(g.EventRecord(after, stream));
    return after;
  }

  // cuMemAlloc / cuMemFree by size, idle and with work queued. Returns the two idle fits and
  // sets `busy_free_waits` when every free with work queued returned after that work.
  std::pair<line_fit, line_fit> segments() {
    std::vector<std::pair<std::size_t, double>> alloc_pts, free_pts;
    const std::vector<std::size_t> sizes = {MiB,      4 * MiB,   16 * MiB,
                                            64 * MiB, 256 * MiB, 1024 * MiB};
    const std::size_t busy_bytes = 1024 * MiB;
    CUdeviceptr busy = 0;
    CK(g.MemAlloc(&busy, busy_bytes));
    CUevent after = nullptr;
    CK(g.EventCreate(&after, CU_EVENT_DISABLE_TIMING));
    for (const std::size_t bytes : sizes) {
      samples a, f, ab, fb;
      int waited = 0;
      for (int r = 0; r < reps; ++r) {
        CUdeviceptr p = 0;
        auto t0 = clock_type::now();
        CK(g.MemAlloc(&p, bytes));
        a.ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemFree(p));
        f.ns.push_back(ns_since(t0));
        queue_work(busy, busy_bytes, after);
        t0 = clock_type::now();
        CK(g.MemAlloc(&p, bytes));
        ab.ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemFree(p));
        fb.ns.push_back(ns_since(t0));
        if (g.EventQuery(after) == CUDA_SUCCESS) ++waited;
        CK(g.CtxSynchronize());
      }
      row("cuMemAlloc", mib(bytes), a);
      row("cuMemFree", mib(bytes), f);
      row("cuMemAlloc, work queued", mib(bytes), ab);
      const std::string note = "queued work done when it returned: " + std::to_string(waited) +
                               " of " + std::to_string(reps);
      row("cuMemFree, work queued", mib(bytes), fb, note.c_str());
      alloc_pts.emplace_back(bytes, a.median());
      free_pts.emplace_back(bytes, f.median());
    }
    CK(g.EventDestroy(after));
    CK(g.MemFree(busy));
    return {fit(alloc_pts), fit(free_pts)};
  }

  std::pair<line_fit, line_fit> ranges(std::size_t granularity) {
    std::vector<std::pair<std::size_t, double>> res_pts, rel_pts;
    for (const std::size_t bytes : {2 * MiB, 1024 * MiB, 64 * 1024 * MiB}) {
      const std::size_t b = (bytes + granularity - 1) / granularity * granularity;
      samples res, rel;
      for (int r = 0; r < reps; ++r) {
        CUdeviceptr p = 0;
        auto t0 = clock_type::now();
        CK(g.MemAddressReserve(&p, b, granularity, 0, 0));
        res.ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemAddressFree(p, b));
        rel.ns.push_back(ns_since(t0));
      }
      row("cuMemAddressReserve", mib(b), res);
      row("cuMemAddressFree", mib(b), rel);
      res_pts.emplace_back(b, res.median());
      rel_pts.emplace_back(b, rel.median());
    }
    return {fit(res_pts), fit(rel_pts)};
  }

  // cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease at 2 MiB and 20 MiB.
  std::vector<line_fit> chunks(std::size_t granularity) {
    const char* names[] = {"cuMemCreate", "cuMemMap", "cuMemSetAccess", "cuMemUnmap",
                           "cuMemRelease"};
    std::vector<std::vector<std::pair<std::size_t, double>>> pts(5);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (const std::size_t chunk : {2 * MiB, 20 * MiB}) {
      const std::size_t b = (chunk + granularity - 1) / granularity * granularity;
      CUdeviceptr range = 0;
      CK(g.MemAddressReserve(&range, b, granularity, 0, 0));
      std::vector<samples> s(5);
      for (int r = 0; r < reps; ++r) {
        CUmemGenericAllocationHandle h = 0;
        auto t0 = clock_type::now();
        CK(g.MemCreate(&h, b, &prop, 0));
        s[0].ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemMap(range, b, 0, h, 0));
        s[1].ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemSetAccess(range, b, &access, 1));
        s[2].ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemUnmap(range, b));
        s[3].ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemRelease(h));
        s[4].ns.push_back(ns_since(t0));
      }
      CK(g.MemAddressFree(range, b));
      for (int i = 0; i < 5; ++i) {
        row(names[i], mib(b), s[i]);
        pts[i].emplace_back(b, s[i].median());
      }
    }
    std::vector<line_fit> out;
    for (const auto& p : pts) out.push_back(fit(p));
    return out;
  }

  // Times `batch` calls of `body` per sample; the median per call.
  template <class F>
  double per_call(const char* call, F&& body) {
    samples s;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = clock_type::now();
      for (int i = 0; i < batch; ++i) body();
      s.ns.push_back(ns_since(t0) / batch);
    }
    row(call, "-", s, ("per call, batches of " + std::to_string(batch)).c_str());
    return s.median();
  }

  // cost_copy: pinned host <-> device, both directions fitted, their mean.
  line_fit copies() {
    const std::size_t max = 256 * MiB;
    void* host = nullptr;
    CK(g.MemHostAlloc(&host, max, 0));
    CUdeviceptr d = 0;
    CK(g.MemAlloc(&d, max));
    std::vector<std::pair<std::size_t, double>> h2d, d2h;
    for (const std::size_t bytes : {MiB, 16 * MiB, 256 * MiB}) {
      samples up, down;
      for (int r = 0; r < reps; ++r) {
        auto t0 = clock_type::now();
        CK(g.MemcpyHtoDAsync(d, host, bytes, stream));
        CK(g.StreamSynchronize(stream));
        up.ns.push_back(ns_since(t0));
        t0 = clock_type::now();
        CK(g.MemcpyDtoHAsync(host, d, bytes, stream));
        CK(g.StreamSynchronize(stream));
        down.ns.push_back(ns_since(t0));
      }
      row("pinned copy host to device (+ stream sync)", mib(bytes), up);
      row("pinned copy device to host (+ stream sync)", mib(bytes), down);
      h2d.emplace_back(bytes, up.median());
      d2h.emplace_back(bytes, down.median());
    }
    CK(g.MemFree(d));
    CK(g.MemFreeHost(host));
    const line_fit a = fit(h2d), b = fit(d2h);
    for (const line_fit* f : {&a, &b}) {
      std::printf("device_costs: copy %s: %s (%.1f GB/s)\n",
                  f == &a ? "host to device" : "device to host", sized(*f).c_str(),
                  f->per_gib > 0 ? kGiB / f->per_gib : 0.0);
    }
    return line_fit{(a.fixed + b.fixed) / 2, (a.per_gib + b.per_gib) / 2};
  }
};

int run(bool quick) {
  std::string why;
  if (!load(why)) {
    std::printf("device_costs: skipped: %s\n", why.c_str());
    return 77;
  }
  int count = 0;
  CK(g.DeviceGetCount(&count));
  if (count == 0) {
    std::printf("device_costs: skipped: the CUDA driver sees no device\n");
    return 77;
  }
  measurer m{quick ? 3 : 9, quick ? 10 : 200};
  CK(g.DeviceGet(&m.dev, 0));
  CK(g.DevicePrimaryCtxRetain(&m.ctx, m.dev));
  CK(g.CtxSetCurrent(m.ctx));
  CK(g.StreamCreate(&m.stream, CU_STREAM_NON_BLOCKING));
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = m.dev;
  std::size_t granularity = 0;
  CK(g.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::printf(
      "device_costs: device 0, %d device(s), virtual memory granularity %zu bytes, %d "
      "repetitions per figure\n",
      count, granularity, m.reps);
  std::printf("| call | size | median µs | fastest-slowest µs | repetitions | notes |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const auto [seg_alloc, seg_free_raw] = m.segments();
  const auto [reserve, release] = m.ranges(granularity);
  const std::vector<line_fit> chunk = m.chunks(granularity);

  CUevent e = nullptr;
  std::vector<CUevent> made;
  const double ev_create = m.per_call("cuEventCreate", [&] {
    CK(g.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    made.push_back(e);
  });
  for (CUevent x : made) CK(g.EventDestroy(x));
  CK(g.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
  const double ev_record =
      m.per_call("cuEventRecord (idle stream)", [&] { CK(g.EventRecord(e, m.stream)); });
  CK(g.StreamSynchronize(m.stream));
  const double ev_query = m.per_call("cuEventQuery (completed)", [&] { CK(g.EventQuery(e)); });
  const double ev_sync =
      m.per_call("cuEventSynchronize (completed)", [&] { CK(g.EventSynchronize(e)); });
  CK(g.EventDestroy(e));
  const double stream_sync = m.per_call("cuStreamSynchronize (nothing queued)",
                                        [&] { CK(g.StreamSynchronize(m.stream)); });
  const double device_sync =
      m.per_call("cuCtxSynchronize (nothing queued)", [&] { CK(g.CtxSynchronize()); });
  CUcontext c = nullptr;
  (void)m.per_call("cuStreamGetCtx (the backend asks it on each event record)",
                   [&] { CK(g.StreamGetCtx(m.stream, &c)); });
  const line_fit copy = m.copies();

  CK(g.StreamDestroy(m.stream));
  CK(g.CtxSetCurrent(nullptr));
  CK(g.DevicePrimaryCtxRelease(m.dev));

  // The model charges cost_device_sync on top of every segment free.
  line_fit seg_free = seg_free_raw;
  seg_free.fixed = std::max(0.0, seg_free.fixed - device_sync);
  std::printf("device_costs: cuMemFree on an idle device: %s; less cost_device_sync: %s\n",
              sized(seg_free_raw).c_str(), sized(seg_free).c_str());
  const std::vector<std::pair<const char*, std::string>> keys = {
      {"cost_segment_alloc", sized(seg_alloc)},    {"cost_segment_free", sized(seg_free)},
      {"cost_range_reserve", sized(reserve)},      {"cost_range_release", sized(release)},
      {"cost_chunk_create", sized(chunk[0])},      {"cost_chunk_map", sized(chunk[1])},
      {"cost_chunk_access", sized(chunk[2])},      {"cost_chunk_unmap", sized(chunk[3])},
      {"cost_chunk_release", sized(chunk[4])},     {"cost_event_create", duration(ev_create)},
      {"cost_event_record", duration(ev_record)},  {"cost_event_query", duration(ev_query)},
      {"cost_event_sync", duration(ev_sync)},      {"cost_stream_sync", duration(stream_sync)},
      {"cost_device_sync", duration(device_sync)}, {"cost_copy", sized(copy)},
  };
  std::string line;
  for (const auto& [key, value] : keys)
    line += (line.empty() ? "" : ",") + std::string(key) + ":" + value;
  std::printf("cost-model config: %s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  try {
    return run(quick);
  } catch (const std::exception& e) {
    std::printf("device_costs: %s\n", e.what());
    return 1;
  }
}
