// A fake CUDA driver (libcachalot_fakecuda.so) for the tests of the driver-API backend on
// machines without a GPU. It exports what cachalot's loader takes with dlsym (cuDriverGetVersion,
// cuInit, cuGetErrorName, cuGetErrorString, cuGetProcAddress and cuGetProcAddress_v2) and hands
// out every other entry point through cuGetProcAddress, plus fakecu_* control functions for the
// tests (fake_cuda_control.hpp). Built three ways: the default (CUDA 12.4), FAKECU_V1_ONLY (CUDA
// 11.4, only the 11.3 cuGetProcAddress) and FAKECU_NO_PROC_ADDRESS (CUDA 11.2, none).
//
// Its ABI comes from the toolkit's cuda.h and cudaTypedefs.h wherever one is installed
// (fake_cuda_abi.hpp), not from cachalot's declarations: each entry point it hands out has the
// type of cudaTypedefs.h's PFN_cu<name>_v<abi> (checked when compiled), its constants and
// structures are cuda.h's, and cuGetProcAddress picks what the real driver picks: the newest ABI
// cudaTypedefs.h declares for the name at most the version asked (legacy-stream variants unless
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM). A name cuda.h does not know (cuMemAlloc_v2, a
// typo) is not found; a request that would select another ABI than the one implemented here
// (cuCtxSynchronize at CUDA 13.0, say) fails with CUDA_ERROR_NOT_SUPPORTED and is recorded
// (fakecu_abi_mismatch), so that a wrong version in cachalot's tables fails its tests.
//
// What it models, after the CUDA driver API documentation (it is a model, not the driver):
//  - devices (2 by default) with a capacity each; one primary context per device, retained and
//    released with a reference count; a context stack per thread (cuCtxSetCurrent replaces its
//    top, NULL pops it); calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT without
//    one, which catches a backend that forgets to make its context current;
//  - streams: those made by cuStreamCreate (or fakecu_create_stream) belong to a context, and
//    cuEventRecord refuses an event and a stream of different contexts with
//    CUDA_ERROR_INVALID_HANDLE (cuda.h: "hEvent and hStream must be from the same context");
//    cuStreamGetCtx answers for them, and for the special handles (NULL, CU_STREAM_LEGACY,
//    CU_STREAM_PER_THREAD) gives the current context. Any other handle (the made-up ones of older
//    tests) counts as a stream of the current context;
//  - cuMemAlloc/cuMemFree with capacity accounting (CUDA_ERROR_OUT_OF_MEMORY), events recorded on
//    streams that a test may "hold" (queries then say CUDA_ERROR_NOT_READY until released);
//    pinned host memory, and copies and memsets on streams that check their ranges and do
//    nothing else (enough for tools/device_costs.cpp to run here);
//  - the virtual memory API: reservations, physical handles counted against the capacity,
//    mappings that must be unmapped whole, access per device; a minimum granularity of 2 MiB and
//    a recommended one of 4 MiB (different on purpose, so a test sees which one a caller uses);
//  - stream capture begun by a test: cuStreamIsCapturing (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for
//    the legacy stream while the context captures), the per-thread capture interaction mode, and
//    the rules of cuThreadExchangeStreamCaptureMode: "potentially unsafe" calls (here cuMemAlloc,
//    cuMemCreate, cuMemMap, cuMemSetAccess, cuMemAddressReserve, cuEventQuery,
//    cuEventSynchronize) fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the
//    captures they conflict with unless the thread's mode allows them; calls that synchronize the
//    context (cuCtxSynchronize, cuMemFree, cuMemUnmap) do so while any capture of the context is
//    active, in every mode; a query of an event recorded in a capture gives
//    CUDA_ERROR_CAPTURED_EVENT;
//  - injected failures (the Nth next call of an entry point, or every call) and a driver that is
//    shutting down (every call: CUDA_ERROR_DEINITIALIZED).
// One mutex guards all state; the context stack and the capture mode are per thread.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fake_cuda_abi.hpp"

struct CUctx_st {
  int device;
};
struct CUstream_st {
  CUctx_st* ctx;
  unsigned flags;
};
struct CUevent_st {
  CUctx_st* ctx;
  unsigned flags;
  bool pending;
  bool captured;
  void* stream;
  std::uint64_t hold_generation;
};

#define FAKECU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 4;
constexpr std::size_t kMinGranularity = 2u << 20;
constexpr std::size_t kRecommendedGranularity = 4u << 20;
constexpr std::uintptr_t kAllocBase = 0x7e0000000000;  // cuMemAlloc: 1 TiB per device
constexpr std::uintptr_t kDeviceSpan = 0x10000000000;
constexpr std::uintptr_t kReserveBase = 0x600000000000;  // cuMemAddressReserve

#if defined(FAKECU_NO_PROC_ADDRESS)
constexpr int kDefaultVersion = 11020;
#elif defined(FAKECU_V1_ONLY)
constexpr int kDefaultVersion = 11040;
#else
constexpr int kDefaultVersion = 12040;
#endif

struct config {
  int version = kDefaultVersion;
  int devices = 2;
  std::size_t capacity = std::size_t{1} << 30;
  CUresult init_result = CUDA_SUCCESS;
  unsigned vmm_off_mask = 0;  // devices without virtual memory management
  bool peers = true;          // cuDeviceCanAccessPeer
  std::set<std::string> hidden;
};

struct fault {
  long countdown = 0;  // fails when it reaches 1
  bool always = false;
  CUresult result = CUDA_ERROR_UNKNOWN;
};

struct capture {
  int mode;
  std::thread::id owner;
  CUctx_st* ctx;
  bool invalidated = false;
};

struct physical {
  int device;
  std::size_t bytes;
  bool released = false;
  int mapped = 0;
};

struct mapping {
  std::size_t bytes;
  CUmemGenericAllocationHandle handle;
  unsigned access = 0;
};

struct state {
  config cfg;
  bool initialized = false;
  bool deinitialized = false;
  CUctx_st ctxs[kMaxDevices] = {{0}, {1}, {2}, {3}};
  int refcount[kMaxDevices] = {};
  std::size_t used[kMaxDevices] = {};
  std::uintptr_t next_alloc[kMaxDevices] = {};
  std::map<std::uintptr_t, std::pair<int, std::size_t>> allocs;
  std::set<CUevent_st*> events;
  std::set<CUstream_st*> streams;
  std::map<void*, std::size_t> host;  // cuMemHostAlloc
  unsigned last_event_flags = 0;
  void* last_record_stream = reinterpret_cast<void*>(std::uintptr_t{0xdead});
  std::map<void*, std::uint64_t> held;  // stream -> hold generation
  std::uint64_t hold_generation = 0;
  std::map<void*, capture> captures;
  std::uintptr_t next_reserve = kReserveBase;
  std::map<std::uintptr_t, std::size_t> reservations;
  CUmemGenericAllocationHandle next_handle = 1000;
  std::map<CUmemGenericAllocationHandle, physical> handles;
  std::map<std::uintptr_t, mapping> mappings;
  std::map<std::string, fault> faults;
  std::map<std::string, long> calls;
  std::map<std::string, std::pair<int, std::uint64_t>> proc_requests;  // version, flags
  std::map<std::string, int> abi_mismatches;  // symbol -> the ABI version the driver would give
  int last_granularity_option = -1;
};

std::mutex g_mutex;
thread_local std::vector<CUctx_st*> t_stack;
thread_local int t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

std::size_t parse_size(const std::string& v) {
  const std::size_t n = std::strtoull(v.c_str(), nullptr, 10);
  if (v.find("GiB") != std::string::npos) return n << 30;
  if (v.find("MiB") != std::string::npos) return n << 20;
  return n;
}

void apply(config& c, const char* spec) {
  std::string s = spec != nullptr ? spec : "";
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "version") c.version = std::atoi(value.c_str());
    if (key == "devices") c.devices = std::atoi(value.c_str());
    if (key == "capacity") c.capacity = parse_size(value);
    if (key == "init") c.init_result = static_cast<CUresult>(std::atoi(value.c_str()));
    if (key == "vmm_off") c.vmm_off_mask |= 1u << std::atoi(value.c_str());
    if (key == "peers") c.peers = value != "0";
    if (key == "hide") {
      std::size_t p = 0;
      while (p < value.size()) {
        std::size_t e = value.find('+', p);
        if (e == std::string::npos) e = value.size();
        c.hidden.insert(value.substr(p, e - p));
        p = e + 1;
      }
    }
  }
}

config default_config() {
  config c;
  apply(c, std::getenv("FAKECU_CONFIG"));
  return c;
}

state& g() {
  static state* s = [] {
    auto* st = new state();  // never destroyed: callers may run during exit
    st->cfg = default_config();
    for (int d = 0; d < kMaxDevices; ++d) st->next_alloc[d] = kAllocBase + d * kDeviceSpan;
    return st;
  }();
  return *s;
}

// Counts the call and returns the result it must fail with (CUDA_SUCCESS: none).
CUresult enter(const char* fn) {
  state& s = g();
  ++s.calls[fn];
  if (s.deinitialized) return CUDA_ERROR_DEINITIALIZED;
  auto it = s.faults.find(fn);
  if (it != s.faults.end()) {
    fault& f = it->second;
    if (f.always) return f.result;
    if (f.countdown > 0 && --f.countdown == 0) return f.result;
  }
  return CUDA_SUCCESS;
}

#define FAKECU_ENTER(fn)                             \
  const std::lock_guard lock_(g_mutex);              \
  state& s = g();                                    \
  if (CUresult r_ = enter(fn); r_ != CUDA_SUCCESS) { \
    return r_;                                       \
  }                                                  \
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED

CUctx_st* current() {
  return t_stack.empty() ? nullptr : t_stack.back();
}

bool valid_device(const state& s, int d) {
  return d >= 0 && d < s.cfg.devices;
}

bool is_legacy(void* stream) {
  return stream == nullptr || stream == reinterpret_cast<void*>(std::uintptr_t{0x1});
}

bool is_special(void* stream) {
  return is_legacy(stream) || stream == reinterpret_cast<void*>(std::uintptr_t{0x2});
}

// The context of `stream`: its own for a stream made by cuStreamCreate, the calling thread's
// (`current`) for the special handles and for any handle the fake does not know.
CUctx_st* stream_context(const state& s, CUstream stream, CUctx_st* current) {
  if (!is_special(stream) && s.streams.count(stream) != 0) return stream->ctx;
  return current;
}

// True when [ptr, ptr + bytes) lies inside one cuMemAlloc allocation or adjacent mapped chunks.
bool device_range(const state& s, CUdeviceptr ptr, std::size_t bytes) {
  const auto p = static_cast<std::uintptr_t>(ptr);
  auto a = s.allocs.upper_bound(p);
  if (a != s.allocs.begin() && p + bytes <= std::prev(a)->first + std::prev(a)->second.second) {
    return std::prev(a)->first <= p;
  }
  // Mapped chunks: a range over adjacent mappings is one range (as a real driver's copies and
  // kernels see a virtual range mapped chunk by chunk, e.g. expandable segments).
  auto m = s.mappings.upper_bound(p);
  if (m == s.mappings.begin() || std::prev(m)->first > p) return false;
  std::uintptr_t end = std::prev(m)->first + std::prev(m)->second.bytes;
  for (; end < p + bytes && m != s.mappings.end() && m->first == end; ++m) end += m->second.bytes;
  return p + bytes <= end;
}

bool context_captures(const state& s, const CUctx_st* ctx) {
  for (const auto& [stream, c] : s.captures) {
    if (c.ctx == ctx && !c.invalidated) return true;
  }
  return false;
}

// A "potentially unsafe" call: prohibited by the thread's capture interaction mode while the
// thread itself captures (not relaxed) or, in global mode, while another thread captures in
// global mode. A prohibited call invalidates the captures it conflicts with.
CUresult unsafe_call(state& s) {
  if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const auto self = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& [stream, c] : s.captures) {
    if (c.invalidated) continue;
    const bool own = c.owner == self && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool other_global = c.owner != self && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                              t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || other_global) {
      c.invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// A call that synchronizes the context: it conflicts with every capture of the context.
CUresult synchronizing_call(state& s, const CUctx_st* ctx) {
  bool conflict = false;
  for (auto& [stream, c] : s.captures) {
    if (c.ctx == ctx && !c.invalidated) {
      c.invalidated = true;
      conflict = true;
    }
  }
  return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

void free_physical(state& s, CUmemGenericAllocationHandle h) {
  auto it = s.handles.find(h);
  if (it == s.handles.end() || !it->second.released || it->second.mapped != 0) return;
  s.used[it->second.device] -= it->second.bytes;
  s.handles.erase(it);
}

// --- Entry points handed out by cuGetProcAddress ---------------------------------------------

CUresult fake_DeviceGet(CUdevice* device, int ordinal) {
  FAKECU_ENTER("cuDeviceGet");
  if (device == nullptr || !valid_device(s, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_DeviceGetCount(int* count) {
  FAKECU_ENTER("cuDeviceGetCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = s.cfg.devices;
  return CUDA_SUCCESS;
}

CUresult fake_DeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  FAKECU_ENTER("cuDeviceGetAttribute");
  if (value == nullptr || !valid_device(s, device)) return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    return CUDA_ERROR_INVALID_VALUE;
  *value = (s.cfg.vmm_off_mask >> device) & 1u ? 0 : 1;
  return CUDA_SUCCESS;
}

CUresult fake_DeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  FAKECU_ENTER("cuDeviceCanAccessPeer");
  if (can_access == nullptr || !valid_device(s, device) || !valid_device(s, peer)) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *can_access = s.cfg.peers && device != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult fake_DevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  FAKECU_ENTER("cuDevicePrimaryCtxRetain");
  if (ctx == nullptr || !valid_device(s, device)) return CUDA_ERROR_INVALID_DEVICE;
  ++s.refcount[device];
  *ctx = &s.ctxs[device];
  return CUDA_SUCCESS;
}

CUresult fake_DevicePrimaryCtxRelease(CUdevice device) {
  FAKECU_ENTER("cuDevicePrimaryCtxRelease");
  if (!valid_device(s, device)) return CUDA_ERROR_INVALID_DEVICE;
  if (s.refcount[device] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --s.refcount[device];
  return CUDA_SUCCESS;
}

CUresult fake_CtxGetCurrent(CUcontext* ctx) {
  FAKECU_ENTER("cuCtxGetCurrent");
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current();
  return CUDA_SUCCESS;
}

CUresult fake_CtxSetCurrent(CUcontext ctx) {
  FAKECU_ENTER("cuCtxSetCurrent");
  if (ctx == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (ctx < &s.ctxs[0] || ctx >= &s.ctxs[kMaxDevices]) return CUDA_ERROR_INVALID_CONTEXT;
  if (s.refcount[ctx->device] == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (t_stack.empty()) {
    t_stack.push_back(ctx);
  } else {
    t_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult fake_CtxSynchronize() {
  FAKECU_ENTER("cuCtxSynchronize");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return synchronizing_call(s, ctx);
}

CUresult fake_MemAlloc(CUdeviceptr* ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemAlloc");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  const int d = ctx->device;
  const std::size_t rounded = (bytes + 511) / 512 * 512;
  if (s.used[d] + rounded > s.cfg.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  s.used[d] += rounded;
  const std::uintptr_t addr = s.next_alloc[d];
  s.next_alloc[d] += rounded;
  s.allocs[addr] = {d, rounded};
  *ptr = addr;
  return CUDA_SUCCESS;
}

CUresult fake_MemFree(CUdeviceptr ptr) {
  FAKECU_ENTER("cuMemFree");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = s.allocs.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = synchronizing_call(s, ctx); r != CUDA_SUCCESS) return r;
  s.used[it->second.first] -= it->second.second;
  s.allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_MemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  FAKECU_ENTER("cuMemGetInfo");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *total_bytes = s.cfg.capacity;
  *free_bytes = s.cfg.capacity - s.used[ctx->device];
  return CUDA_SUCCESS;
}

CUresult fake_EventCreate(CUevent* event, unsigned int flags) {
  FAKECU_ENTER("cuEventCreate");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // cuda.h: CU_EVENT_DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS (which needs
  // DISABLE_TIMING); anything else is refused.
  constexpr unsigned known =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  const bool ipc_ok =
      (flags & CU_EVENT_INTERPROCESS) == 0 || (flags & CU_EVENT_DISABLE_TIMING) != 0;
  if (event == nullptr || (flags & ~known) != 0 || !ipc_ok) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUevent_st{ctx, flags, false, false, nullptr, 0};
  s.events.insert(e);
  s.last_event_flags = flags;
  *event = e;
  return CUDA_SUCCESS;
}

CUresult fake_EventRecord(CUevent event, CUstream stream) {
  FAKECU_ENTER("cuEventRecord");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (s.events.count(event) == 0 || event->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  // "hEvent and hStream must be from the same context" (cuda.h, cuEventRecord).
  if (stream_context(s, stream, ctx) != event->ctx) return CUDA_ERROR_INVALID_HANDLE;
  void* st = stream;
  s.last_record_stream = st;
  if (is_legacy(st) && context_captures(s, ctx)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  auto held = s.held.find(st);
  event->stream = st;
  event->pending = held != s.held.end();
  event->hold_generation = event->pending ? held->second : 0;
  event->captured = s.captures.count(st) != 0;
  return CUDA_SUCCESS;
}

bool still_pending(const state& s, const CUevent_st* e) {
  if (!e->pending) return false;
  auto held = s.held.find(e->stream);
  return held != s.held.end() && held->second == e->hold_generation;
}

CUresult fake_EventQuery(CUevent event) {
  FAKECU_ENTER("cuEventQuery");
  if (s.events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (event->captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  return still_pending(s, event) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_EventSynchronize(CUevent event) {
  FAKECU_ENTER("cuEventSynchronize");
  if (s.events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (event->captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  event->pending = false;  // as if the held work had been waited for
  return CUDA_SUCCESS;
}

CUresult fake_EventDestroy(CUevent event) {
  FAKECU_ENTER("cuEventDestroy");
  if (s.events.erase(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete event;
  return CUDA_SUCCESS;
}

// --- Streams, pinned host memory, copies and memsets (no work is done)
// ----------------------------

CUresult fake_StreamCreate(CUstream* stream, unsigned int flags) {
  FAKECU_ENTER("cuStreamCreate");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* st = new CUstream_st{ctx, flags};
  s.streams.insert(st);
  *stream = st;
  return CUDA_SUCCESS;
}

CUresult fake_StreamDestroy(CUstream stream) {
  FAKECU_ENTER("cuStreamDestroy");
  if (is_special(stream) || s.streams.erase(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  s.held.erase(stream);
  delete stream;
  return CUDA_SUCCESS;
}

CUresult fake_StreamGetCtx(CUstream stream, CUcontext* ctx) {
  FAKECU_ENTER("cuStreamGetCtx");
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c = stream_context(s, stream, current());
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = c;
  return CUDA_SUCCESS;
}

CUresult fake_StreamSynchronize(CUstream stream) {
  FAKECU_ENTER("cuStreamSynchronize");
  CUctx_st* ctx = current();
  if (stream_context(s, stream, ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = synchronizing_call(s, stream_context(s, stream, ctx)); r != CUDA_SUCCESS) {
    return r;
  }
  for (CUevent_st* e : s.events) {
    if (e->stream == static_cast<void*>(stream)) e->pending = false;  // as if waited for
  }
  return CUDA_SUCCESS;
}

CUresult fake_MemHostAlloc(void** ptr, std::size_t bytes, unsigned int flags) {
  FAKECU_ENTER("cuMemHostAlloc");
  if (current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ptr == nullptr || bytes == 0 || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  s.host[p] = bytes;
  *ptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_MemFreeHost(void* ptr) {
  FAKECU_ENTER("cuMemFreeHost");
  if (s.host.erase(ptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(ptr);
  return CUDA_SUCCESS;
}

// A call on `stream` over device memory: a context, a stream of it, the range allocated.
CUresult stream_call(const state& s, CUstream stream, CUdeviceptr ptr, std::size_t bytes) {
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream_context(s, stream, ctx) != ctx) return CUDA_ERROR_INVALID_HANDLE;
  return device_range(s, ptr, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_MemcpyHtoDAsync(CUdeviceptr dst, const void* src, std::size_t bytes,
                              CUstream stream) {
  FAKECU_ENTER("cuMemcpyHtoDAsync");
  if (CUresult r = stream_call(s, stream, dst, bytes); r != CUDA_SUCCESS) return r;
  return src != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_MemcpyDtoHAsync(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream) {
  FAKECU_ENTER("cuMemcpyDtoHAsync");
  if (CUresult r = stream_call(s, stream, src, bytes); r != CUDA_SUCCESS) return r;
  return dst != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_MemsetD32Async(CUdeviceptr dst, unsigned int value, std::size_t count,
                             CUstream stream) {
  FAKECU_ENTER("cuMemsetD32Async");
  (void)value;
  if (count > SIZE_MAX / 4 || dst % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  return stream_call(s, stream, dst, count * 4);
}

CUresult fake_StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  FAKECU_ENTER("cuStreamIsCapturing");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  void* st = stream;
  if (is_legacy(st)) {
    if (context_captures(s, ctx)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  auto it = s.captures.find(st);
  if (it == s.captures.end()) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
  } else {
    *status = it->second.invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                     : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_ThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKECU_ENTER("cuThreadExchangeStreamCaptureMode");
  if (mode == nullptr ||
      (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
       *mode != CU_STREAM_CAPTURE_MODE_RELAXED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int previous = t_mode;
  t_mode = *mode;
  *mode = static_cast<CUstreamCaptureMode>(previous);
  return CUDA_SUCCESS;
}

CUresult check_prop(const state& s, const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(s, prop->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((s.cfg.vmm_off_mask >> prop->location.id) & 1u) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

CUresult fake_MemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                          CUmemAllocationGranularity_flags option) {
  FAKECU_ENTER("cuMemGetAllocationGranularity");
  s.last_granularity_option = option;
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_prop(s, prop); r != CUDA_SUCCESS) return r;
  *granularity =
      option == CU_MEM_ALLOC_GRANULARITY_MINIMUM ? kMinGranularity : kRecommendedGranularity;
  return CUDA_SUCCESS;
}

CUresult fake_MemAddressReserve(CUdeviceptr* ptr, std::size_t bytes, std::size_t alignment,
                                CUdeviceptr addr, unsigned long long flags) {
  FAKECU_ENTER("cuMemAddressReserve");
  if (ptr == nullptr || bytes == 0 || bytes % kMinGranularity != 0 || addr != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  const std::uintptr_t align = alignment > kMinGranularity ? alignment : kMinGranularity;
  const std::uintptr_t base = (s.next_reserve + align - 1) / align * align;
  s.next_reserve = base + bytes + kMinGranularity;  // a guard gap between ranges
  s.reservations[base] = bytes;
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult fake_MemAddressFree(CUdeviceptr ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemAddressFree");
  auto it = s.reservations.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.reservations.end() || it->second != bytes) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.mappings.lower_bound(it->first);
  if (m != s.mappings.end() && m->first < it->first + bytes) return CUDA_ERROR_INVALID_VALUE;
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_MemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                        const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKECU_ENTER("cuMemCreate");
  if (handle == nullptr || bytes == 0 || bytes % kMinGranularity != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_prop(s, prop); r != CUDA_SUCCESS) return r;
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  const int d = prop->location.id;
  if (s.used[d] + bytes > s.cfg.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  s.used[d] += bytes;
  const CUmemGenericAllocationHandle h = s.next_handle++;
  s.handles[h] = physical{d, bytes};
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult fake_MemRelease(CUmemGenericAllocationHandle handle) {
  FAKECU_ENTER("cuMemRelease");
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  free_physical(s, handle);
  return CUDA_SUCCESS;
}

bool inside_reservation(const state& s, std::uintptr_t base, std::size_t bytes) {
  auto it = s.reservations.upper_bound(base);
  if (it == s.reservations.begin()) return false;
  --it;
  return base >= it->first && base + bytes <= it->first + it->second;
}

bool overlaps_mapping(const state& s, std::uintptr_t base, std::size_t bytes) {
  auto it = s.mappings.lower_bound(base + bytes);
  if (it == s.mappings.begin()) return false;
  --it;
  return it->first + it->second.bytes > base;
}

CUresult fake_MemMap(CUdeviceptr ptr, std::size_t bytes, std::size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long flags) {
  FAKECU_ENTER("cuMemMap");
  const auto base = static_cast<std::uintptr_t>(ptr);
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.released || offset != 0 || flags != 0 ||
      bytes > h->second.bytes || bytes % kMinGranularity != 0 || base % kMinGranularity != 0 ||
      !inside_reservation(s, base, bytes) || overlaps_mapping(s, base, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  s.mappings[base] = mapping{bytes, handle, 0};
  ++h->second.mapped;
  return CUDA_SUCCESS;
}

CUresult fake_MemUnmap(CUdeviceptr ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemUnmap");
  auto it = s.mappings.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.mappings.end() || it->second.bytes != bytes) return CUDA_ERROR_INVALID_VALUE;
  const int d = s.handles[it->second.handle].device;
  if (CUresult r = synchronizing_call(s, &s.ctxs[d]); r != CUDA_SUCCESS) return r;
  const CUmemGenericAllocationHandle h = it->second.handle;
  s.mappings.erase(it);
  --s.handles[h].mapped;
  free_physical(s, h);
  return CUDA_SUCCESS;
}

CUresult fake_MemSetAccess(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc,
                           std::size_t count) {
  FAKECU_ENTER("cuMemSetAccess");
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  // The range must be exactly covered by whole mappings.
  std::vector<mapping*> covered;
  std::uintptr_t at = static_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = at + bytes;
  while (at < end) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    covered.push_back(&it->second);
    at += it->second.bytes;
  }
  if (at != end) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = unsafe_call(s); r != CUDA_SUCCESS) return r;
  unsigned mask = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const int d = desc[i].location.id;
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(s, d) ||
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    mask |= 1u << d;
  }
  for (mapping* m : covered) {
    const int owner = s.handles[m->handle].device;
    if ((mask & ~(1u << owner)) != 0 && !s.cfg.peers) return CUDA_ERROR_INVALID_DEVICE;
    m->access |= mask;
  }
  return CUDA_SUCCESS;
}

struct proc_entry {
  const char* name;
  int abi;  // the CUDA version of the ABI implemented here
  void* fn;
};

// With a toolkit, each entry point is converted to cudaTypedefs.h's type for its ABI first: a
// signature that differs from the driver's does not compile.
#if defined(FAKECU_WITH_CUDA_H)
#define FAKECU_PROC(name, abi)                                                            \
  {                                                                                       \
    "cu" #name, abi,                                                                      \
        reinterpret_cast<void*>(static_cast<FAKECU_CHECKED_PFN(name, abi)>(&fake_##name)) \
  }
#else
#define FAKECU_PROC(name, abi) \
  { "cu" #name, abi, reinterpret_cast<void*>(&fake_##name) }
#endif
const proc_entry kProcs[] = {
    FAKECU_PROC(DeviceGet, 2000),
    FAKECU_PROC(DeviceGetCount, 2000),
    FAKECU_PROC(DeviceGetAttribute, 2000),
    FAKECU_PROC(DeviceCanAccessPeer, 4000),
    FAKECU_PROC(DevicePrimaryCtxRetain, 7000),
    FAKECU_PROC(DevicePrimaryCtxRelease, 11000),
    FAKECU_PROC(CtxGetCurrent, 4000),
    FAKECU_PROC(CtxSetCurrent, 4000),
    FAKECU_PROC(CtxSynchronize, 2000),
    FAKECU_PROC(MemAlloc, 3020),
    FAKECU_PROC(MemFree, 3020),
    FAKECU_PROC(MemGetInfo, 3020),
    FAKECU_PROC(EventCreate, 2000),
    FAKECU_PROC(EventRecord, 2000),
    FAKECU_PROC(EventQuery, 2000),
    FAKECU_PROC(EventSynchronize, 2000),
    FAKECU_PROC(EventDestroy, 4000),
    FAKECU_PROC(StreamCreate, 2000),
    FAKECU_PROC(StreamDestroy, 4000),
    FAKECU_PROC(StreamGetCtx, 9020),
    FAKECU_PROC(StreamSynchronize, 2000),
    FAKECU_PROC(StreamIsCapturing, 10000),
    FAKECU_PROC(ThreadExchangeStreamCaptureMode, 10010),
    FAKECU_PROC(MemHostAlloc, 2020),
    FAKECU_PROC(MemFreeHost, 2000),
    FAKECU_PROC(MemcpyHtoDAsync, 3020),
    FAKECU_PROC(MemcpyDtoHAsync, 3020),
    FAKECU_PROC(MemsetD32Async, 3020),
    FAKECU_PROC(MemAddressReserve, 10020),
    FAKECU_PROC(MemAddressFree, 10020),
    FAKECU_PROC(MemCreate, 10020),
    FAKECU_PROC(MemRelease, 10020),
    FAKECU_PROC(MemMap, 10020),
    FAKECU_PROC(MemUnmap, 10020),
    FAKECU_PROC(MemSetAccess, 10020),
    FAKECU_PROC(MemGetAllocationGranularity, 10020),
};
#undef FAKECU_PROC

const proc_entry* implemented(const state& s, const char* symbol) {
  if (s.cfg.hidden.count(symbol) != 0) return nullptr;
  for (const proc_entry& e : kProcs) {
    if (std::strcmp(e.name, symbol) == 0) return &e;
  }
  return nullptr;
}

#if defined(FAKECU_WITH_CUDA_H)
// Every function pointer typedef of the toolkit's cudaTypedefs.h (generated by CMake).
const fakecu_toolkit_abi kToolkitAbis[] = {
#include "fake_cuda_abi_versions.inc"
};

// The ABI the real driver gives for `symbol` at `version` with `flags`: the newest version
// cudaTypedefs.h declares for the name at most `version`, per-thread variants only with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (and then preferred at that version). Sets
// `*status` as cuGetProcAddress_v2 does; returns the version (0 when none), `*per_thread` whether
// it is a per-thread variant.
int driver_choice(const char* symbol, int version, cuuint64_t flags, int* status,
                  bool* per_thread) {
  const bool want_per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool known = false;
  int best = 0;
  *per_thread = false;
  for (const fakecu_toolkit_abi& a : kToolkitAbis) {
    if (std::strcmp(a.name, symbol) != 0) continue;
    known = true;
    if (a.version > version || (a.per_thread && !want_per_thread)) continue;
    if (a.version > best || (a.version == best && a.per_thread)) {
      best = a.version;
      *per_thread = a.per_thread;
    }
  }
  *status = !known      ? CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
            : best == 0 ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SUCCESS;
  return best;
}
#endif

// cuGetProcAddress: the entry point whose ABI the requested version selects (see the file
// comment). Without a toolkit, this fake's one ABI per entry point for any version at least it.
[[maybe_unused]] CUresult get_proc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                   int* status) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.calls["cuGetProcAddress"];
  if (s.deinitialized) return CUDA_ERROR_DEINITIALIZED;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (version > s.cfg.version) return CUDA_ERROR_INVALID_VALUE;
  s.proc_requests[symbol] = {version, flags};
  const proc_entry* e = implemented(s, symbol);
  int found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
#if defined(FAKECU_WITH_CUDA_H)
  bool per_thread = false;
  const int abi = driver_choice(symbol, version, flags, &found, &per_thread);
  if (found == CU_GET_PROC_ADDRESS_SUCCESS && e == nullptr)
    found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (found == CU_GET_PROC_ADDRESS_SUCCESS && (abi != e->abi || per_thread)) {
    // The real driver would hand out another ABI than the one implemented here.
    s.abi_mismatches[symbol] = per_thread ? -abi : abi;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_SUPPORTED;
  }
#else
  if (e != nullptr) {
    found = version >= e->abi ? CU_GET_PROC_ADDRESS_SUCCESS
                              : CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  }
#endif
  if (found == CU_GET_PROC_ADDRESS_SUCCESS) *pfn = e->fn;
  if (status != nullptr) *status = found;
  return CUDA_SUCCESS;
}

struct error_text {
  int code;
  const char* name;
  const char* text;
};
const error_text kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a "
     "capturing stream"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const error_text* find_error(int code) {
  for (const error_text& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

// The value of `key` in one of the fake's counting maps, 0 when absent; takes g_mutex.
template <class Map>
typename Map::mapped_type count_of(Map state::*map, const char* key) {
  const std::lock_guard lock(g_mutex);
  const Map& m = g().*map;
  const auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

// --- Exported like the real driver -------------------------------------------------------------

FAKECU_EXPORT CUresult cuDriverGetVersion(int* version) {
  const std::lock_guard lock(g_mutex);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = g().cfg.version;
  return CUDA_SUCCESS;
}

FAKECU_EXPORT CUresult cuInit(unsigned int flags) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.calls["cuInit"];
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (s.cfg.init_result != CUDA_SUCCESS) return s.cfg.init_result;
  s.initialized = true;
  return CUDA_SUCCESS;
}

FAKECU_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  const error_text* e = find_error(error);
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKECU_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  const error_text* e = find_error(error);
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Exported for tests/cuda/gpu_driver_check.cpp, which takes it with dlsym.
FAKECU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  FAKECU_ENTER("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr || !valid_device(s, device))
    return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  *active = s.refcount[device] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

#if !defined(FAKECU_NO_PROC_ADDRESS)
// The CUDA 11.3 ABI, exported as "cuGetProcAddress".
FAKECU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                        cuuint64_t flags) {
  return get_proc(symbol, pfn, version, flags, nullptr);
}
#endif

#if !defined(FAKECU_NO_PROC_ADDRESS) && !defined(FAKECU_V1_ONLY)
// The CUDA 12.0 ABI, exported as "cuGetProcAddress_v2" (cuda.h's cuGetProcAddress).
FAKECU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  int found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult res = get_proc(symbol, pfn, version, flags, &found);
  if (status != nullptr) *status = static_cast<CUdriverProcAddressQueryResult>(found);
  return res;
}
#endif

#if defined(FAKECU_WITH_CUDA_H)
// What the loader takes with dlsym has the toolkit's types too.
static_assert(std::is_same_v<decltype(&cuDriverGetVersion), PFN_cuDriverGetVersion_v2020>);
static_assert(std::is_same_v<decltype(&cuInit), PFN_cuInit_v2000>);
static_assert(std::is_same_v<decltype(&cuGetErrorName), PFN_cuGetErrorName_v6000>);
static_assert(std::is_same_v<decltype(&cuGetErrorString), PFN_cuGetErrorString_v6000>);
static_assert(
    std::is_same_v<decltype(&cuDevicePrimaryCtxGetState), PFN_cuDevicePrimaryCtxGetState_v7000>);
#if !defined(FAKECU_NO_PROC_ADDRESS)
static_assert(std::is_same_v<decltype(&cuGetProcAddress), PFN_cuGetProcAddress_v11030>);
#endif
#if !defined(FAKECU_NO_PROC_ADDRESS) && !defined(FAKECU_V1_ONLY)
static_assert(std::is_same_v<decltype(&cuGetProcAddress_v2), PFN_cuGetProcAddress_v12000>);
#endif
#endif

// --- Control functions for the tests (fake_cuda_control.hpp) ----------------------------------

FAKECU_EXPORT void fakecu_configure(const char* spec) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  s.cfg = default_config();
  apply(s.cfg, spec);
  s.faults.clear();
  s.proc_requests.clear();
  s.abi_mismatches.clear();
}

FAKECU_EXPORT void fakecu_fail(const char* fn, long nth, int result) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  if (nth == 0) {
    s.faults.erase(fn);
    return;
  }
  fault& f = s.faults[fn];
  f.always = nth < 0;
  f.countdown = nth < 0 ? 0 : nth;
  f.result = static_cast<CUresult>(result);
}

FAKECU_EXPORT void fakecu_set_deinitialized(int on) {
  const std::lock_guard lock(g_mutex);
  g().deinitialized = on != 0;
}

FAKECU_EXPORT long fakecu_calls(const char* fn) {
  return count_of(&state::calls, fn);
}

FAKECU_EXPORT int fakecu_current_device() {
  const CUctx_st* ctx = current();
  return ctx == nullptr ? -1 : ctx->device;
}

FAKECU_EXPORT int fakecu_context_depth() {
  return static_cast<int>(t_stack.size());
}

// What cudaSetDevice does on this thread: the device's primary context retained (once per
// process by the runtime; here once per call) and made current.
FAKECU_EXPORT void fakecu_runtime_set_device(int device) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.refcount[device];
  if (t_stack.empty()) {
    t_stack.push_back(&s.ctxs[device]);
  } else {
    t_stack.back() = &s.ctxs[device];
  }
}

// Undoes fakecu_runtime_set_device on this thread.
FAKECU_EXPORT void fakecu_runtime_reset(int device) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  if (s.refcount[device] > 0) --s.refcount[device];
  t_stack.clear();
}

// What process exit does: every allocation, event, chunk, reservation and context reference is
// gone. For tests that leave the driver "shutting down" with things still allocated.
FAKECU_EXPORT void fakecu_reclaim() {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  for (CUevent_st* e : s.events) delete e;
  s.events.clear();
  for (CUstream_st* st : s.streams) delete st;
  s.streams.clear();
  for (const auto& [p, bytes] : s.host) std::free(p);
  s.host.clear();
  s.allocs.clear();
  s.handles.clear();
  s.mappings.clear();
  s.reservations.clear();
  s.captures.clear();
  s.held.clear();
  for (int d = 0; d < kMaxDevices; ++d) {
    s.refcount[d] = 0;
    s.used[d] = 0;
  }
}

FAKECU_EXPORT int fakecu_primary_refcount(int device) {
  const std::lock_guard lock(g_mutex);
  return g().refcount[device];
}

FAKECU_EXPORT int fakecu_device_of(unsigned long long addr) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  auto a = s.allocs.upper_bound(static_cast<std::uintptr_t>(addr));
  if (a != s.allocs.begin()) {
    --a;
    if (addr < a->first + a->second.second) return a->second.first;
  }
  auto m = s.mappings.upper_bound(static_cast<std::uintptr_t>(addr));
  if (m != s.mappings.begin()) {
    --m;
    if (addr < m->first + m->second.bytes) return s.handles[m->second.handle].device;
  }
  return -1;
}

FAKECU_EXPORT unsigned long long fakecu_used_bytes(int device) {
  const std::lock_guard lock(g_mutex);
  return g().used[device];
}

FAKECU_EXPORT int fakecu_live(const char* what) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  const std::string w = what;
  if (w == "allocations") return static_cast<int>(s.allocs.size());
  if (w == "events") return static_cast<int>(s.events.size());
  if (w == "streams") return static_cast<int>(s.streams.size());
  if (w == "host") return static_cast<int>(s.host.size());
  if (w == "handles") return static_cast<int>(s.handles.size());
  if (w == "mappings") return static_cast<int>(s.mappings.size());
  if (w == "reservations") return static_cast<int>(s.reservations.size());
  return -1;
}

FAKECU_EXPORT unsigned fakecu_mapping_access(unsigned long long addr) {
  const std::lock_guard lock(g_mutex);
  auto& m = g().mappings;
  auto it = m.find(static_cast<std::uintptr_t>(addr));
  return it == m.end() ? 0u : it->second.access;
}

FAKECU_EXPORT unsigned fakecu_last_event_flags() {
  const std::lock_guard lock(g_mutex);
  return g().last_event_flags;
}

FAKECU_EXPORT void* fakecu_last_record_stream() {
  const std::lock_guard lock(g_mutex);
  return g().last_record_stream;
}

// The version and flags cachalot asked cuGetProcAddress for `symbol` with (-1 if never asked).
FAKECU_EXPORT int fakecu_proc_version(const char* symbol) {
  const std::lock_guard lock(g_mutex);
  auto& r = g().proc_requests;
  auto it = r.find(symbol);
  return it == r.end() ? -1 : it->second.first;
}

FAKECU_EXPORT long long fakecu_proc_flags(const char* symbol) {
  const std::lock_guard lock(g_mutex);
  auto& r = g().proc_requests;
  auto it = r.find(symbol);
  return it == r.end() ? -1 : static_cast<long long>(it->second.second);
}

// Every symbol cachalot asked cuGetProcAddress for, sorted, joined with '+' (into `out`, at most
// `size` bytes with the terminating NUL); returns the length of the whole list.
FAKECU_EXPORT int fakecu_proc_symbols(char* out, int size) {
  const std::lock_guard lock(g_mutex);
  std::string all;
  for (const auto& [symbol, request] : g().proc_requests) {
    if (!all.empty()) all += '+';
    all += symbol;
  }
  if (out != nullptr && size > 0) {
    const std::size_t n = std::min(all.size(), static_cast<std::size_t>(size) - 1);
    std::memcpy(out, all.data(), n);
    out[n] = '\0';
  }
  return static_cast<int>(all.size());
}

// The ABI version the real driver would have given for a request of `symbol` whose version
// selects another ABI than the fake implements (negative: its per-thread variant); 0 if none.
FAKECU_EXPORT int fakecu_abi_mismatch(const char* symbol) {
  return count_of(&state::abi_mismatches, symbol);
}

// The option of the last cuMemGetAllocationGranularity (-1 if never called).
FAKECU_EXPORT int fakecu_last_granularity_option() {
  const std::lock_guard lock(g_mutex);
  return g().last_granularity_option;
}

// What the runtime does for cudaStreamCreate on `device`, without changing the calling thread's
// context: the device's primary context retained (while the stream lives) and a stream of it.
FAKECU_EXPORT void* fakecu_create_stream(int device) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.refcount[device];
  auto* st = new CUstream_st{&s.ctxs[device], 0};
  s.streams.insert(st);
  return st;
}

// Destroys a stream of fakecu_create_stream and releases its context.
FAKECU_EXPORT void fakecu_destroy_stream(void* stream) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  auto* st = static_cast<CUstream_st*>(stream);
  if (s.streams.erase(st) == 0) return;
  if (s.refcount[st->ctx->device] > 0) --s.refcount[st->ctx->device];
  s.held.erase(stream);
  delete st;
}

FAKECU_EXPORT void fakecu_hold_stream(void* stream, int on) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  if (on != 0) {
    s.held[stream] = ++s.hold_generation;
  } else {
    s.held.erase(stream);
  }
}

// Begins a capture of `stream` by the calling thread in `mode`, in `device`'s primary context.
FAKECU_EXPORT void fakecu_begin_capture(int device, void* stream, int mode) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  s.captures[stream] = capture{mode, std::this_thread::get_id(), &s.ctxs[device]};
}

// Ends the capture of `stream`: 0 when it is valid, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if a
// prohibited call invalidated it, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (903) if there was none.
FAKECU_EXPORT int fakecu_end_capture(void* stream) {
  const std::lock_guard lock(g_mutex);
  auto& captures = g().captures;
  auto it = captures.find(stream);
  if (it == captures.end()) return 903;
  const bool invalidated = it->second.invalidated;
  captures.erase(it);
  return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

FAKECU_EXPORT int fakecu_thread_capture_mode() {
  return t_mode;
}
