// faulty_backend (see include/cachalot/fault_injection.hpp): a forwarding backend whose calls
// pass through trip(), which counts them and decides, under the mutex, whether this one fails.
// The wrapped backend is called outside the mutex, so a slow device call never blocks others.
#include "cachalot/fault_injection.hpp"

#include "cachalot/errors.hpp"
#include "detail/checks.hpp"

namespace cachalot {

const char* fault_op_name(fault_op op) noexcept {
  switch (op) {
    case fault_op::allocate_segment:
      return "allocate_segment";
    case fault_op::free_segment:
      return "free_segment";
    case fault_op::create_event:
      return "create_event";
    case fault_op::record_event:
      return "record_event";
    case fault_op::query_event:
      return "query_event";
    case fault_op::synchronize:
      return "synchronize";
    case fault_op::memory_info:
      return "memory_info";
    case fault_op::reserve_address_range:
      return "reserve_address_range";
    case fault_op::release_address_range:
      return "release_address_range";
    case fault_op::map_chunk:
      return "map_chunk";
    case fault_op::unmap_chunk:
      return "unmap_chunk";
    case fault_op::allocate_host:
      return "allocate_host";
    case fault_op::free_host:
      return "free_host";
    case fault_op::copy:
      return "copy";
  }
  return "unknown";
}

faulty_backend::faulty_backend(std::shared_ptr<device_backend> inner) : inner_(std::move(inner)) {
  CACHALOT_EXPECTS(inner_ != nullptr, invalid_argument, "faulty_backend: wrapped backend is null");
}

void faulty_backend::fail_nth(fault_op op, std::uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  plan& p = plans_[static_cast<std::size_t>(op)];
  p.fail_at = n == 0 ? 0 : p.calls + n;
}

void faulty_backend::fail_always(fault_op op, bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  plans_[static_cast<std::size_t>(op)].always = on;
}

void faulty_backend::set_allocate_mode(fault_mode mode) {
  set_mode(fault_op::allocate_segment, mode);
}

void faulty_backend::set_mode(fault_op op, fault_mode mode) {
  CACHALOT_EXPECTS(op == fault_op::allocate_segment || op == fault_op::reserve_address_range ||
                       op == fault_op::map_chunk || op == fault_op::allocate_host,
                   invalid_argument,
                   "faulty_backend: {} cannot run out; it always fails by throwing",
                   fault_op_name(op));
  std::lock_guard<std::mutex> lock(mutex_);
  modes_[static_cast<std::size_t>(op)] = mode;
}

void faulty_backend::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (plan& p : plans_) {
    p.fail_at = 0;
    p.always = false;
  }
}

std::uint64_t faulty_backend::calls(fault_op op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plans_[static_cast<std::size_t>(op)].calls;
}

std::uint64_t faulty_backend::injected() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return injected_;
}

bool faulty_backend::trip(fault_op op) {
  std::lock_guard<std::mutex> lock(mutex_);
  plan& p = plans_[static_cast<std::size_t>(op)];
  ++p.calls;
  const bool nth = p.fail_at != 0 && p.calls == p.fail_at;
  if (nth) p.fail_at = 0;
  if (!nth && !p.always) return false;
  ++injected_;
  return true;
}

void faulty_backend::trip_or_throw(fault_op op) {
  if (trip(op)) {
    CACHALOT_FAIL(backend_error, "fault injection: {} failed on purpose ({} backend)",
                  fault_op_name(op), inner_->name());
  }
}

bool faulty_backend::trip_soft(fault_op op) {
  if (!trip(op)) return false;
  fault_mode mode;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mode = modes_[static_cast<std::size_t>(op)];
  }
  if (mode == fault_mode::out_of_memory) return true;
  CACHALOT_FAIL(backend_error, "fault injection: {} failed on purpose ({} backend)",
                fault_op_name(op), inner_->name());
}

std::string faulty_backend::name() const {
  return inner_->name();
}
int faulty_backend::device() const {
  return inner_->device();
}

void* faulty_backend::allocate_segment(std::size_t bytes, stream_t stream) {
  if (trip_soft(fault_op::allocate_segment)) return nullptr;
  return inner_->allocate_segment(bytes, stream);
}

void faulty_backend::free_segment(void* ptr, std::size_t bytes) {
  trip_or_throw(fault_op::free_segment);
  inner_->free_segment(ptr, bytes);
}

event_t faulty_backend::create_event() {
  trip_or_throw(fault_op::create_event);
  return inner_->create_event();
}

void faulty_backend::destroy_event(event_t event) {
  inner_->destroy_event(event);
}

void faulty_backend::record_event(event_t event, stream_t stream) {
  trip_or_throw(fault_op::record_event);
  inner_->record_event(event, stream);
}

bool faulty_backend::query_event(event_t event) {
  trip_or_throw(fault_op::query_event);
  return inner_->query_event(event);
}

void faulty_backend::synchronize_event(event_t event) {
  trip_or_throw(fault_op::synchronize);
  inner_->synchronize_event(event);
}

void faulty_backend::synchronize_device() {
  trip_or_throw(fault_op::synchronize);
  inner_->synchronize_device();
}

device_memory_info faulty_backend::memory_info() {
  trip_or_throw(fault_op::memory_info);
  return inner_->memory_info();
}

device_call_stats faulty_backend::call_stats() const {
  return inner_->call_stats();
}

bool faulty_backend::is_capturing(stream_t stream) {
  return inner_->is_capturing(stream);
}
capture_mode faulty_backend::exchange_capture_mode(capture_mode mode) {
  return inner_->exchange_capture_mode(mode);
}
std::size_t faulty_backend::segment_alignment() const {
  return inner_->segment_alignment();
}
bool faulty_backend::host_accessible() const {
  return inner_->host_accessible();
}
bool faulty_backend::supports_virtual_memory() const {
  return inner_->supports_virtual_memory();
}
std::size_t faulty_backend::vm_granularity() const {
  return inner_->vm_granularity();
}
void* faulty_backend::reserve_address_range(std::size_t bytes) {
  if (trip_soft(fault_op::reserve_address_range)) return nullptr;
  return inner_->reserve_address_range(bytes);
}
void faulty_backend::release_address_range(void* base, std::size_t bytes) {
  trip_or_throw(fault_op::release_address_range);
  inner_->release_address_range(base, bytes);
}
bool faulty_backend::map_chunk(void* addr, std::size_t bytes) {
  if (trip_soft(fault_op::map_chunk)) return false;
  return inner_->map_chunk(addr, bytes);
}
void faulty_backend::unmap_chunk(void* addr, std::size_t bytes) {
  trip_or_throw(fault_op::unmap_chunk);
  inner_->unmap_chunk(addr, bytes);
}
bool faulty_backend::supports_host_copies() const {
  return inner_->supports_host_copies();
}
void* faulty_backend::allocate_host(std::size_t bytes) {
  if (trip_soft(fault_op::allocate_host)) return nullptr;
  return inner_->allocate_host(bytes);
}
void faulty_backend::free_host(void* ptr, std::size_t bytes) {
  trip_or_throw(fault_op::free_host);
  inner_->free_host(ptr, bytes);
}
void faulty_backend::copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  trip_or_throw(fault_op::copy);
  inner_->copy_to_host(dst, src, bytes, stream);
}
void faulty_backend::copy_to_device(void* dst, const void* src, std::size_t bytes,
                                    stream_t stream) {
  trip_or_throw(fault_op::copy);
  inner_->copy_to_device(dst, src, bytes, stream);
}

}  // namespace cachalot
