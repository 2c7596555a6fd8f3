// A fake CUDA driver (libcachalot_fakecuda.so) for the tests of the driver-API backend on
// machines without a GPU. It exports what cachalot's loader takes with dlsym (cuDriverGetVersion,
// cuInit, cuGetErrorName, cuGetErrorString, cuGetProcAddress and cuGetProcAddress_v2) and hands
// out every other entry point through cuGetProcAddress, plus fakecu_* control functions for the
// tests (fake_cuda_control.hpp). Built three ways: the default (CUDA 12.4), FAKECU_V1_ONLY (CUDA
// 11.4, only the 11.3 cuGetProcAddress) and FAKECU_NO_PROC_ADDRESS (CUDA 11.2, none).
//
// What it models, after the CUDA driver API documentation (it is a model, not the driver):
//  - devices (2 by default) with a capacity each; one primary context per device, retained and
//    released with a reference count; a context stack per thread (cuCtxSetCurrent replaces its
//    top, NULL pops it); calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT without
//    one, which catches a backend that forgets to make its context current;
//  - cuMemAlloc/cuMemFree with capacity accounting (CUDA_ERROR_OUT_OF_MEMORY), events recorded on
//    streams that a test may "hold" (queries then say CUDA_ERROR_NOT_READY until released);
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
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "detail/cuda_driver.hpp"

using namespace cachalot::detail::cu;  // NOLINT: the driver's own vocabulary

struct CUctx_st {
  int device;
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
  CUresult init_result = kSuccess;
  unsigned vmm_off_mask = 0;  // devices without virtual memory management
  bool peers = true;          // cuDeviceCanAccessPeer
  std::set<std::string> hidden;
};

struct fault {
  long countdown = 0;  // fails when it reaches 1
  bool always = false;
  CUresult result = kErrorUnknown;
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
};

std::mutex g_mutex;
thread_local std::vector<CUctx_st*> t_stack;
thread_local int t_mode = kStreamCaptureModeGlobal;

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
    if (key == "init") c.init_result = std::atoi(value.c_str());
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

// Counts the call and returns the result it must fail with (kSuccess: none).
CUresult enter(const char* fn) {
  state& s = g();
  ++s.calls[fn];
  if (s.deinitialized) return kErrorDeinitialized;
  auto it = s.faults.find(fn);
  if (it != s.faults.end()) {
    fault& f = it->second;
    if (f.always) return f.result;
    if (f.countdown > 0 && --f.countdown == 0) return f.result;
  }
  return kSuccess;
}

#define FAKECU_ENTER(fn)                  \
  const std::lock_guard lock_(g_mutex);   \
  state& s = g();                         \
  if (CUresult r_ = enter(fn); r_ != 0) { \
    return r_;                            \
  }                                       \
  if (!s.initialized) return kErrorNotInitialized

CUctx_st* current() {
  return t_stack.empty() ? nullptr : t_stack.back();
}

bool valid_device(const state& s, int d) {
  return d >= 0 && d < s.cfg.devices;
}

bool is_legacy(void* stream) {
  return stream == nullptr || stream == reinterpret_cast<void*>(std::uintptr_t{0x1});
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
  if (t_mode == kStreamCaptureModeRelaxed) return kSuccess;
  const auto self = std::this_thread::get_id();
  bool prohibited = false;
  for (auto& [stream, c] : s.captures) {
    if (c.invalidated) continue;
    const bool own = c.owner == self && c.mode != kStreamCaptureModeRelaxed;
    const bool other_global =
        c.owner != self && c.mode == kStreamCaptureModeGlobal && t_mode == kStreamCaptureModeGlobal;
    if (own || other_global) {
      c.invalidated = true;
      prohibited = true;
    }
  }
  return prohibited ? kErrorStreamCaptureUnsupported : kSuccess;
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
  return conflict ? kErrorStreamCaptureUnsupported : kSuccess;
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
  if (device == nullptr || !valid_device(s, ordinal)) return kErrorInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

CUresult fake_DeviceGetCount(int* count) {
  FAKECU_ENTER("cuDeviceGetCount");
  if (count == nullptr) return kErrorInvalidValue;
  *count = s.cfg.devices;
  return kSuccess;
}

CUresult fake_DeviceGetAttribute(int* value, int attribute, CUdevice device) {
  FAKECU_ENTER("cuDeviceGetAttribute");
  if (value == nullptr || !valid_device(s, device)) return kErrorInvalidValue;
  if (attribute != kDeviceAttributeVirtualMemoryManagementSupported) return kErrorInvalidValue;
  *value = (s.cfg.vmm_off_mask >> device) & 1u ? 0 : 1;
  return kSuccess;
}

CUresult fake_DeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  FAKECU_ENTER("cuDeviceCanAccessPeer");
  if (can_access == nullptr || !valid_device(s, device) || !valid_device(s, peer)) {
    return kErrorInvalidDevice;
  }
  *can_access = s.cfg.peers && device != peer ? 1 : 0;
  return kSuccess;
}

CUresult fake_DevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  FAKECU_ENTER("cuDevicePrimaryCtxRetain");
  if (ctx == nullptr || !valid_device(s, device)) return kErrorInvalidDevice;
  ++s.refcount[device];
  *ctx = &s.ctxs[device];
  return kSuccess;
}

CUresult fake_DevicePrimaryCtxRelease(CUdevice device) {
  FAKECU_ENTER("cuDevicePrimaryCtxRelease");
  if (!valid_device(s, device)) return kErrorInvalidDevice;
  if (s.refcount[device] == 0) return kErrorInvalidContext;
  --s.refcount[device];
  return kSuccess;
}

CUresult fake_CtxGetCurrent(CUcontext* ctx) {
  FAKECU_ENTER("cuCtxGetCurrent");
  if (ctx == nullptr) return kErrorInvalidValue;
  *ctx = current();
  return kSuccess;
}

CUresult fake_CtxSetCurrent(CUcontext ctx) {
  FAKECU_ENTER("cuCtxSetCurrent");
  if (ctx == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return kSuccess;
  }
  if (ctx < &s.ctxs[0] || ctx >= &s.ctxs[kMaxDevices]) return kErrorInvalidContext;
  if (s.refcount[ctx->device] == 0) return kErrorContextIsDestroyed;
  if (t_stack.empty()) {
    t_stack.push_back(ctx);
  } else {
    t_stack.back() = ctx;
  }
  return kSuccess;
}

CUresult fake_CtxSynchronize() {
  FAKECU_ENTER("cuCtxSynchronize");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  return synchronizing_call(s, ctx);
}

CUresult fake_MemAlloc(CUdeviceptr* ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemAlloc");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  if (ptr == nullptr || bytes == 0) return kErrorInvalidValue;
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  const int d = ctx->device;
  const std::size_t rounded = (bytes + 511) / 512 * 512;
  if (s.used[d] + rounded > s.cfg.capacity) return kErrorOutOfMemory;
  s.used[d] += rounded;
  const std::uintptr_t addr = s.next_alloc[d];
  s.next_alloc[d] += rounded;
  s.allocs[addr] = {d, rounded};
  *ptr = addr;
  return kSuccess;
}

CUresult fake_MemFree(CUdeviceptr ptr) {
  FAKECU_ENTER("cuMemFree");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  auto it = s.allocs.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.allocs.end()) return kErrorInvalidValue;
  if (CUresult r = synchronizing_call(s, ctx); r != kSuccess) return r;
  s.used[it->second.first] -= it->second.second;
  s.allocs.erase(it);
  return kSuccess;
}

CUresult fake_MemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  FAKECU_ENTER("cuMemGetInfo");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  *total_bytes = s.cfg.capacity;
  *free_bytes = s.cfg.capacity - s.used[ctx->device];
  return kSuccess;
}

CUresult fake_EventCreate(CUevent* event, unsigned int flags) {
  FAKECU_ENTER("cuEventCreate");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  if (event == nullptr) return kErrorInvalidValue;
  auto* e = new CUevent_st{ctx, flags, false, false, nullptr, 0};
  s.events.insert(e);
  s.last_event_flags = flags;
  *event = e;
  return kSuccess;
}

CUresult fake_EventRecord(CUevent event, CUstream stream) {
  FAKECU_ENTER("cuEventRecord");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  if (s.events.count(event) == 0 || event->ctx != ctx) return kErrorInvalidHandle;
  void* st = stream;
  s.last_record_stream = st;
  if (is_legacy(st) && context_captures(s, ctx)) return kErrorStreamCaptureImplicit;
  auto held = s.held.find(st);
  event->stream = st;
  event->pending = held != s.held.end();
  event->hold_generation = event->pending ? held->second : 0;
  event->captured = s.captures.count(st) != 0;
  return kSuccess;
}

bool still_pending(const state& s, const CUevent_st* e) {
  if (!e->pending) return false;
  auto held = s.held.find(e->stream);
  return held != s.held.end() && held->second == e->hold_generation;
}

CUresult fake_EventQuery(CUevent event) {
  FAKECU_ENTER("cuEventQuery");
  if (s.events.count(event) == 0) return kErrorInvalidHandle;
  if (event->captured) return kErrorCapturedEvent;
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  return still_pending(s, event) ? kErrorNotReady : kSuccess;
}

CUresult fake_EventSynchronize(CUevent event) {
  FAKECU_ENTER("cuEventSynchronize");
  if (s.events.count(event) == 0) return kErrorInvalidHandle;
  if (event->captured) return kErrorCapturedEvent;
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  event->pending = false;  // as if the held work had been waited for
  return kSuccess;
}

CUresult fake_EventDestroy(CUevent event) {
  FAKECU_ENTER("cuEventDestroy");
  if (s.events.erase(event) == 0) return kErrorInvalidHandle;
  delete event;
  return kSuccess;
}

CUresult fake_StreamIsCapturing(CUstream stream, int* status) {
  FAKECU_ENTER("cuStreamIsCapturing");
  CUctx_st* ctx = current();
  if (ctx == nullptr) return kErrorInvalidContext;
  if (status == nullptr) return kErrorInvalidValue;
  void* st = stream;
  if (is_legacy(st)) {
    if (context_captures(s, ctx)) return kErrorStreamCaptureImplicit;
    *status = kStreamCaptureStatusNone;
    return kSuccess;
  }
  auto it = s.captures.find(st);
  if (it == s.captures.end()) {
    *status = kStreamCaptureStatusNone;
  } else {
    *status = it->second.invalidated ? kStreamCaptureStatusInvalidated : kStreamCaptureStatusActive;
  }
  return kSuccess;
}

CUresult fake_ThreadExchangeStreamCaptureMode(int* mode) {
  FAKECU_ENTER("cuThreadExchangeStreamCaptureMode");
  if (mode == nullptr || *mode < 0 || *mode > 2) return kErrorInvalidValue;
  const int previous = t_mode;
  t_mode = *mode;
  *mode = previous;
  return kSuccess;
}

CUresult check_prop(const state& s, const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != kMemAllocationTypePinned ||
      prop->location.type != kMemLocationTypeDevice || !valid_device(s, prop->location.id)) {
    return kErrorInvalidValue;
  }
  if ((s.cfg.vmm_off_mask >> prop->location.id) & 1u) return kErrorNotSupported;
  return kSuccess;
}

CUresult fake_MemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                          int option) {
  FAKECU_ENTER("cuMemGetAllocationGranularity");
  if (granularity == nullptr) return kErrorInvalidValue;
  if (CUresult r = check_prop(s, prop); r != kSuccess) return r;
  *granularity = option == kMemAllocGranularityMinimum ? kMinGranularity : kRecommendedGranularity;
  return kSuccess;
}

CUresult fake_MemAddressReserve(CUdeviceptr* ptr, std::size_t bytes, std::size_t alignment,
                                CUdeviceptr addr, unsigned long long flags) {
  FAKECU_ENTER("cuMemAddressReserve");
  if (ptr == nullptr || bytes == 0 || bytes % kMinGranularity != 0 || addr != 0 || flags != 0) {
    return kErrorInvalidValue;
  }
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  const std::uintptr_t align = alignment > kMinGranularity ? alignment : kMinGranularity;
  const std::uintptr_t base = (s.next_reserve + align - 1) / align * align;
  s.next_reserve = base + bytes + kMinGranularity;  // a guard gap between ranges
  s.reservations[base] = bytes;
  *ptr = base;
  return kSuccess;
}

CUresult fake_MemAddressFree(CUdeviceptr ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemAddressFree");
  auto it = s.reservations.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.reservations.end() || it->second != bytes) return kErrorInvalidValue;
  auto m = s.mappings.lower_bound(it->first);
  if (m != s.mappings.end() && m->first < it->first + bytes) return kErrorInvalidValue;
  s.reservations.erase(it);
  return kSuccess;
}

CUresult fake_MemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                        const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKECU_ENTER("cuMemCreate");
  if (handle == nullptr || bytes == 0 || bytes % kMinGranularity != 0 || flags != 0) {
    return kErrorInvalidValue;
  }
  if (CUresult r = check_prop(s, prop); r != kSuccess) return r;
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  const int d = prop->location.id;
  if (s.used[d] + bytes > s.cfg.capacity) return kErrorOutOfMemory;
  s.used[d] += bytes;
  const CUmemGenericAllocationHandle h = s.next_handle++;
  s.handles[h] = physical{d, bytes};
  *handle = h;
  return kSuccess;
}

CUresult fake_MemRelease(CUmemGenericAllocationHandle handle) {
  FAKECU_ENTER("cuMemRelease");
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.released) return kErrorInvalidValue;
  it->second.released = true;
  free_physical(s, handle);
  return kSuccess;
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
    return kErrorInvalidValue;
  }
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  s.mappings[base] = mapping{bytes, handle, 0};
  ++h->second.mapped;
  return kSuccess;
}

CUresult fake_MemUnmap(CUdeviceptr ptr, std::size_t bytes) {
  FAKECU_ENTER("cuMemUnmap");
  auto it = s.mappings.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.mappings.end() || it->second.bytes != bytes) return kErrorInvalidValue;
  const int d = s.handles[it->second.handle].device;
  if (CUresult r = synchronizing_call(s, &s.ctxs[d]); r != kSuccess) return r;
  const CUmemGenericAllocationHandle h = it->second.handle;
  s.mappings.erase(it);
  --s.handles[h].mapped;
  free_physical(s, h);
  return kSuccess;
}

CUresult fake_MemSetAccess(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc,
                           std::size_t count) {
  FAKECU_ENTER("cuMemSetAccess");
  if (desc == nullptr || count == 0) return kErrorInvalidValue;
  // The range must be exactly covered by whole mappings.
  std::vector<mapping*> covered;
  std::uintptr_t at = static_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = at + bytes;
  while (at < end) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end()) return kErrorInvalidValue;
    covered.push_back(&it->second);
    at += it->second.bytes;
  }
  if (at != end) return kErrorInvalidValue;
  if (CUresult r = unsafe_call(s); r != kSuccess) return r;
  unsigned mask = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const int d = desc[i].location.id;
    if (desc[i].location.type != kMemLocationTypeDevice || !valid_device(s, d) ||
        desc[i].flags != kMemAccessFlagsProtReadWrite) {
      return kErrorInvalidValue;
    }
    mask |= 1u << d;
  }
  for (mapping* m : covered) {
    const int owner = s.handles[m->handle].device;
    if ((mask & ~(1u << owner)) != 0 && !s.cfg.peers) return kErrorInvalidDevice;
    m->access |= mask;
  }
  return kSuccess;
}

struct proc_entry {
  const char* name;
  int abi;  // the CUDA version of the ABI implemented here
  void* fn;
};

#define FAKECU_PROC(name, abi) \
  { "cu" #name, abi, reinterpret_cast<void*>(&fake_##name) }
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
    FAKECU_PROC(StreamIsCapturing, 10000),
    FAKECU_PROC(ThreadExchangeStreamCaptureMode, 10010),
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

// cuGetProcAddress: the entry point whose ABI the requested version selects. This fake has one
// ABI per entry point; an older version than it gets nothing (VERSION_NOT_SUFFICIENT).
[[maybe_unused]] CUresult get_proc(const char* symbol, void** pfn, int version, std::uint64_t flags,
                                   int* status) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.calls["cuGetProcAddress"];
  if (s.deinitialized) return kErrorDeinitialized;
  if (symbol == nullptr || pfn == nullptr) return kErrorInvalidValue;
  *pfn = nullptr;
  if (version > s.cfg.version) return kErrorInvalidValue;
  s.proc_requests[symbol] = {version, flags};
  int found = 1;  // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
  if (s.cfg.hidden.count(symbol) == 0) {
    for (const proc_entry& e : kProcs) {
      if (std::strcmp(e.name, symbol) != 0) continue;
      found = version >= e.abi ? 0 : 2;  // SUCCESS or VERSION_NOT_SUFFICIENT
      if (found == 0) *pfn = e.fn;
    }
  }
  if (status != nullptr) *status = found;
  return kSuccess;
}

struct error_text {
  CUresult code;
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

const error_text* find_error(CUresult code) {
  for (const error_text& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace

// --- Exported like the real driver -------------------------------------------------------------

FAKECU_EXPORT CUresult cuDriverGetVersion(int* version) {
  const std::lock_guard lock(g_mutex);
  if (version == nullptr) return kErrorInvalidValue;
  *version = g().cfg.version;
  return kSuccess;
}

FAKECU_EXPORT CUresult cuInit(unsigned int flags) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  ++s.calls["cuInit"];
  if (flags != 0) return kErrorInvalidValue;
  if (s.cfg.init_result != kSuccess) return s.cfg.init_result;
  s.initialized = true;
  return kSuccess;
}

FAKECU_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  const error_text* e = find_error(error);
  if (name == nullptr) return kErrorInvalidValue;
  *name = e != nullptr ? e->name : nullptr;
  return e != nullptr ? kSuccess : kErrorInvalidValue;
}

FAKECU_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  const error_text* e = find_error(error);
  if (text == nullptr) return kErrorInvalidValue;
  *text = e != nullptr ? e->text : nullptr;
  return e != nullptr ? kSuccess : kErrorInvalidValue;
}

// Exported for tests/cuda/gpu_driver_check.cpp, which takes it with dlsym.
FAKECU_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  FAKECU_ENTER("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr || !valid_device(s, device)) return kErrorInvalidValue;
  *flags = 0;
  *active = s.refcount[device] > 0 ? 1 : 0;
  return kSuccess;
}

#if !defined(FAKECU_NO_PROC_ADDRESS)
FAKECU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                        std::uint64_t flags) {
  return get_proc(symbol, pfn, version, flags, nullptr);
}
#endif

#if !defined(FAKECU_NO_PROC_ADDRESS) && !defined(FAKECU_V1_ONLY)
FAKECU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                           std::uint64_t flags, int* status) {
  return get_proc(symbol, pfn, version, flags, status);
}
#endif

// --- Control functions for the tests (fake_cuda_control.hpp) ----------------------------------

FAKECU_EXPORT void fakecu_configure(const char* spec) {
  const std::lock_guard lock(g_mutex);
  state& s = g();
  s.cfg = default_config();
  apply(s.cfg, spec);
  s.faults.clear();
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
  f.result = result;
}

FAKECU_EXPORT void fakecu_set_deinitialized(int on) {
  const std::lock_guard lock(g_mutex);
  g().deinitialized = on != 0;
}

FAKECU_EXPORT long fakecu_calls(const char* fn) {
  const std::lock_guard lock(g_mutex);
  auto& calls = g().calls;
  auto it = calls.find(fn);
  return it == calls.end() ? 0 : it->second;
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
  return invalidated ? kErrorStreamCaptureInvalidated : kSuccess;
}

FAKECU_EXPORT int fakecu_thread_capture_mode() {
  return t_mode;
}
