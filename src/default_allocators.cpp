// Process-wide default allocators (see cachalot/default.hpp). A fixed table of slots, each a
// std::once_flag and an atomic pointer, constant-initialized so that it is usable from any
// static initializer or atexit handler and is never destroyed. Invariant: a slot's pointer is
// either null or a fully constructed allocator that lives until the process ends.
#include "cachalot/default.hpp"

#include <atomic>
#include <mutex>
#include <string>

#include "cachalot/config.hpp"
#include "cachalot/errors.hpp"

namespace cachalot {

namespace {

struct slot {
  std::once_flag once;
  std::atomic<allocator*> instance{nullptr};
};

slot g_slots[max_default_devices];

bool valid_device(int device) noexcept {
  return device >= 0 && device < max_default_devices;
}

}  // namespace

allocator& default_allocator(int device) {
  if (!valid_device(device)) {
    throw invalid_argument("default_allocator: device " + std::to_string(device) +
                               " is outside [0, " + std::to_string(max_default_devices) + ")",
                           __FILE__, __LINE__);
  }
  slot& s = g_slots[device];
  if (allocator* a = s.instance.load(std::memory_order_acquire)) return *a;
  std::call_once(s.once, [&s, device] {
    config cfg = config::from_environment();
    cfg.device = device;
    // Leaked on purpose: see the file comment of cachalot/default.hpp.
    s.instance.store(new allocator(cfg), std::memory_order_release);
  });
  return *s.instance.load(std::memory_order_acquire);
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

}  // namespace cachalot
