// Test support: a backend that forwards every call to another and runs a test's hook inside
// chosen calls. A hook runs while the engine is inside its cold path, between the steps of a
// free, a release or a growth, so that a test can put another thread's call (or a stats read)
// exactly into a window that a race would need luck to hit.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cachalot/backend.hpp"

namespace cachalot::testing {

/// Forwards to `inner`; each hook that is set runs inside the call it names.
class hooked_backend final : public device_backend {
 public:
  explicit hooked_backend(std::shared_ptr<device_backend> inner) : inner_(std::move(inner)) {}

  std::function<void(void*, std::size_t)> on_free_segment;     ///< before free_segment
  std::function<void(void*, std::size_t)> after_free_segment;  ///< after a successful one
  std::function<void(event_t, stream_t)> on_record_event;      ///< before record_event
  std::function<void(std::size_t)> on_allocate_segment;        ///< before allocate_segment
  std::function<void(void*, std::size_t)> on_map_chunk;        ///< before map_chunk
  std::function<void(void*, std::size_t)> on_unmap_chunk;      ///< before unmap_chunk
  std::function<void(void*, std::size_t)> on_release_range;    ///< before release_address_range
  std::function<bool(stream_t)> capturing;                     ///< replaces is_capturing when set
  std::function<void(void*, std::size_t)> on_copy;             ///< before copy_to_host/_device

  std::string name() const override { return inner_->name(); }
  int device() const override { return inner_->device(); }
  void* allocate_segment(std::size_t bytes, stream_t stream) override {
    if (on_allocate_segment) on_allocate_segment(bytes);
    return inner_->allocate_segment(bytes, stream);
  }
  void free_segment(void* ptr, std::size_t bytes) override {
    if (on_free_segment) on_free_segment(ptr, bytes);
    inner_->free_segment(ptr, bytes);
    if (after_free_segment) after_free_segment(ptr, bytes);
  }
  event_t create_event() override { return inner_->create_event(); }
  void destroy_event(event_t event) override { inner_->destroy_event(event); }
  void record_event(event_t event, stream_t stream) override {
    if (on_record_event) on_record_event(event, stream);
    inner_->record_event(event, stream);
  }
  bool query_event(event_t event) override { return inner_->query_event(event); }
  void synchronize_event(event_t event) override { inner_->synchronize_event(event); }
  void synchronize_device() override { inner_->synchronize_device(); }
  device_memory_info memory_info() override { return inner_->memory_info(); }
  device_call_stats call_stats() const override { return inner_->call_stats(); }
  bool is_capturing(stream_t stream) override {
    return capturing ? capturing(stream) : inner_->is_capturing(stream);
  }
  capture_mode exchange_capture_mode(capture_mode mode) override {
    return inner_->exchange_capture_mode(mode);
  }
  std::size_t segment_alignment() const override { return inner_->segment_alignment(); }
  bool host_accessible() const override { return inner_->host_accessible(); }
  bool supports_virtual_memory() const override { return inner_->supports_virtual_memory(); }
  std::size_t vm_granularity() const override { return inner_->vm_granularity(); }
  void* reserve_address_range(std::size_t bytes) override {
    return inner_->reserve_address_range(bytes);
  }
  void release_address_range(void* base, std::size_t bytes) override {
    if (on_release_range) on_release_range(base, bytes);
    inner_->release_address_range(base, bytes);
  }
  bool map_chunk(void* addr, std::size_t bytes) override {
    if (on_map_chunk) on_map_chunk(addr, bytes);
    return inner_->map_chunk(addr, bytes);
  }
  void unmap_chunk(void* addr, std::size_t bytes) override {
    if (on_unmap_chunk) on_unmap_chunk(addr, bytes);
    inner_->unmap_chunk(addr, bytes);
  }
  bool supports_host_copies() const override { return inner_->supports_host_copies(); }
  void* allocate_host(std::size_t bytes) override { return inner_->allocate_host(bytes); }
  void free_host(void* ptr, std::size_t bytes) override { inner_->free_host(ptr, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream) override {
    if (on_copy) on_copy(dst, bytes);
    inner_->copy_to_host(dst, src, bytes, stream);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream) override {
    if (on_copy) on_copy(dst, bytes);
    inner_->copy_to_device(dst, src, bytes, stream);
  }

 private:
  std::shared_ptr<device_backend> inner_;
};

}  // namespace cachalot::testing
