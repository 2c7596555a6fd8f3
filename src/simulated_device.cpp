// The simulated device (see include/cachalot/simulated_device.hpp). Address space: one
// PROT_NONE, MAP_NORESERVE reservation of twice the capacity for segments, handed out
// first-fit (detail::address_ranges); with host backing, live segments are made read-write
// and freed ones are discarded and protected again. Virtual memory (ranges and chunks) lives
// in detail::simulated_vm, with its own reservation; this file adds to it the capacity, the
// counters and fault injection. Capacity is accounted in bytes: segments rounded to the
// alignment, chunks exactly. One mutex guards everything.
#include "cachalot/simulated_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "cachalot/errors.hpp"
#include "detail/address_ranges.hpp"
#include "detail/checks.hpp"
#include "detail/device_clock.hpp"
#include "detail/sim_capture.hpp"
#include "detail/simulated_vm.hpp"

namespace cachalot {

namespace {
constexpr std::uintptr_t synthetic_base = std::uintptr_t{0x100000000000};
constexpr std::uintptr_t synthetic_host_base = std::uintptr_t{0x300000000000};

struct sim_stream {
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  bool held = false;
};

struct sim_event {
  stream_t stream = nullptr;
  std::uint64_t seq = 0;
  bool recorded = false;
  bool captured = false;  ///< last recorded on a capturing stream
};

// The calling thread's capture interaction mode (per thread, as CUDA's).
thread_local capture_mode t_capture_mode = capture_mode::global;

[[noreturn]] void fail_capture(const char* call) {
  CACHALOT_FAIL(backend_error,
                "simulated device: {} is not permitted during a CUDA graph capture "
                "(cudaErrorStreamCaptureUnsupported); the capture is invalidated",
                call);
}

struct fault_plan {
  std::uint64_t calls = 0;
  std::uint64_t fail_at = 0;
  bool always = false;
};
}  // namespace

struct simulated_device::impl {
  explicit impl(const sim_options& o) : opts(o), clock(o.cost) {}
  sim_options opts;
  std::size_t page = 4096;
  std::size_t place_align = 512;
  void* mapping = nullptr;
  std::size_t mapping_size = 0;
  std::uintptr_t base = 0;
  mutable std::mutex mutex;
  detail::address_ranges free_ranges;
  std::map<std::uintptr_t, std::size_t> live;  // address -> requested length
  std::unique_ptr<detail::simulated_vm> vm;
  std::unordered_map<stream_t, sim_stream> streams;
  std::unordered_set<sim_event*> events;
  std::array<fault_plan, sim_op_count> faults{};
  sim_counters counters;
  detail::sim_capture_model captures;
  detail::device_clock clock;                      // prices every call made (sim_options::cost)
  std::map<std::uintptr_t, std::size_t> host;      // pinned host allocations: address -> bytes
  std::uintptr_t next_host = synthetic_host_base;  // without host backing

  // The host allocation holding [addr, addr + bytes), or host.end().
  std::map<std::uintptr_t, std::size_t>::const_iterator host_of(std::uintptr_t addr,
                                                                std::size_t bytes) const {
    auto it = host.upper_bound(addr);
    if (it == host.begin()) return host.end();
    --it;
    return addr >= it->first && addr - it->first <= it->second &&
                   bytes <= it->second - (addr - it->first)
               ? it
               : host.end();
  }
  // True if [addr, addr + bytes) is device memory: mapped chunks, or inside one live segment.
  bool device_span(std::uintptr_t addr, std::size_t bytes) const {
    if (vm->is_mapped(addr, bytes)) return true;
    auto it = live.upper_bound(addr);
    if (it == live.begin()) return false;
    --it;
    return addr >= it->first && addr + bytes <= it->first + it->second;
  }
  // Checks and prices one copy between pinned host memory `host_at` and device memory
  // `device_at`, then copies (host backing) in the direction given.
  void copy(std::uintptr_t host_at, std::uintptr_t device_at, std::size_t bytes, stream_t stream,
            bool to_host);

  std::size_t charged(std::size_t bytes) const {
    return (bytes + opts.alignment - 1) / opts.alignment * opts.alignment;
  }
  std::size_t placed(std::size_t bytes) const {
    return (bytes + place_align - 1) / place_align * place_align;
  }

  // Counts a call of `op`; true if it must fail.
  bool inject(sim_op op) {
    fault_plan& f = faults[static_cast<std::size_t>(op)];
    ++f.calls;
    if (f.always || (f.fail_at != 0 && f.calls == f.fail_at)) {
      if (!f.always) f.fail_at = 0;
      ++counters.injected_faults;
      return true;
    }
    return false;
  }

  std::size_t free_bytes() const {
    return opts.capacity - counters.used_bytes - counters.mapped_bytes;
  }

  sim_event* event_of(event_t e) {
    auto* ev = static_cast<sim_event*>(e);
    CACHALOT_EXPECTS(events.count(ev) != 0, backend_error, "simulated device: unknown event {}",
                     detail::ptr(e));
    return ev;
  }

  bool complete(const sim_event* ev) {
    if (!ev->recorded) return true;
    return ev->seq <= streams[ev->stream].completed;
  }
};

simulated_device::simulated_device(const sim_options& options)
    : impl_(std::make_unique<impl>(options)) {
  impl& d = *impl_;
  CACHALOT_EXPECTS(options.capacity != 0, invalid_argument, "simulated device: capacity is 0");
  CACHALOT_EXPECTS(options.alignment != 0 && (options.alignment & (options.alignment - 1)) == 0,
                   invalid_argument, "simulated device: alignment {} is not a power of two",
                   options.alignment);
  d.page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  detail::sim_vm_layout vm_layout = detail::vm_layout_of(options, d.page);
  d.place_align = options.host_backing ? std::max(options.alignment, d.page) : options.alignment;
  // Twice the capacity, so that the address space never runs out before the capacity does.
  const std::size_t cap = options.capacity;
  d.mapping_size = cap > (SIZE_MAX >> 2) ? cap : 2 * cap + d.place_align;
  void* m =
      mmap(nullptr, d.mapping_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    CACHALOT_EXPECTS(!options.host_backing, backend_error,
                     "simulated device: cannot reserve {} B of address space for host backing",
                     d.mapping_size);
    d.base = synthetic_base;  // addresses only, nothing behind them
  } else {
    d.mapping = m;
    d.base = reinterpret_cast<std::uintptr_t>(m);
  }
  const std::uintptr_t aligned = (d.base + d.place_align - 1) / d.place_align * d.place_align;
  d.free_ranges.give(aligned, d.mapping_size - (aligned - d.base));
  vm_layout.avoid_begin = d.base;
  vm_layout.avoid_end = d.base + d.mapping_size;
  d.vm = std::make_unique<detail::simulated_vm>(vm_layout);
}

simulated_device::~simulated_device() {
  if (impl_->mapping != nullptr) munmap(impl_->mapping, impl_->mapping_size);
  for (sim_event* e : impl_->events) delete e;
  if (impl_->opts.host_backing) {
    for (const auto& [addr, bytes] : impl_->host) munmap(reinterpret_cast<void*>(addr), bytes);
  }
}

std::string simulated_device::name() const {
  return "simulated";
}
int simulated_device::device() const {
  return impl_->opts.device;
}
std::size_t simulated_device::segment_alignment() const {
  return impl_->place_align;
}
const sim_options& simulated_device::options() const noexcept {
  return impl_->opts;
}
bool simulated_device::host_backed() const noexcept {
  return impl_->opts.host_backing;
}
bool simulated_device::host_accessible() const {
  return impl_->opts.host_backing;
}

void* simulated_device::allocate_segment(std::size_t bytes, stream_t) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  if (!d.captures.allow_unsafe(t_capture_mode)) fail_capture("allocate_segment (cudaMalloc)");
  d.clock.charge(device_call::segment_alloc, bytes);
  if (d.inject(sim_op::allocate_segment) || bytes == 0 || d.charged(bytes) > d.free_bytes()) {
    ++d.counters.failed_segment_allocs;
    return nullptr;
  }
  const std::uintptr_t addr = d.free_ranges.take(d.placed(bytes));
  if (addr == 0) {
    ++d.counters.failed_segment_allocs;
    return nullptr;
  }
  if (d.opts.host_backing &&
      mprotect(reinterpret_cast<void*>(addr), d.placed(bytes), PROT_READ | PROT_WRITE) != 0) {
    d.free_ranges.give(addr, d.placed(bytes));
    CACHALOT_FAIL(backend_error, "simulated device: mprotect failed for {} B", bytes);
  }
  d.live.emplace(addr, bytes);
  d.counters.used_bytes += d.charged(bytes);
  ++d.counters.segment_allocs;
  ++d.counters.live_segments;
  return reinterpret_cast<void*>(addr);
}

void simulated_device::free_segment(void* ptr, std::size_t bytes) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = d.live.find(addr);
  CACHALOT_EXPECTS(it != d.live.end(), backend_error,
                   "simulated device: free of {:#x}, which is not a live segment", addr);
  CACHALOT_EXPECTS(it->second == bytes, backend_error,
                   "simulated device: free of {:#x} with size {} but it has {}", addr, bytes,
                   it->second);
  if (!d.captures.allow_conflicting()) fail_capture("free_segment (cudaFree)");
  d.clock.charge(device_call::segment_free, bytes);  // and the device sync it implies
  if (d.inject(sim_op::free_segment)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of free_segment({:#x})", addr);
  }
  if (d.opts.host_backing) {
    madvise(ptr, d.placed(bytes), MADV_DONTNEED);
    mprotect(ptr, d.placed(bytes), PROT_NONE);
  }
  d.live.erase(it);
  d.free_ranges.give(addr, d.placed(bytes));
  d.counters.used_bytes -= d.charged(bytes);
  ++d.counters.segment_frees;
  --d.counters.live_segments;
}

event_t simulated_device::create_event() {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  d.clock.charge(device_call::event_create);
  if (d.inject(sim_op::create_event)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of create_event");
  }
  auto* e = new sim_event;
  d.events.insert(e);
  ++d.counters.event_creates;
  ++d.counters.live_events;
  return e;
}

void simulated_device::destroy_event(event_t event) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  sim_event* e = d.event_of(event);
  d.events.erase(e);
  delete e;
  ++d.counters.event_destroys;
  --d.counters.live_events;
}

void simulated_device::record_event(event_t event, stream_t stream) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  sim_event* e = d.event_of(event);
  d.clock.charge(device_call::event_record);
  if (d.inject(sim_op::record_event)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of record_event");
  }
  sim_stream& s = d.streams[stream];
  e->stream = stream;
  e->seq = ++s.submitted;
  e->recorded = true;
  e->captured = stream != nullptr && d.captures.capturing(stream);
  if (!s.held) s.completed = s.submitted;
  ++d.counters.event_records;
}

bool simulated_device::query_event(event_t event) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  sim_event* e = d.event_of(event);
  ++d.counters.event_queries;
  d.clock.charge(device_call::event_query);
  if (d.inject(sim_op::query_event)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of query_event");
  }
  if (e->captured ? !d.captures.allow_captured_event(e->stream)
                  : !d.captures.allow_unsafe(t_capture_mode)) {
    fail_capture("query_event (cudaEventQuery)");
  }
  return d.complete(e);
}

void simulated_device::synchronize_event(event_t event) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  sim_event* e = d.event_of(event);
  ++d.counters.event_syncs;
  d.clock.charge(device_call::event_sync);
  if (d.inject(sim_op::synchronize)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of synchronize_event");
  }
  if (e->captured ? !d.captures.allow_captured_event(e->stream)
                  : !d.captures.allow_unsafe(t_capture_mode)) {
    fail_capture("synchronize_event (cudaEventSynchronize)");
  }
  if (!d.complete(e)) {  // waiting for the held work means it finishes
    sim_stream& s = d.streams[e->stream];
    s.completed = s.submitted;
    s.held = false;
  }
}

void simulated_device::synchronize_device() {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  ++d.counters.device_syncs;
  d.clock.charge(device_call::device_sync);
  if (d.inject(sim_op::synchronize)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of synchronize_device");
  }
  if (!d.captures.allow_conflicting()) fail_capture("synchronize_device");
  for (auto& [stream, s] : d.streams) {
    s.completed = s.submitted;
    s.held = false;
  }
}

device_memory_info simulated_device::memory_info() {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  ++d.counters.memory_info_calls;
  return device_memory_info{d.opts.capacity, d.free_bytes()};
}

bool simulated_device::supports_virtual_memory() const {
  return impl_->opts.virtual_memory;
}
std::size_t simulated_device::vm_granularity() const {
  return impl_->opts.vm_granularity;
}
std::size_t simulated_device::vm_address_space() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->vm->space();
}

void* simulated_device::reserve_address_range(std::size_t bytes) {
  impl& d = *impl_;
  if (!d.opts.virtual_memory) return device_backend::reserve_address_range(bytes);
  std::lock_guard<std::mutex> lock(d.mutex);
  if (!d.captures.allow_unsafe(t_capture_mode)) fail_capture("reserve_address_range");
  d.vm->check_reserve(bytes);
  d.clock.charge(device_call::range_reserve, bytes);
  const std::uintptr_t base = d.inject(sim_op::reserve_address_range) ? 0 : d.vm->reserve(bytes);
  if (base == 0) {
    ++d.counters.failed_range_reserves;
    return nullptr;
  }
  ++d.counters.range_reserves;
  ++d.counters.live_ranges;
  d.counters.reserved_range_bytes += bytes;
  return reinterpret_cast<void*>(base);
}

void simulated_device::release_address_range(void* base, std::size_t bytes) {
  impl& d = *impl_;
  if (!d.opts.virtual_memory) return device_backend::release_address_range(base, bytes);
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  if (!d.captures.allow_conflicting()) fail_capture("release_address_range (cuMemAddressFree)");
  d.vm->check_release(addr, bytes);
  d.clock.charge(device_call::range_release, bytes);
  if (d.inject(sim_op::release_address_range)) {
    CACHALOT_FAIL(backend_error,
                  "simulated device: injected failure of release_address_range({:#x}, {} B)", addr,
                  bytes);
  }
  d.vm->release(addr, bytes);
  ++d.counters.range_releases;
  --d.counters.live_ranges;
  d.counters.reserved_range_bytes -= bytes;
}

bool simulated_device::map_chunk(void* addr, std::size_t bytes) {
  impl& d = *impl_;
  if (!d.opts.virtual_memory) return device_backend::map_chunk(addr, bytes);
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(addr);
  if (!d.captures.allow_unsafe(t_capture_mode)) fail_capture("map_chunk (cuMemCreate/cuMemMap)");
  d.vm->check_map(at, bytes);
  d.clock.charge(device_call::chunk_create, bytes);  // a failed create is the only call
  if (d.inject(sim_op::map_chunk) || bytes > d.free_bytes()) {
    ++d.counters.failed_chunk_maps;
    return false;
  }
  d.vm->map(at, bytes);
  d.clock.charge(device_call::chunk_map, bytes);
  d.clock.charge(device_call::chunk_access, bytes);
  ++d.counters.chunk_maps;
  ++d.counters.live_chunks;
  d.counters.mapped_bytes += bytes;
  return true;
}

void simulated_device::unmap_chunk(void* addr, std::size_t bytes) {
  impl& d = *impl_;
  if (!d.opts.virtual_memory) return device_backend::unmap_chunk(addr, bytes);
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto at = reinterpret_cast<std::uintptr_t>(addr);
  if (!d.captures.allow_conflicting()) fail_capture("unmap_chunk (cuMemUnmap)");
  d.vm->check_unmap(at, bytes);
  d.clock.charge(device_call::chunk_unmap, bytes);  // a failed unmap is the only call
  if (d.inject(sim_op::unmap_chunk)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of unmap_chunk({:#x}, {} B)",
                  at, bytes);
  }
  d.vm->unmap(at, bytes);
  d.clock.charge(device_call::chunk_release, bytes);
  ++d.counters.chunk_unmaps;
  --d.counters.live_chunks;
  d.counters.mapped_bytes -= bytes;
}

bool simulated_device::supports_host_copies() const {
  return true;
}

void* simulated_device::allocate_host(std::size_t bytes) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  CACHALOT_EXPECTS(bytes != 0, backend_error, "simulated device: allocate_host of 0 bytes");
  if (!d.captures.allow_unsafe(t_capture_mode)) fail_capture("allocate_host (cuMemHostAlloc)");
  d.clock.charge(device_call::host_alloc, bytes);
  const std::size_t cap = d.opts.host_capacity;
  if (d.inject(sim_op::allocate_host) ||
      (cap != 0 && (bytes > cap || d.counters.host_bytes > cap - bytes))) {
    ++d.counters.failed_host_allocs;
    return nullptr;
  }
  std::uintptr_t addr = 0;
  if (d.opts.host_backing) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      ++d.counters.failed_host_allocs;
      return nullptr;
    }
    addr = reinterpret_cast<std::uintptr_t>(m);
  } else {
    addr = d.next_host;
    d.next_host += (bytes + d.page - 1) / d.page * d.page + d.page;  // a gap between them
  }
  d.host.emplace(addr, bytes);
  d.counters.host_bytes += bytes;
  ++d.counters.host_allocs;
  ++d.counters.live_host_allocs;
  return reinterpret_cast<void*>(addr);
}

void simulated_device::free_host(void* ptr, std::size_t bytes) {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  const auto it = d.host.find(addr);
  CACHALOT_EXPECTS(it != d.host.end(), backend_error,
                   "simulated device: free_host of {:#x}, which is no pinned host allocation",
                   addr);
  CACHALOT_EXPECTS(it->second == bytes, backend_error,
                   "simulated device: free_host of {:#x} with size {} but it has {}", addr, bytes,
                   it->second);
  if (!d.captures.allow_conflicting()) fail_capture("free_host (cuMemFreeHost)");
  d.clock.charge(device_call::host_free, bytes);  // and the device sync it implies
  if (d.inject(sim_op::free_host)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of free_host({:#x})", addr);
  }
  if (d.opts.host_backing) munmap(ptr, bytes);
  d.host.erase(it);
  d.counters.host_bytes -= bytes;
  ++d.counters.host_frees;
  --d.counters.live_host_allocs;
}

void simulated_device::impl::copy(std::uintptr_t host_at, std::uintptr_t device_at,
                                  std::size_t bytes, stream_t stream, bool to_host) {
  const char* call = to_host ? "copy_to_host" : "copy_to_device";
  CACHALOT_EXPECTS(bytes != 0 && host_at != 0 && device_at != 0, backend_error,
                   "simulated device: {} of {} B between {:#x} (host) and {:#x} (device)", call,
                   bytes, host_at, device_at);
  CACHALOT_EXPECTS(host_of(host_at, bytes) != host.end(), backend_error,
                   "simulated device: {}: [{:#x}, +{} B) is not inside one pinned host allocation",
                   call, host_at, bytes);
  CACHALOT_EXPECTS(device_span(device_at, bytes), backend_error,
                   "simulated device: {}: [{:#x}, +{} B) is not mapped device memory", call,
                   device_at, bytes);
  if (stream != nullptr && captures.capturing(stream)) {
    fail_capture(to_host ? "copy_to_host (cuMemcpyDtoHAsync) on a capturing stream"
                         : "copy_to_device (cuMemcpyHtoDAsync) on a capturing stream");
  }
  clock.charge(device_call::copy, bytes);
  if (inject(sim_op::copy)) {
    CACHALOT_FAIL(backend_error, "simulated device: injected failure of {}({:#x}, {} B)", call,
                  device_at, bytes);
  }
  if (opts.host_backing) {
    auto* h = reinterpret_cast<void*>(host_at);
    auto* dv = reinterpret_cast<void*>(device_at);
    std::memcpy(to_host ? h : dv, to_host ? dv : h, bytes);
  }
  ++(to_host ? counters.copies_to_host : counters.copies_to_device);
  counters.copied_bytes += bytes;
}

void simulated_device::copy_to_host(void* dst, const void* src, std::size_t bytes,
                                    stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->copy(reinterpret_cast<std::uintptr_t>(dst), reinterpret_cast<std::uintptr_t>(src), bytes,
              stream, true);
}

void simulated_device::copy_to_device(void* dst, const void* src, std::size_t bytes,
                                      stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->copy(reinterpret_cast<std::uintptr_t>(src), reinterpret_cast<std::uintptr_t>(dst), bytes,
              stream, false);
}

void simulated_device::hold_stream(stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->streams[stream].held = true;
}

void simulated_device::release_stream(stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  sim_stream& s = impl_->streams[stream];
  s.completed = s.submitted;
  s.held = false;
}

bool simulated_device::is_held(stream_t stream) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->streams.find(stream);
  return it != impl_->streams.end() && it->second.held;
}

void simulated_device::begin_capture(stream_t stream, capture_mode mode) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  CACHALOT_EXPECTS(stream != nullptr, invalid_argument,
                   "simulated device: the legacy stream cannot be captured");
  CACHALOT_EXPECTS(impl_->captures.begin(stream, mode), invalid_argument,
                   "simulated device: stream {} captures already", detail::ptr(stream));
}

bool simulated_device::end_capture(stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const int r = impl_->captures.end(stream);
  CACHALOT_EXPECTS(r >= 0, invalid_argument, "simulated device: stream {} does not capture",
                   detail::ptr(stream));
  return r == 1;
}

std::uint64_t simulated_device::capture_violations() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->captures.violations();
}

bool simulated_device::is_capturing(stream_t stream) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->captures.capturing(stream);
}

capture_mode simulated_device::exchange_capture_mode(capture_mode mode) {
  const capture_mode previous = t_capture_mode;
  t_capture_mode = mode;
  return previous;
}

void simulated_device::fail_nth(sim_op op, std::uint64_t n) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  fault_plan& f = impl_->faults[static_cast<std::size_t>(op)];
  f.fail_at = n == 0 ? 0 : f.calls + n;
}

void simulated_device::fail_always(sim_op op, bool on) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->faults[static_cast<std::size_t>(op)].always = on;
}

std::uint64_t simulated_device::calls(sim_op op) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->faults[static_cast<std::size_t>(op)].calls;
}

sim_counters simulated_device::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  sim_counters c = impl_->counters;
  const device_call_stats s = impl_->clock.stats();
  c.device_ns = s.total_ns();
  c.implied_syncs = s.implied_syncs;
  return c;
}

device_call_stats simulated_device::call_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->clock.stats();
}

bool simulated_device::is_live(const void* ptr, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = impl_->live.upper_bound(addr);
  if (it == impl_->live.begin()) return false;
  --it;
  return addr >= it->first && addr + bytes <= it->first + it->second;
}

bool simulated_device::is_mapped(const void* ptr, std::size_t bytes) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->vm->is_mapped(reinterpret_cast<std::uintptr_t>(ptr), bytes);
}

}  // namespace cachalot
