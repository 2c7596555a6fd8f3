// The C shim over cachalot::allocator. Every entry point catches every exception and turns it
// into a status plus this thread's last-error message: no C++ exception crosses the boundary.
// A handle is a small tombstone-able record: cachalot_destroy frees the allocator but keeps the
// record, marked dead, so that a later call through a stale handle is reported as an error
// instead of touching freed memory. A default allocator's handle (cachalot_default_handle) owns
// nothing: one per device, made once, never freed, and cachalot_destroy leaves it alone.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "cachalot/allocator.hpp"
#include "cachalot/cachalot.h"
#include "cachalot/default.hpp"
#include "cachalot/version.h"
#include "detail/c_error.hpp"
#include "detail/snapshot_json.hpp"

struct cachalot_allocator {
  std::uint64_t magic;
  std::unique_ptr<cachalot::allocator> owned;  // null in a default allocator's handle
  cachalot::allocator* impl;                   // owned.get(), or the default allocator
};

namespace cachalot::detail {
namespace {
constexpr std::uint64_t live_magic = 0xCAC4A10751A7E5ULL;
constexpr std::uint64_t dead_magic = 0xDEADCAC4A10DEADULL;

// Destroyed handles stay allocated (and reachable, for leak checkers) for the process' life.
std::mutex& tombstone_mutex() {
  static std::mutex m;
  return m;
}
std::vector<cachalot_allocator*>& tombstones() {
  static auto* v = new std::vector<cachalot_allocator*>();
  return *v;
}

cachalot_status to_c(status s) {
  switch (s) {
    case status::success:
      return CACHALOT_SUCCESS;
    case status::out_of_memory:
      return CACHALOT_ERROR_OUT_OF_MEMORY;
    case status::invalid_argument:
      return CACHALOT_ERROR_INVALID_ARGUMENT;
    case status::invalid_pointer:
      return CACHALOT_ERROR_INVALID_POINTER;
    case status::backend:
      return CACHALOT_ERROR_BACKEND;
    case status::not_supported:
      return CACHALOT_ERROR_NOT_SUPPORTED;
    case status::pool_asleep:
      return CACHALOT_ERROR_POOL_ASLEEP;
  }
  return CACHALOT_ERROR_BACKEND;
}

cachalot_status fail(cachalot_status s, const char* what) {
  set_last_error(what);
  return s;
}

template <class F>
cachalot_status guarded(F&& f) noexcept {
  try {
    f();
    return CACHALOT_SUCCESS;
  } catch (...) {
    return status_of_current_exception(nullptr);
  }
}

// Stores "`fn`: `what`" as the last error and returns INVALID_ARGUMENT; never throws.
cachalot_status bad_handle(const char* fn, const char* what) noexcept {
  try {
    set_last_error(std::string(fn) + ": " + what);
  } catch (...) {  // no memory for the prefixed text: the bare reason still says it
    set_last_error(what);
  }
  return CACHALOT_ERROR_INVALID_ARGUMENT;
}

template <class F>
cachalot_status with(cachalot_allocator* a, const char* fn, F&& f) noexcept {
  if (a == nullptr) return bad_handle(fn, "allocator is NULL");
  if (a->magic != live_magic) {
    return bad_handle(fn, "allocator was destroyed (or is not an allocator)");
  }
  return guarded([&] { f(*a->impl); });
}

void fill(cachalot_stat& out, const stat& s) {
  out = cachalot_stat{s.current, s.peak, s.allocated, s.freed};
}

void fill(cachalot_pool_stats& out, const pool_stats& s) {
  fill(out.all, s.all);
  fill(out.small_pool, s.small);
  fill(out.large_pool, s.large);
}

// The device fields: totals, then one cachalot_device_call per kind, in device_call order.
void fill_device(cachalot_stats& out, const device_call_stats& d) {
  static constexpr cachalot_device_call cachalot_stats::*by_kind[] = {
      &cachalot_stats::call_segment_alloc, &cachalot_stats::call_segment_free,
      &cachalot_stats::call_range_reserve, &cachalot_stats::call_range_release,
      &cachalot_stats::call_chunk_create,  &cachalot_stats::call_chunk_map,
      &cachalot_stats::call_chunk_access,  &cachalot_stats::call_chunk_unmap,
      &cachalot_stats::call_chunk_release, &cachalot_stats::call_event_create,
      &cachalot_stats::call_event_record,  &cachalot_stats::call_event_query,
      &cachalot_stats::call_event_sync,    &cachalot_stats::call_stream_sync,
      &cachalot_stats::call_device_sync,   &cachalot_stats::call_copy,
      &cachalot_stats::call_host_alloc,    &cachalot_stats::call_host_free};
  static_assert(std::size(by_kind) == device_call_count, "one field per device_call");
  static_assert(static_cast<int>(device_timing::modeled) == CACHALOT_DEVICE_TIMING_MODELED &&
                    static_cast<int>(device_timing::measured) == CACHALOT_DEVICE_TIMING_MEASURED &&
                    static_cast<int>(device_timing::none) == CACHALOT_DEVICE_TIMING_NONE,
                "timing values");
  out.device_timing = static_cast<std::uint64_t>(d.timing);
  out.device_ns = d.total_ns();
  out.device_calls = d.total_calls();
  out.device_syncs = d.syncs();
  out.device_implied_syncs = d.implied_syncs;
  out.device_implied_sync_ns = d.implied_sync_ns;
  for (std::size_t i = 0; i < device_call_count; ++i) out.*by_kind[i] = {d.calls[i], d.ns[i]};
}

// The sleep fields (memory pools that sleep and wake).
void fill_sleep(cachalot_stats& out, const sleep_stats& s) {
  out.sleep_pools_asleep = s.pools_asleep;
  out.sleep_bytes_asleep = s.bytes_asleep;
  out.sleep_bytes_offloaded = s.bytes_offloaded;
  out.sleep_bytes_held = s.bytes_held;
  out.sleep_num_sleeps = s.num_sleeps;
  out.sleep_num_pressure_sleeps = s.num_pressure_sleeps;
  out.sleep_num_wakes = s.num_wakes;
  out.sleep_num_failed_sleeps = s.num_failed_sleeps;
  out.sleep_num_failed_wakes = s.num_failed_wakes;
  out.sleep_ns = s.sleep_ns;
  out.wake_ns = s.wake_ns;
  out.sleep_bytes_slept = s.bytes_slept;
  out.sleep_bytes_woken = s.bytes_woken;
  out.sleep_bytes_copied_out = s.bytes_copied_out;
  out.sleep_bytes_copied_in = s.bytes_copied_in;
}

// Every field this library knows, `size` included.
cachalot_stats full_stats(const memory_stats& s, std::size_t max_split_size) {
  cachalot_stats out{};
  out.size = sizeof(cachalot_stats);
  fill(out.requested_bytes, s.requested_bytes);
  fill(out.allocated_bytes, s.allocated_bytes);
  fill(out.reserved_bytes, s.reserved_bytes);
  fill(out.active_bytes, s.active_bytes);
  fill(out.inactive_split_bytes, s.inactive_split_bytes);
  fill(out.allocations, s.allocations);
  fill(out.segments, s.segments);
  out.num_allocs = s.num_allocs;
  out.num_frees = s.num_frees;
  out.num_segment_allocs = s.num_segment_allocs;
  out.num_segment_frees = s.num_segment_frees;
  out.num_ooms = s.num_ooms;
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_cache_flushes = s.num_cache_flushes;
  out.num_device_syncs = s.num_device_syncs;
  out.num_oversize_allocs = s.num_oversize_allocs;
  out.num_deferred_frees = s.num_deferred_frees;
  out.num_pending_blocks = s.num_pending_blocks;
  out.num_streams = s.num_streams;
  out.num_free_blocks = s.num_free_blocks;
  out.largest_free_block = s.largest_free_block;
  out.num_use_after_free_writes = s.num_use_after_free_writes;
  out.max_split_size = max_split_size == SIZE_MAX ? UINT64_MAX : max_split_size;
  out.num_chunk_maps = s.num_chunk_maps;
  out.num_chunk_unmaps = s.num_chunk_unmaps;
  fill_device(out, s.device);
  out.num_gc_syncs = s.num_gc_syncs;
  fill_sleep(out, s.sleep);
  return out;
}

}  // namespace

cachalot_status status_of_current_exception(const char* context) noexcept {
  const auto record = [context](cachalot_status s, const char* what) {
    try {
      set_last_error(context == nullptr ? std::string(what) : std::string(context) + ": " + what);
    } catch (...) {  // no memory for the message: the status still tells the caller
    }
    return s;
  };
  try {
    throw;
  } catch (const error& e) {
    return record(to_c(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return record(CACHALOT_ERROR_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return record(CACHALOT_ERROR_BACKEND, e.what());
  } catch (...) {
    return record(CACHALOT_ERROR_BACKEND, "unknown error");
  }
}

std::string snapshot_json(const allocator& a) {
  const device_call_stats calls = a.backend().call_stats();
  return snapshot_to_json(a.snapshot(), a.backend().device(), a.backend().name(), &calls);
}

cachalot_status copy_text(const std::string& text, char* buf, std::size_t capacity,
                          std::size_t* needed) {
  if (needed != nullptr) *needed = text.size() + 1;
  if (buf != nullptr && capacity != 0) {
    const std::size_t n = std::min(capacity - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return CACHALOT_SUCCESS;
}

void fill_stats(const memory_stats& s, std::size_t max_split_size, cachalot_stats* out) {
  if (out == nullptr) throw invalid_argument("stats output is NULL", __FILE__, __LINE__);
  const std::uint64_t size = out->size;
  if (size < sizeof(std::uint64_t) || size % sizeof(std::uint64_t) != 0) {
    throw invalid_argument("cachalot_stats.size is " + std::to_string(size) +
                               ": set it to sizeof(cachalot_stats) (cachalot_stats_init)",
                           __FILE__, __LINE__);
  }
  const cachalot_stats full = full_stats(s, max_split_size);
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(size, sizeof full));
  std::memcpy(out, &full, n);  // bytes past n, which this library does not know, stay as they are
  out->size = n;
}

void fill_stats(const allocator& a, cachalot_stats* out) {
  fill_stats(a.stats(), a.get_config().max_split_size, out);
}

// A sleep mode a C caller gave: any int may be stored in the enum in C, so its bytes are read
// as an int (loading a C++ enum outside its range of values would be undefined).
sleep_mode to_mode(const cachalot_sleep_mode& given, const char* fn) {
  static_assert(sizeof(cachalot_sleep_mode) == sizeof(int));
  int m = 0;
  std::memcpy(&m, &given, sizeof m);
  if (m != CACHALOT_SLEEP_OFFLOAD && m != CACHALOT_SLEEP_DISCARD) {
    throw invalid_argument(std::string(fn) + ": unknown sleep mode " + std::to_string(m) +
                               " (CACHALOT_SLEEP_OFFLOAD or CACHALOT_SLEEP_DISCARD)",
                           __FILE__, __LINE__);
  }
  static_assert(static_cast<int>(sleep_mode::offload) == CACHALOT_SLEEP_OFFLOAD &&
                    static_cast<int>(sleep_mode::discard) == CACHALOT_SLEEP_DISCARD &&
                    static_cast<int>(sleep_notice::requested) == CACHALOT_SLEEP_REQUESTED &&
                    static_cast<int>(sleep_notice::asleep) == CACHALOT_SLEEP_ASLEEP &&
                    static_cast<int>(sleep_notice::cancelled) == CACHALOT_SLEEP_CANCELLED,
                "C and C++ sleep values");
  return m == CACHALOT_SLEEP_OFFLOAD ? sleep_mode::offload : sleep_mode::discard;
}

// The C pool options as C++ options: fields beyond `size` keep their defaults.
pool_options to_options(const cachalot_pool_options& given) {
  cachalot_pool_options o{};
  std::memcpy(&o, &given, std::min(given.size, sizeof o));
  pool_options out;
  if (o.name != nullptr) out.name = o.name;
  // A C caller may store any int in the enum: read it as one (an invalid enum value is
  // undefined behaviour in C++).
  static_assert(sizeof(cachalot_pool_type) == sizeof(int));
  int type = 0;
  std::memcpy(&type, &o.type, sizeof type);
  if (type != CACHALOT_POOL_TENANT && type != CACHALOT_POOL_GRAPH) {
    throw invalid_argument("cachalot_pool_create: unknown pool type " + std::to_string(type),
                           __FILE__, __LINE__);
  }
  out.type = type == CACHALOT_POOL_GRAPH ? pool_type::graph : pool_type::tenant;
  out.limit = o.limit;
  out.guarantee = o.guarantee;
  out.priority = o.priority;
  out.declares_capture = o.never_captured == 0;
  if (o.reclaim != nullptr) {
    out.reclaim = [fn = o.reclaim, ctx = o.reclaim_context](pool_id p, std::size_t n) {
      return fn(ctx, p, n);
    };
  }
  out.sleepable = o.sleepable != 0;
  out.sleep_mode = to_mode(o.sleep_mode, "cachalot_pool_create");
  if (o.on_sleep != nullptr) {
    out.on_sleep = [fn = o.on_sleep, ctx = o.sleep_context](pool_id p, sleep_notice n,
                                                            std::size_t bytes) {
      return fn(ctx, p, static_cast<int>(n), bytes) != 0;
    };
  }
  return out;
}

}  // namespace cachalot::detail

using namespace cachalot;
using detail::with;

extern "C" {

cachalot_status cachalot_create(const char* config_text, cachalot_allocator** out) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_create: out is NULL");
  }
  *out = nullptr;
  return detail::guarded([&] {
    const config cfg = config::parse(config_text == nullptr ? "" : config_text);
    auto impl = std::make_unique<allocator>(cfg);
    cachalot_allocator* h = new cachalot_allocator{detail::live_magic, std::move(impl), nullptr};
    h->impl = h->owned.get();
    *out = h;
  });
}

void cachalot_destroy(cachalot_allocator* a) {
  if (a == nullptr || a->magic != detail::live_magic) return;
  if (a->owned == nullptr) return;  // a default allocator's handle: never destroyed
  a->magic = detail::dead_magic;
  try {
    a->owned.reset();
    a->impl = nullptr;
    std::lock_guard<std::mutex> lock(detail::tombstone_mutex());
    detail::tombstones().push_back(a);
  } catch (...) {
  }
}

cachalot_status cachalot_default_handle(int device, cachalot_allocator** out) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_default_handle: out is NULL");
  }
  *out = nullptr;
  return detail::guarded([&] {
    allocator& a = default_allocator(device);  // checks the device, creates it if needed
    // One handle per device, made once and never freed, like the default allocators.
    static std::mutex m;
    static cachalot_allocator* handles[max_default_devices] = {};
    std::lock_guard<std::mutex> lock(m);
    if (handles[device] == nullptr) {
      handles[device] = new cachalot_allocator{detail::live_magic, nullptr, &a};
    }
    *out = handles[device];
  });
}

cachalot_status cachalot_malloc(cachalot_allocator* a, void** out, size_t size, void* stream) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_malloc: out is NULL");
  }
  *out = nullptr;
  return with(a, "cachalot_malloc", [&](allocator& x) { *out = x.allocate(size, stream); });
}

cachalot_status cachalot_free(cachalot_allocator* a, void* ptr, void* stream) {
  return with(a, "cachalot_free", [&](allocator& x) { x.deallocate(ptr, stream); });
}

cachalot_status cachalot_free_sized(cachalot_allocator* a, void* ptr, size_t size, void* stream) {
  return with(a, "cachalot_free_sized", [&](allocator& x) { x.deallocate(ptr, size, stream); });
}

cachalot_status cachalot_record_stream(cachalot_allocator* a, void* ptr, void* stream) {
  return with(a, "cachalot_record_stream", [&](allocator& x) { x.record_stream(ptr, stream); });
}

cachalot_status cachalot_empty_cache(cachalot_allocator* a) {
  return with(a, "cachalot_empty_cache", [&](allocator& x) { x.empty_cache(); });
}

cachalot_status cachalot_trim(cachalot_allocator* a, size_t target_bytes) {
  return with(a, "cachalot_trim", [&](allocator& x) { x.trim(target_bytes); });
}

cachalot_status cachalot_get_stats(cachalot_allocator* a, cachalot_stats* out) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_get_stats: out is NULL");
  }
  return with(a, "cachalot_get_stats", [&](allocator& x) { detail::fill_stats(x, out); });
}

cachalot_status cachalot_reset_peak_stats(cachalot_allocator* a) {
  return with(a, "cachalot_reset_peak_stats", [&](allocator& x) { x.reset_peak_stats(); });
}

cachalot_status cachalot_memory_summary(cachalot_allocator* a, char* buf, size_t capacity,
                                        size_t* needed) {
  return with(a, "cachalot_memory_summary",
              [&](allocator& x) { detail::copy_text(x.memory_summary(), buf, capacity, needed); });
}

cachalot_status cachalot_memory_snapshot(cachalot_allocator* a, char* buf, size_t capacity,
                                         size_t* needed) {
  return with(a, "cachalot_memory_snapshot", [&](allocator& x) {
    detail::copy_text(detail::snapshot_json(x), buf, capacity, needed);
  });
}

const char* cachalot_status_string(cachalot_status s) {
  switch (s) {
    case CACHALOT_SUCCESS:
      return "CACHALOT_SUCCESS";
    case CACHALOT_ERROR_OUT_OF_MEMORY:
      return "CACHALOT_ERROR_OUT_OF_MEMORY";
    case CACHALOT_ERROR_INVALID_ARGUMENT:
      return "CACHALOT_ERROR_INVALID_ARGUMENT";
    case CACHALOT_ERROR_INVALID_POINTER:
      return "CACHALOT_ERROR_INVALID_POINTER";
    case CACHALOT_ERROR_BACKEND:
      return "CACHALOT_ERROR_BACKEND";
    case CACHALOT_ERROR_NOT_SUPPORTED:
      return "CACHALOT_ERROR_NOT_SUPPORTED";
    case CACHALOT_ERROR_POOL_ASLEEP:
      return "CACHALOT_ERROR_POOL_ASLEEP";
  }
  return "CACHALOT_UNKNOWN_STATUS";
}

const char* cachalot_last_error(void) {
  return detail::last_error_text();
}

const char* cachalot_version(void) {
  return CACHALOT_VERSION_STRING;
}

cachalot_status cachalot_set_oom_callback(cachalot_allocator* a, cachalot_oom_callback callback,
                                          void* user_data, unsigned max_retries) {
  return with(a, "cachalot_set_oom_callback", [&](allocator& x) {
    if (callback == nullptr) return x.set_oom_callback({}, 0);
    // A C callback cannot throw; if a C++ function registered here does, the exception ends in
    // the cachalot_malloc that called it (a status, like every error of the C API).
    x.set_oom_callback(
        [callback, user_data](std::size_t bytes, stream_t stream) {
          return callback(bytes, stream, user_data) != 0;
        },
        max_retries);
  });
}

cachalot_status cachalot_pool_create(cachalot_allocator* a, const cachalot_pool_options* options,
                                     cachalot_pool_id* out) {
  if (options == nullptr || out == nullptr || options->size == 0) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT,
                        "cachalot_pool_create: options or out is NULL, or options->size is 0");
  }
  return with(a, "cachalot_pool_create",
              [&](allocator& x) { *out = x.create_pool(detail::to_options(*options)); });
}

cachalot_status cachalot_pool_retain(cachalot_allocator* a, cachalot_pool_id pool) {
  return with(a, "cachalot_pool_retain", [&](allocator& x) { x.retain_pool(pool); });
}

cachalot_status cachalot_pool_release(cachalot_allocator* a, cachalot_pool_id pool) {
  return with(a, "cachalot_pool_release", [&](allocator& x) { x.release_pool(pool); });
}

cachalot_status cachalot_pool_begin_allocate(cachalot_allocator* a, cachalot_pool_id pool,
                                             void* stream) {
  return with(a, "cachalot_pool_begin_allocate",
              [&](allocator& x) { x.begin_allocate_to_pool(pool, stream); });
}

cachalot_status cachalot_pool_begin_allocate_filtered(cachalot_allocator* a, cachalot_pool_id pool,
                                                      cachalot_stream_filter filter,
                                                      void* context) {
  if (filter == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT,
                        "cachalot_pool_begin_allocate_filtered: filter is NULL");
  }
  return with(a, "cachalot_pool_begin_allocate_filtered", [&](allocator& x) {
    x.begin_allocate_to_pool(pool,
                             [filter, context](stream_t s) { return filter(context, s) != 0; });
  });
}

cachalot_status cachalot_pool_end_allocate(cachalot_allocator* a, cachalot_pool_id pool) {
  return with(a, "cachalot_pool_end_allocate", [&](allocator& x) { x.end_allocate_to_pool(pool); });
}

cachalot_status cachalot_pool_malloc(cachalot_allocator* a, cachalot_pool_id pool, void** out,
                                     size_t size, void* stream) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_pool_malloc: out is NULL");
  }
  *out = nullptr;
  return with(a, "cachalot_pool_malloc",
              [&](allocator& x) { *out = x.allocate(size, stream, pool); });
}

cachalot_status cachalot_pool_of(cachalot_allocator* a, const void* ptr, cachalot_pool_id* out) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_pool_of: out is NULL");
  }
  return with(a, "cachalot_pool_of", [&](allocator& x) { *out = x.pool_of(ptr); });
}

cachalot_status cachalot_pool_sleep(cachalot_allocator* a, cachalot_pool_id pool,
                                    cachalot_sleep_mode mode, int* slept) {
  return with(a, "cachalot_pool_sleep", [&](allocator& x) {
    const bool did = x.sleep(pool, detail::to_mode(mode, "cachalot_pool_sleep"));
    if (slept != nullptr) *slept = did ? 1 : 0;
  });
}

cachalot_status cachalot_pool_wake(cachalot_allocator* a, cachalot_pool_id pool, int* woke) {
  return with(a, "cachalot_pool_wake", [&](allocator& x) {
    const bool did = x.wake(pool);
    if (woke != nullptr) *woke = did ? 1 : 0;
  });
}

cachalot_status cachalot_pool_is_asleep(cachalot_allocator* a, cachalot_pool_id pool, int* asleep) {
  if (asleep == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_pool_is_asleep: asleep is NULL");
  }
  return with(a, "cachalot_pool_is_asleep", [&](allocator& x) {
    const std::vector<pool_info> list = x.pools();
    if (pool >= list.size()) {
      throw invalid_argument("no pool with id " + std::to_string(pool) + " in this allocator",
                             __FILE__, __LINE__);
    }
    *asleep = list[pool].asleep ? 1 : 0;
  });
}

cachalot_status cachalot_pool_get_stats(cachalot_allocator* a, cachalot_pool_id pool,
                                        cachalot_stats* out) {
  if (out == nullptr) {
    return detail::fail(CACHALOT_ERROR_INVALID_ARGUMENT, "cachalot_pool_get_stats: out is NULL");
  }
  return with(a, "cachalot_pool_get_stats", [&](allocator& x) {
    detail::fill_stats(x.stats(pool), x.get_config().max_split_size, out);
  });
}

}  // extern "C"
