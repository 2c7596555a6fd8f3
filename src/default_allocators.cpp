// Process-wide default allocators (see cachalot/default.hpp). A fixed table of slots, each an
// atomic pointer plus what the slot was configured or created with, and one mutex for every
// change of configuration or creation. All of it is trivially destructible (strings are leaked
// through pointers), so it is usable from any static initializer or atexit handler and is
// never destroyed. Invariants: a slot's pointer is either null or a fully constructed
// allocator that lives until the process ends; a slot's `created_from` is set exactly when its
// pointer is; a default allocator runs on CUDA unless its config names the simulated device;
// the per-thread default stream (cudaStreamPerThread) is served on one thread only (below).
#include "cachalot/default.hpp"

#include "detail/format.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"
#include "detail/defaults.hpp"
#include "detail/log.hpp"

namespace cachalot {

namespace {

struct slot {
  std::atomic<allocator*> instance{nullptr};
  const std::string* created_from = nullptr;  // canonical base config (guarded by g_mutex)
  double fraction = 0.0;                      // set_default_memory_fraction (guarded)
  bool fraction_set = false;                  // (guarded)
};

slot g_slots[max_default_devices];
constinit std::mutex g_mutex;               // creation and configuration
const std::string* g_configured = nullptr;  // configure_default_allocators text; null: env

bool valid_device(int device) noexcept {
  return device >= 0 && device < max_default_devices;
}

void check_device(const char* what, int device) {
  if (!valid_device(device)) {
    throw invalid_argument(
        detail::format("{}: device {} is outside [0, {})", what, device, max_default_devices),
        __FILE__, __LINE__);
  }
}

// The config text in force (guarded by g_mutex): configured, or CACHALOT_CONF.
config base_config() {
  if (g_configured != nullptr) {
    try {
      return config::parse(*g_configured);
    } catch (const invalid_argument& e) {  // validated when configured: cannot happen
      throw invalid_argument(std::string("configured default config: ") + e.what(), e.file(),
                             e.line());
    }
  }
  return config::from_environment();
}

// The config with `device` normalized, as text: equal texts mean the same allocator config.
std::string canonical(config c) {
  c.device = 0;
  return c.to_string();
}

// Throws an error of `e`'s status with `message` and `e`'s source location.
[[noreturn]] void rethrow_with(const error& e, const std::string& message) {
  switch (e.code()) {
    case status::backend:
      throw backend_error(message, e.file(), e.line());
    case status::not_supported:
      throw not_supported(message, e.file(), e.line());
    case status::invalid_argument:
      throw invalid_argument(message, e.file(), e.line());
    default:
      throw error(e.code(), message, e.file(), e.line());
  }
}

// The config in force (g_mutex held), or an invalid_argument saying that the default
// allocators cannot start (printed once on stderr).
config checked_base_config() {
  try {
    return base_config();
  } catch (const invalid_argument& e) {
    const std::string message = detail::format(
        "the default allocators cannot start: {}; every allocation through them "
        "(hooks, default_allocator) fails until it is fixed",
        e.what());
    detail::log_once(detail::log_level::error, message);
    throw invalid_argument(message, e.file(), e.line());
  }
}

// The config the allocator of `s` is created with (g_mutex held): `base` for `device`, with
// the slot's memory fraction, and backend:auto taken as CUDA.
config config_for(const slot& s, config cfg, int device) {
  cfg.device = device;
  if (s.fraction_set) {
    cfg.memory_fraction = s.fraction;
    cfg.memory_limit = 0;
  }
  if (cfg.backend == backend_kind::automatic) cfg.backend = backend_kind::cuda;
  return cfg;
}

// Creates the allocator of `s` (g_mutex held). Logs what it runs on, or why it cannot run.
allocator* create(slot& s, int device) {
  const config base_cfg = checked_base_config();
  const std::string base = canonical(base_cfg);
  const bool asked_simulated = base_cfg.backend == backend_kind::simulated;
  const config cfg = config_for(s, base_cfg, device);
  allocator* a = nullptr;
  try {
    a = new allocator(cfg);  // leaked on purpose: see cachalot/default.hpp
  } catch (const error& e) {
    const std::string message =
        asked_simulated
            ? detail::format("the default allocator of device {} cannot start: {}", device,
                             e.what())
            : detail::format(
                  "the default allocator of device {} cannot start on CUDA: {}. Default "
                  "allocators never fall back to the simulated device; to use it "
                  "deliberately, set CACHALOT_CONF=backend:simulated",
                  device, e.what());
    detail::log_once(detail::log_level::error, message);
    rethrow_with(e, message);
  }
  s.created_from = new std::string(base);
  const device_memory_info mi = a->backend().memory_info();
  detail::log(detail::log_level::info,
              detail::format("default allocator of device {}: backend {}, device memory {} ({} "
                             "free), config {}",
                             device, a->backend().name(), format_bytes(mi.total),
                             format_bytes(mi.free), a->get_config().to_string()));
  if (asked_simulated) {
    detail::log_once(detail::log_level::warn,
                     "the default allocators run on the SIMULATED device (backend:simulated in "
                     "their config): their memory is not GPU memory; never hand it to kernels");
  }
  return a;
}

// Fails if an existing default allocator was created from a config other than `text`.
void check_unchanged(const std::string& text) {
  for (int d = 0; d < max_default_devices; ++d) {
    const slot& s = g_slots[d];
    if (s.created_from != nullptr && *s.created_from != text) {
      throw invalid_argument(
          detail::format("the default allocator of device {} exists already with config '{}'; "
                         "configure the default allocators before their first use",
                         d, *s.created_from),
          __FILE__, __LINE__);
    }
  }
}

// --- cudaStreamPerThread ----------------------------------------------------------------------
// The handle 0x2 (cudaStreamPerThread, CU_STREAM_PER_THREAD) names the calling thread's
// per-thread default stream: a different stream on every thread (CuPy passes it from every
// thread with CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1: cupy/cuda/stream.pyx, get_default_stream
// and Stream(ptds=True)). The engine keys streams by handle, so one key cannot stand for many
// streams: the first thread that passes 0x2 owns it for the process; allocations and
// record_stream on 0x2 from any other thread are refused (not_supported, saying what to do
// instead); a free on 0x2 from another thread first waits for that thread's per-thread stream
// (an event recorded on it and synchronized: a host wait, made here, so not in the engine's
// num_device_syncs), then frees the block on its own stream, so nothing is lost and no block
// is reused before that thread's work on it is done.

constexpr std::uintptr_t per_thread_stream = 0x2;
std::atomic<std::uint64_t> g_per_thread_owner{0};  // thread number of the owner; 0: none yet
std::atomic<std::uint64_t> g_thread_numbers{1};

bool is_per_thread(stream_t s) noexcept {
  return reinterpret_cast<std::uintptr_t>(s) == per_thread_stream;
}

// True when the calling thread owns 0x2 (taking it if nobody does).
bool owns_per_thread_stream() noexcept {
  thread_local const std::uint64_t me = g_thread_numbers.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t owner = 0;
  if (g_per_thread_owner.compare_exchange_strong(owner, me, std::memory_order_acq_rel)) return true;
  return owner == me;
}

[[noreturn]] void refuse_per_thread_stream(const char* what) {
  throw not_supported(
      detail::format("{} on stream cudaStreamPerThread (0x2) from a second thread: 0x2 names a "
                     "different stream on every thread, and the default allocators serve it on "
                     "the first thread that used it only (a block freed on one thread's stream "
                     "could be reused on another's before the work on it completed). Give each "
                     "thread a stream of its own (cudaStreamCreate, cupy.cuda.Stream()), or "
                     "leave per-thread default streams off (CuPy: unset "
                     "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM)",
                     what),
      __FILE__, __LINE__);
}

// Waits until the work queued so far on the calling thread's per-thread stream has completed.
void wait_for_per_thread_stream(allocator& a) {
  device_backend& b = a.backend();
  const event_t e = b.create_event();
  try {
    b.record_event(e, reinterpret_cast<stream_t>(per_thread_stream));
    b.synchronize_event(e);
  } catch (...) {
    b.destroy_event(e);
    throw;
  }
  b.destroy_event(e);
}

}  // namespace

allocator& default_allocator(int device) {
  check_device("default_allocator", device);
  slot& s = g_slots[device];
  if (allocator* a = s.instance.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(g_mutex);
  allocator* a = s.instance.load(std::memory_order_acquire);
  if (a == nullptr) {
    a = create(s, device);
    s.instance.store(a, std::memory_order_release);
  }
  return *a;
}

config default_allocator_config(int device) {
  check_device("default_allocator_config", device);
  std::lock_guard<std::mutex> lock(g_mutex);
  const slot& s = g_slots[device];
  if (allocator* a = s.instance.load(std::memory_order_acquire)) return a->get_config();
  return config_for(s, checked_base_config(), device);
}

allocator* default_allocator_if_created(int device) noexcept {
  if (!valid_device(device)) return nullptr;
  return g_slots[device].instance.load(std::memory_order_acquire);
}

allocator* default_allocator_owning(const void* ptr) noexcept {
  if (ptr == nullptr) return nullptr;
  for (slot& s : g_slots) {
    allocator* a = s.instance.load(std::memory_order_acquire);
    if (a != nullptr && a->owns(ptr)) return a;
  }
  return nullptr;
}

void empty_default_caches() {
  for (slot& s : g_slots) {
    if (allocator* a = s.instance.load(std::memory_order_acquire)) a->empty_cache();
  }
}

void configure_default_allocators(std::string_view config_text) {
  const std::string text = canonical(config::parse(config_text));
  std::lock_guard<std::mutex> lock(g_mutex);
  check_unchanged(text);
  const std::string* old = g_configured;
  g_configured = new std::string(text);
  delete old;
}

void configure_default_allocators_from_environment() {
  const std::string text = canonical(config::from_environment());
  std::lock_guard<std::mutex> lock(g_mutex);
  check_unchanged(text);
  const std::string* old = g_configured;
  g_configured = nullptr;
  delete old;
}

void set_default_memory_fraction(int device, double fraction) {
  check_device("set_default_memory_fraction", device);
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw invalid_argument(detail::format("memory fraction {} is not in [0, 1]", fraction),
                           __FILE__, __LINE__);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  slot& s = g_slots[device];
  if (allocator* a = s.instance.load(std::memory_order_acquire)) {
    // The allocator resolved its fraction into a byte limit; the slot remembers what was set.
    if (s.fraction_set && s.fraction == fraction) return;
    throw not_supported(detail::format("the default allocator of device {} exists already (memory "
                                       "limit {}); set its memory fraction before its first "
                                       "allocation, or use config key memory_limit",
                                       device, format_bytes(a->get_config().memory_limit)),
                        __FILE__, __LINE__);
  }
  s.fraction = fraction;
  s.fraction_set = true;
}

namespace detail {

void* default_allocate(int device, std::size_t size, stream_t stream) {
  if (is_per_thread(stream) && !owns_per_thread_stream()) refuse_per_thread_stream("allocation");
  allocator& a = default_allocator(device);
  try {
    return a.allocate(size, stream);
  } catch (const out_of_memory& e) {
    if (log_enabled(log_level::warn)) {
      log_oom(device, e.what(), log_enabled(log_level::info) ? a.memory_summary() : std::string());
    }
    throw;
  }
}

void default_free(int device, void* ptr, std::size_t size, stream_t stream) {
  if (ptr == nullptr) return;
  const bool foreign_per_thread = is_per_thread(stream) && !owns_per_thread_stream();
  auto release = [&](allocator& a) {
    if (foreign_per_thread) {  // this thread's per-thread stream is not the owner's: see above
      if (!a.owns(ptr)) return a.deallocate(ptr);  // explains why it is not live
      wait_for_per_thread_stream(a);
      a.deallocate(ptr);
    } else if (size != 0) {
      a.deallocate(ptr, size, stream);
    } else {
      a.deallocate(ptr, stream);
    }
  };
  if (allocator* a = default_allocator_if_created(device); a != nullptr && a->owns(ptr)) {
    release(*a);
    return;
  }
  allocator* owner = default_allocator_owning(ptr);
  if (owner == nullptr) {
    // Nobody owns it: the allocator of `device` explains why (freed already, interior, ...).
    if (allocator* a = default_allocator_if_created(device)) release(*a);
    throw invalid_pointer(
        detail::format("{} is not a live allocation of any default allocator", detail::ptr(ptr)),
        __FILE__, __LINE__);
  }
  release(*owner);
}

void default_record_stream(void* ptr, stream_t stream) {
  if (is_per_thread(stream) && !owns_per_thread_stream()) refuse_per_thread_stream("record_stream");
  allocator* owner = default_allocator_owning(ptr);
  if (owner == nullptr) {
    throw invalid_pointer(
        detail::format("{} is not a live allocation of any default allocator", detail::ptr(ptr)),
        __FILE__, __LINE__);
  }
  owner->record_stream(ptr, stream);
}

}  // namespace detail

}  // namespace cachalot
