// The public allocator: a thin facade over detail::engine.
#include "cachalot/allocator.hpp"

#include "detail/engine.hpp"
#include "detail/pool_sleep.hpp"

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
  memory_stats s = engine_->stats();
  s.device = engine_->backend().call_stats();
  return s;
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
pool_id allocator::create_pool(const pool_options& options) {
  return engine_->create_pool(options);
}
void allocator::retain_pool(pool_id pool) {
  engine_->retain_pool(pool);
}
void allocator::release_pool(pool_id pool) {
  engine_->release_pool(pool);
}
void allocator::begin_allocate_to_pool(pool_id pool, stream_t stream) {
  engine_->begin_allocate_to_pool(pool, stream, stream_filter{});
}
void allocator::begin_allocate_to_pool(pool_id pool, stream_filter filter) {
  if (!filter) {
    throw invalid_argument("begin_allocate_to_pool: the stream filter is empty", __FILE__,
                           __LINE__);
  }
  engine_->begin_allocate_to_pool(pool, nullptr, std::move(filter));
}
void allocator::end_allocate_to_pool(pool_id pool) {
  engine_->end_allocate_to_pool(pool);
}
void* allocator::allocate(std::size_t bytes, stream_t stream, pool_id pool) {
  return engine_->allocate(bytes, stream, pool);
}
pool_id allocator::pool_of(const void* ptr) const {
  return engine_->pool_of(ptr);
}
memory_stats allocator::stats(pool_id pool) const {
  memory_stats s = engine_->stats(pool);
  s.device = engine_->backend().call_stats();  // the device's, like num_device_syncs
  return s;
}
std::vector<pool_info> allocator::pools() const {
  return engine_->pools();
}
bool allocator::sleep(pool_id pool, sleep_mode mode) {
  return engine_->sleep_control().sleep(pool, mode);
}
bool allocator::wake(pool_id pool) {
  return engine_->sleep_control().wake(pool);
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
