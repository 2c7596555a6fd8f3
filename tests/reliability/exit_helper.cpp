// A process that ends in the ways real programs end, run many times by shutdown_test: it must
// exit with status 0 and write nothing to stderr. Modes (argv[1]):
//   live         a static C++ allocator is destroyed at exit with live allocations on three
//                streams and blocks pending on a held stream;
//   threads      worker threads allocate, hand blocks to main and exit; main frees them;
//   static-free  static destructors free into a C allocator before and after its destruction
//                (before: success; after: CACHALOT_ERROR_INVALID_ARGUMENT, never a crash);
//   exit         std::exit(0) from inside a call chain with live allocations;
//   error-at-exit  a C call fails in main, then C calls fail again with longer messages from a
//                static destructor, after thread-local objects are gone (issue 9: the
//                last-error text was a thread_local std::string, freed twice here).
// Any broken expectation exits with status 3 and a message.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cachalot/cachalot.h"
#include "cachalot/cachalot.hpp"

namespace {

using namespace cachalot;

stream_t stream_n(std::uintptr_t n) {
  return reinterpret_cast<stream_t>(n);
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "exit_helper: %s\n", what);
  std::_Exit(3);
}

struct held_allocator {
  std::shared_ptr<simulated_device> sim;
  std::unique_ptr<allocator> a;
  held_allocator() {
    sim_options o;
    o.capacity = 1 * GiB;
    o.host_backing = true;
    sim = std::make_shared<simulated_device>(o);
    a = std::make_unique<allocator>(config::parse("debug:1"), sim);
  }
};

held_allocator& global() {
  static held_allocator g;
  return g;
}

void fill_live(allocator& a, simulated_device& sim) {
  for (std::uintptr_t i = 0; i < 60; ++i) {
    void* p = a.allocate(1 + i * 40000, stream_n(1 + i % 3));
    std::memset(p, 1, 1 + i * 40000);
    if (i % 4 == 0) a.deallocate(p);
  }
  sim.hold_stream(stream_n(9));
  void* p = a.allocate(4096, stream_n(1));
  a.deallocate(p, stream_n(9));  // pending at exit
}

int mode_live() {
  held_allocator& g = global();
  fill_live(*g.a, *g.sim);
  return 0;
}

int mode_threads() {
  held_allocator& g = global();
  for (int round = 0; round < 4; ++round) {
    std::vector<void*> handed(8, nullptr);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < handed.size(); ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 100; ++i) g.a->deallocate(g.a->allocate(4096, stream_n(t % 3)));
        handed[t] = g.a->allocate(8192, stream_n(t % 3));
      });
    }
    for (std::thread& th : threads) th.join();
    for (std::size_t t = 0; t < handed.size(); t += 2) g.a->deallocate(handed[t]);
  }
  return 0;  // the odd threads' blocks are still live at exit
}

cachalot_allocator* g_handle = nullptr;
void* g_early = nullptr;
void* g_late = nullptr;

// Constructed before main, so destroyed after every function-local static: the allocator is
// gone when it frees, which must be reported, not crash.
struct late_freer {
  ~late_freer() {
    if (g_late == nullptr) return;
    if (cachalot_free(g_handle, g_late, nullptr) != CACHALOT_ERROR_INVALID_ARGUMENT) {
      die("a free after destruction was not an INVALID_ARGUMENT error");
    }
  }
} g_late_freer;

struct handle_owner {
  handle_owner() {
    if (cachalot_create("backend:simulated,capacity:1GiB", &g_handle) != CACHALOT_SUCCESS) {
      die("cachalot_create failed");
    }
  }
  ~handle_owner() { cachalot_destroy(g_handle); }
};

struct early_freer {
  ~early_freer() {
    if (cachalot_free(g_handle, g_early, nullptr) != CACHALOT_SUCCESS) die("early free failed");
  }
};

int mode_static_free() {
  static handle_owner owner;  // destroyed second
  static early_freer early;   // destroyed first, while the allocator lives
  if (cachalot_malloc(g_handle, &g_early, 1000, nullptr) != CACHALOT_SUCCESS ||
      cachalot_malloc(g_handle, &g_late, 1000, nullptr) != CACHALOT_SUCCESS) {
    die("cachalot_malloc failed");
  }
  return 0;
}

bool g_fail_at_exit = false;

// Constructed before main, destroyed after main returns, when thread-local objects of the main
// thread have already been destroyed.
struct exit_failer {
  ~exit_failer() {
    if (!g_fail_at_exit) return;
    void* p = nullptr;
    if (cachalot_malloc(nullptr, &p, 64, nullptr) != CACHALOT_ERROR_INVALID_ARGUMENT) {
      die("cachalot_malloc(NULL allocator) at exit did not fail");
    }
    if (std::strstr(cachalot_last_error(), "allocator is NULL") == nullptr) {
      die("no message for the failure at exit");
    }
    cachalot_allocator* a = nullptr;
    const char* conf =
        "memory_limt:90%,this_key_is_long_enough_to_need_a_bigger_buffer_than_before:1";
    if (cachalot_create(conf, &a) != CACHALOT_ERROR_INVALID_ARGUMENT) {
      die("a bad config at exit was not an INVALID_ARGUMENT error");
    }
    if (std::strstr(cachalot_last_error(), "memory_limt") == nullptr) {
      die("the config error at exit does not name the key");
    }
  }
} g_exit_failer;

int mode_error_at_exit() {
  static handle_owner owner;
  int foreign = 0;
  if (cachalot_free(g_handle, &foreign, nullptr) != CACHALOT_ERROR_INVALID_POINTER) {
    die("a foreign free was not an INVALID_POINTER error");
  }
  if (std::strlen(cachalot_last_error()) < 32) die("the foreign-free message is too short");
  g_fail_at_exit = true;
  return 0;
}

[[noreturn]] void exit_deep(allocator& a, int depth) {
  void* p = a.allocate(4096 * static_cast<std::size_t>(depth + 1), stream_n(depth % 2));
  (void)p;
  if (depth == 0) std::exit(0);
  exit_deep(a, depth - 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: cachalot_exit_helper live|threads|static-free|exit|error-at-exit");
  const char* mode = argv[1];
  if (std::strcmp(mode, "live") == 0) return mode_live();
  if (std::strcmp(mode, "threads") == 0) return mode_threads();
  if (std::strcmp(mode, "static-free") == 0) return mode_static_free();
  if (std::strcmp(mode, "error-at-exit") == 0) return mode_error_at_exit();
  if (std::strcmp(mode, "exit") == 0) exit_deep(*global().a, 5);
  die("unknown mode");
}
