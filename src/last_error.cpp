// The per-thread last-error message of the C shim and the hooks (cachalot_last_error()).
//
// Invariant: the storage a thread's message lives in outlives every static destructor. A
// failing C call made from a static destructor or an atexit handler (freeing into an allocator
// that is already gone, say) must store its message, not write into a destroyed object: a
// `thread_local std::string` is destroyed before static objects are, and a second failure then
// frees its buffer twice. So the slot is a trivially destructible thread_local (a pointer and a
// capacity, never destroyed); its heap buffer is freed by a pthread key destructor when a
// thread other than the main one exits, and is never freed for the main thread, whose exit
// ends the process. Nothing here throws or allocates through operator new.
#include <pthread.h>

#include <cstdlib>
#include <cstring>

#include "detail/c_error.hpp"

namespace cachalot::detail {
namespace {

struct error_slot {
  char* text = nullptr;
  std::size_t capacity = 0;
};
constinit thread_local error_slot t_slot;

// Frees a thread's buffer at thread exit (the thread-local slot is still readable then).
extern "C" void free_error_text(void* text) noexcept {
  if (t_slot.text == text) t_slot = error_slot{};
  std::free(text);
}

struct error_key {
  pthread_key_t key{};
  bool valid = false;
  error_key() noexcept { valid = pthread_key_create(&key, free_error_text) == 0; }
  // A library unloaded with dlclose must leave no destructor pointer behind; at process exit
  // this only stops buffers of later-failing threads from being freed at their exit.
  ~error_key() {
    if (valid) pthread_key_delete(key);
    valid = false;
  }
};
error_key g_error_key;

constexpr char no_memory_text[] = "(out of host memory while storing the error message)";

}  // namespace

void set_last_error(std::string_view message) noexcept {
  error_slot& s = t_slot;
  if (message.size() + 1 > s.capacity) {
    const std::size_t want = message.size() + 1 < 256 ? 256 : message.size() + 1;
    char* grown = static_cast<char*>(std::realloc(s.text, want));
    if (grown == nullptr) {
      if (s.text == nullptr || s.capacity < sizeof no_memory_text) return;  // nothing to say
      std::memcpy(s.text, no_memory_text, sizeof no_memory_text);
      return;
    }
    s.text = grown;
    s.capacity = want;
    if (g_error_key.valid) (void)pthread_setspecific(g_error_key.key, grown);
  }
  std::memcpy(s.text, message.data(), message.size());
  s.text[message.size()] = '\0';
}

const char* last_error_text() noexcept {
  return t_slot.text != nullptr ? t_slot.text : "";
}

}  // namespace cachalot::detail
