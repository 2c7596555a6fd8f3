// The public allocator: a thin facade over detail::engine.
#include "cachalot/allocator.hpp"

#include "detail/engine.hpp"

namespace cachalot {

allocator::allocator(const config& cfg) : allocator(cfg, make_backend(cfg)) {}

allocator::allocator(const config& cfg, std::shared_ptr<device_backend> backend)
    : engine_(std::make_unique<detail::engine>(cfg, std::move(backend))) {}

allocator::~allocator() = default;

void* allocator::allocate(std::size_t bytes, stream_t stream) {
  return engine_->allocate(bytes, stream);
}
void allocator::deallocate(void* ptr) {
  engine_->deallocate(ptr, nullptr, false);
}
void allocator::deallocate(void* ptr, stream_t stream) {
  engine_->deallocate(ptr, stream, true);
}
void allocator::deallocate(void* ptr, std::size_t size, stream_t stream) {
  engine_->deallocate_sized(ptr, size, stream);
}
void allocator::record_stream(void* ptr, stream_t stream) {
  engine_->record_stream(ptr, stream);
}
void allocator::empty_cache() {
  engine_->empty_cache();
}
std::size_t allocator::trim(std::size_t target_reserved_bytes) {
  return engine_->trim(target_reserved_bytes);
}
void allocator::process_events() {
  engine_->process_events();
}
memory_stats allocator::stats() const {
  return engine_->stats();
}
void allocator::reset_peak_stats() {
  engine_->reset_peak_stats();
}
memory_snapshot allocator::snapshot() const {
  return engine_->snapshot();
}
std::string allocator::memory_summary() const {
  return engine_->memory_summary();
}
std::size_t allocator::allocation_size(const void* ptr) const {
  return engine_->allocation_size(ptr);
}
bool allocator::owns(const void* ptr) const noexcept {
  return engine_->owns(ptr);
}
const config& allocator::get_config() const noexcept {
  return engine_->get_config();
}
device_backend& allocator::backend() const noexcept {
  return engine_->backend();
}
void allocator::set_oom_callback(oom_callback callback, unsigned max_retries) {
  engine_->set_oom_callback(std::move(callback), max_retries);
}

}  // namespace cachalot
