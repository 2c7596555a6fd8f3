// The CUDA backend on the driver API (see cuda_backend.hpp for its invariants), the CUDA side of
// the backend factory (detail::make_cuda_backend, cuda_device_count, cuda_unavailable_reason,
// cuda_driver_version, cuda_backend_built) and the public cachalot::make_cuda_backend. In a
// build without the CUDA backend only the last is defined, and it throws not_supported;
// backend_factory.cpp then provides the other fallbacks.
#include "cachalot/cuda_backend.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

#ifdef CACHALOT_CUDA_BACKEND

#include "cuda_backend.hpp"
#include "detail/cuda_context.hpp"
#include "detail/cuda_event.hpp"
#include "detail/cuda_factory.hpp"

namespace cachalot::detail {

namespace {

cu::CUdeviceptr dptr(const void* p) noexcept {
  return static_cast<cu::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
}

void* host_ptr(cu::CUdeviceptr p) noexcept {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

cu::CUstream as_stream(stream_t s) noexcept {
  return static_cast<cu::CUstream>(s);
}

cu::cuda_event& as_event(event_t e) noexcept {
  return *static_cast<cu::cuda_event*>(e);
}

// The physical memory of map_chunk: pinned device memory of `device`, no export handle.
cu::CUmemAllocationProp chunk_properties(int device) noexcept {
  cu::CUmemAllocationProp prop{};
  prop.type = cu::kMemAllocationTypePinned;
  prop.requestedHandleTypes = cu::kMemHandleTypeNone;
  prop.location.type = cu::kMemLocationTypeDevice;
  prop.location.id = device;
  return prop;
}

cu::CUmemAccessDesc read_write(int device) noexcept {
  cu::CUmemAccessDesc desc{};
  desc.location.type = cu::kMemLocationTypeDevice;
  desc.location.id = device;
  desc.flags = cu::kMemAccessFlagsProtReadWrite;
  return desc;
}

int visible_devices(const cu::driver_api& api) {
  int count = 0;
  CACHALOT_CU_TRY(api, DeviceGetCount, &count);
  return count;
}

}  // namespace

cuda_backend::cuda_backend(int device, std::vector<int> peers)
    : api_(cu::driver()), device_(device), peers_(std::move(peers)) {
  const int count = visible_devices(api_);
  CACHALOT_EXPECTS(device >= 0 && device < count, backend_error,
                   "CUDA device {} does not exist ({} device(s) visible)", device, count);
  CACHALOT_CU_TRY(api_, DeviceGet, &dev_, device);
  // The primary context is the one the CUDA runtime (PyTorch, CuPy) uses for this device, so
  // runtime streams and events belong to it. Retaining it does not make it current.
  CACHALOT_CU_TRY(api_, DevicePrimaryCtxRetain, &context_, dev_);
  try {
    check_peers();
    init_virtual_memory();
  } catch (...) {
    (void)api_.DevicePrimaryCtxRelease(dev_);
    throw;
  }
}

cuda_backend::~cuda_backend() {
  // Chunks still mapped (the engine returns them all first) would otherwise stay allocated.
  if (!chunks_.empty()) {
    try {
      const cu::context_guard guard(api_, context_);
      for (const auto& [base, c] : chunks_) discard_chunk(base, c.bytes, c.handle, true);
    } catch (const backend_error&) {  // the context cannot be made current: nothing to free
    }
  }
  (void)api_.DevicePrimaryCtxRelease(dev_);  // a no-op error while the driver shuts down
}

void cuda_backend::check_peers() {
  const int count = visible_devices(api_);
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const int peer = peers_[i];
    CACHALOT_EXPECTS(peer != device_, invalid_argument,
                     "CUDA device {}: a device is not its own peer", device_);
    for (std::size_t j = 0; j < i; ++j) {
      CACHALOT_EXPECTS(peers_[j] != peer, invalid_argument,
                       "CUDA device {}: peer {} is given twice", device_, peer);
    }
    CACHALOT_EXPECTS(peer >= 0 && peer < count, backend_error,
                     "CUDA device {}: peer device {} does not exist ({} device(s) visible)",
                     device_, peer, count);
    cu::CUdevice peer_dev = 0;
    CACHALOT_CU_TRY(api_, DeviceGet, &peer_dev, peer);
    int can_access = 0;
    CACHALOT_CU_TRY(api_, DeviceCanAccessPeer, &can_access, peer_dev, dev_);
    CACHALOT_EXPECTS(can_access != 0, backend_error,
                     "CUDA device {} cannot access the memory of device {} "
                     "(cuDeviceCanAccessPeer is 0)",
                     peer, device_);
  }
}

// Decides supports_virtual_memory() once: the driver has the entry points, the device reports
// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, and the granularity is known.
// The reported granularity is the minimum one: it is what cuMemCreate, cuMemMap and
// cuMemAddressReserve require, so it lets the engine unmap holes as finely as the driver
// allows; the engine picks its chunk sizes (PyTorch: 2 MiB and 20 MiB) as multiples of it.
void cuda_backend::init_virtual_memory() {
  const std::string& missing = cu::process_driver().vm_missing;
  if (!missing.empty()) {
    vm_unsupported_why_ = missing;
    return;
  }
  int supported = 0;
  CACHALOT_CU_TRY(api_, DeviceGetAttribute, &supported,
                  cu::kDeviceAttributeVirtualMemoryManagementSupported, dev_);
  if (supported == 0) {
    vm_unsupported_why_ = fmt::format(
        "CUDA device {} does not support virtual memory management "
        "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)",
        device_);
    return;
  }
  const cu::CUmemAllocationProp prop = chunk_properties(device_);
  std::size_t granularity = 0;
  {
    const cu::context_guard guard(api_, context_);
    CACHALOT_CU_TRY(api_, MemGetAllocationGranularity, &granularity, &prop,
                    cu::kMemAllocGranularityMinimum);
  }
  CACHALOT_EXPECTS(granularity > 0 && (granularity & (granularity - 1)) == 0, backend_error,
                   "CUDA device {}: cuMemGetAllocationGranularity gave {}, not a power of two",
                   device_, granularity);
  vm_granularity_ = granularity;
  vm_supported_ = true;
}

std::string cuda_backend::name() const {
  return "cuda";
}

int cuda_backend::device() const {
  return device_;
}

void* cuda_backend::allocate_segment(std::size_t bytes, stream_t stream) {
  (void)stream;  // cuMemAlloc memory is usable by every stream of the device
  const cu::context_guard guard(api_, context_);
  cu::CUdeviceptr ptr = 0;
  const cu::CUresult res =
      timed(device_call::segment_alloc, [&] { return api_.MemAlloc(&ptr, bytes); });
  if (res == cu::kErrorOutOfMemory) return nullptr;  // nothing sticky in the driver API
  CACHALOT_CU_CHECK(res, "cuMemAlloc(&ptr, bytes)");
  return host_ptr(ptr);
}

void cuda_backend::free_segment(void* ptr, std::size_t bytes) {
  (void)bytes;
  const cu::context_guard guard(api_, context_);
  const cu::CUresult res =
      timed(device_call::segment_free, [&] { return api_.MemFree(dptr(ptr)); });
  if (cu::is_shutdown_error(res)) return;
  CACHALOT_CU_CHECK(res, "cuMemFree(ptr)");
}

// Events are cuda_events (detail/cuda_event.hpp): recordable on a stream of any context.
event_t cuda_backend::create_event() {
  return static_cast<event_t>(new cu::cuda_event(api_, context_, clock_));
}

void cuda_backend::destroy_event(event_t event) {
  const std::unique_ptr<cu::cuda_event> e(&as_event(event));
  e->destroy();
}

void cuda_backend::record_event(event_t event, stream_t stream) {
  as_event(event).record(as_stream(stream));
}

bool cuda_backend::query_event(event_t event) {
  return as_event(event).query();
}

void cuda_backend::synchronize_event(event_t event) {
  as_event(event).synchronize();
}

void cuda_backend::synchronize_device() {
  const cu::context_guard guard(api_, context_);
  timed(device_call::device_sync, [&] { CACHALOT_CU_TRY(api_, CtxSynchronize); });
}

device_memory_info cuda_backend::memory_info() {
  const cu::context_guard guard(api_, context_);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CACHALOT_CU_TRY(api_, MemGetInfo, &free_bytes, &total_bytes);
  device_memory_info info;
  info.total = total_bytes;
  info.free = free_bytes;
  return info;
}

device_call_stats cuda_backend::call_stats() const {
  return clock_.stats();
}

bool cuda_backend::is_capturing(stream_t stream) {
  const cu::context_guard guard(api_, context_);
  int status = cu::kStreamCaptureStatusNone;
  const cu::CUresult res = api_.StreamIsCapturing(as_stream(stream), &status);
  // The legacy default stream (NULL or 0x1), queried while a blocking stream of the context
  // captures: work on it would join that capture, so it counts as capturing.
  if (res == cu::kErrorStreamCaptureImplicit) return true;
  CACHALOT_CU_CHECK(res, "cuStreamIsCapturing(stream, &status)");
  return status != cu::kStreamCaptureStatusNone;  // active or invalidated: still capturing
}

capture_mode cuda_backend::exchange_capture_mode(capture_mode mode) {
  // A property of the calling thread, not of a context: no context switch needed.
  int m = static_cast<int>(mode);
  CACHALOT_CU_TRY(api_, ThreadExchangeStreamCaptureMode, &m);
  return static_cast<capture_mode>(m);
}

std::size_t cuda_backend::segment_alignment() const {
  return 256;
}

// --- Virtual memory ---------------------------------------------------------------------------

bool cuda_backend::supports_virtual_memory() const {
  return vm_supported_;
}

std::size_t cuda_backend::vm_granularity() const {
  return vm_granularity_;
}

void cuda_backend::require_vm(const char* op) const {
  if (!vm_supported_) {
    CACHALOT_FAIL(not_supported, "{}: virtual memory management is not available: {}", op,
                  vm_unsupported_why_);
  }
}

void cuda_backend::check_vm_range(const char* op, const void* addr, std::size_t bytes) const {
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  CACHALOT_EXPECTS(bytes > 0 && bytes % vm_granularity_ == 0 && base % vm_granularity_ == 0,
                   backend_error,
                   "{}({}, {}): address and size must be non-zero multiples of the "
                   "granularity {} of CUDA device {}",
                   op, ptr(addr), bytes, vm_granularity_, device_);
}

void* cuda_backend::reserve_address_range(std::size_t bytes) {
  require_vm("reserve_address_range");
  CACHALOT_EXPECTS(bytes > 0 && bytes % vm_granularity_ == 0, backend_error,
                   "reserve_address_range({}): the size must be a non-zero multiple of the "
                   "granularity {} of CUDA device {}",
                   bytes, vm_granularity_, device_);
  const cu::context_guard guard(api_, context_);
  cu::CUdeviceptr base = 0;
  const cu::CUresult res = timed(device_call::range_reserve, [&] {
    return api_.MemAddressReserve(&base, bytes, vm_granularity_, 0, 0);
  });
  if (res == cu::kErrorOutOfMemory) return nullptr;  // address space exhausted
  CACHALOT_CU_CHECK(res, "cuMemAddressReserve(&base, bytes, granularity, 0, 0)");
  return host_ptr(base);
}

void cuda_backend::release_address_range(void* base, std::size_t bytes) {
  require_vm("release_address_range");
  check_vm_range("release_address_range", base, bytes);
  {
    const std::lock_guard lock(vm_mutex_);
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    const auto it = chunks_.lower_bound(b);
    CACHALOT_EXPECTS(it == chunks_.end() || it->first >= b + bytes, backend_error,
                     "release_address_range({}, {}): the chunk at {:#x} is still mapped", ptr(base),
                     bytes, it == chunks_.end() ? 0 : it->first);
  }
  const cu::context_guard guard(api_, context_);
  const cu::CUresult res =
      timed(device_call::range_release, [&] { return api_.MemAddressFree(dptr(base), bytes); });
  if (cu::is_shutdown_error(res)) return;
  CACHALOT_CU_CHECK(res, "cuMemAddressFree(base, bytes)");
}

bool cuda_backend::map_chunk(void* addr, std::size_t bytes) {
  require_vm("map_chunk");
  check_vm_range("map_chunk", addr, bytes);
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  {
    const std::lock_guard lock(vm_mutex_);
    auto it = chunks_.lower_bound(base + bytes);
    const bool overlaps = it != chunks_.begin() && (--it, it->first + it->second.bytes > base);
    CACHALOT_EXPECTS(!overlaps, backend_error,
                     "map_chunk({}, {}): overlaps the chunk mapped at {:#x}", ptr(addr), bytes,
                     overlaps ? it->first : 0);
  }
  const cu::context_guard guard(api_, context_);
  const cu::CUmemAllocationProp prop = chunk_properties(device_);
  cu::CUmemGenericAllocationHandle handle = 0;
  cu::CUresult res =
      timed(device_call::chunk_create, [&] { return api_.MemCreate(&handle, bytes, &prop, 0); });
  if (res == cu::kErrorOutOfMemory) return false;
  CACHALOT_CU_CHECK(res, "cuMemCreate(&handle, bytes, &prop, 0)");
  res = timed(device_call::chunk_map, [&] { return api_.MemMap(dptr(addr), bytes, 0, handle, 0); });
  if (res != cu::kSuccess) {
    discard_chunk(dptr(addr), bytes, handle, false);
    if (res == cu::kErrorOutOfMemory) return false;
    CACHALOT_CU_CHECK(res, "cuMemMap(addr, bytes, 0, handle, 0)");
  }
  std::vector<cu::CUmemAccessDesc> access{read_write(device_)};
  for (const int peer : peers_) access.push_back(read_write(peer));
  res = timed(device_call::chunk_access,
              [&] { return api_.MemSetAccess(dptr(addr), bytes, access.data(), access.size()); });
  if (res != cu::kSuccess) {
    discard_chunk(dptr(addr), bytes, handle, true);
    if (res == cu::kErrorOutOfMemory) return false;
    CACHALOT_CU_CHECK(res, "cuMemSetAccess(addr, bytes, access, count)");
  }
  const std::lock_guard lock(vm_mutex_);
  chunks_.emplace(base, chunk{handle, bytes});
  return true;
}

void cuda_backend::unmap_chunk(void* addr, std::size_t bytes) {
  require_vm("unmap_chunk");
  check_vm_range("unmap_chunk", addr, bytes);
  const auto base = reinterpret_cast<std::uintptr_t>(addr);
  chunk c{};
  {
    const std::lock_guard lock(vm_mutex_);
    const auto it = chunks_.find(base);
    CACHALOT_EXPECTS(it != chunks_.end(), backend_error,
                     "unmap_chunk({}, {}): no chunk is mapped at this address", ptr(addr), bytes);
    CACHALOT_EXPECTS(it->second.bytes == bytes, backend_error,
                     "unmap_chunk({}, {}): the chunk there was mapped with {} bytes; a chunk is "
                     "unmapped whole (CUDA cannot unmap part of a mapping)",
                     ptr(addr), bytes, it->second.bytes);
    c = it->second;
    chunks_.erase(it);  // a concurrent unmap of the same chunk now fails cleanly
  }
  const cu::context_guard guard(api_, context_);
  cu::CUresult res =
      timed(device_call::chunk_unmap, [&] { return api_.MemUnmap(dptr(addr), bytes); });
  if (res != cu::kSuccess && !cu::is_shutdown_error(res)) {
    const std::lock_guard lock(vm_mutex_);
    chunks_.emplace(base, c);  // still mapped: the engine may retry
    CACHALOT_CU_CHECK(res, "cuMemUnmap(addr, bytes)");
  }
  res = timed(device_call::chunk_release, [&] { return api_.MemRelease(c.handle); });
  if (cu::is_shutdown_error(res)) return;
  CACHALOT_CU_CHECK(res, "cuMemRelease(handle)");  // unmapped already; the memory may leak
}

void cuda_backend::discard_chunk(cu::CUdeviceptr ptr, std::size_t bytes,
                                 cu::CUmemGenericAllocationHandle h, bool mapped) noexcept {
  if (mapped) (void)timed(device_call::chunk_unmap, [&] { return api_.MemUnmap(ptr, bytes); });
  (void)timed(device_call::chunk_release, [&] { return api_.MemRelease(h); });
}

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  return std::make_shared<cuda_backend>(device, std::vector<int>{});
}

}  // namespace cachalot::detail

namespace cachalot {

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  return detail::make_cuda_backend(device);
}

std::shared_ptr<device_backend> make_cuda_backend(int device, const std::vector<int>& peers) {
  return std::make_shared<detail::cuda_backend>(device, peers);
}

int cuda_device_count() noexcept {
  return detail::cu::device_count(nullptr);
}

std::string cuda_unavailable_reason() {
  std::string why;
  return detail::cu::device_count(&why) > 0 ? std::string() : why;
}

int cuda_driver_version() noexcept {
  try {
    return detail::cu::process_driver().version;
  } catch (...) {
    return 0;
  }
}

bool cuda_backend_built() noexcept {
  return true;
}

}  // namespace cachalot

#else  // !CACHALOT_CUDA_BACKEND

namespace cachalot {

std::shared_ptr<device_backend> make_cuda_backend(int device) {
  throw not_supported("make_cuda_backend(" + std::to_string(device) +
                          "): this build of cachalot has no CUDA backend",
                      __FILE__, __LINE__);
}

std::shared_ptr<device_backend> make_cuda_backend(int device, const std::vector<int>& peers) {
  (void)peers;
  return make_cuda_backend(device);
}

}  // namespace cachalot

#endif  // CACHALOT_CUDA_BACKEND
