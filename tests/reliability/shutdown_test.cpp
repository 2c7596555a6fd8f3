// Shutdown: processes that exit with live allocations, with exited threads, or with frees in
// static destructors exit cleanly (status 0, nothing on stderr, 20 runs each; under ASan the
// runs also prove there is no use after free); and the thread-local stream cache never hands
// a new allocator the state of a destroyed one, even at a reused address.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cachalot/cachalot.hpp"

extern char** environ;

namespace cachalot {
namespace {

struct outcome {
  int status = -1;
  std::string err;
};

/// Runs the helper in `mode` with stderr sent to a file; returns its exit status and stderr.
outcome run_helper(const char* mode) {
  char path[] = "/tmp/cachalot_exit_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  std::string exe = CACHALOT_EXIT_HELPER;
  std::string arg = mode;
  char* argv[] = {exe.data(), arg.data(), nullptr};
  pid_t pid = 0;
  outcome out;
  if (posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, environ) == 0) {
    int ws = 0;
    waitpid(pid, &ws, 0);
    out.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  }
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  out.err = text.str();
  unlink(path);
  return out;
}

class clean_exit : public ::testing::TestWithParam<const char*> {};

TEST_P(clean_exit, TwentyRunsExitZeroWithNothingOnStderr) {
  for (int i = 0; i < 20; ++i) {
    const outcome o = run_helper(GetParam());
    ASSERT_EQ(o.status, 0) << "run " << i << ", stderr: " << o.err;
    ASSERT_EQ(o.err, "") << "run " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(modes, clean_exit,
                         ::testing::Values("live", "threads", "static-free", "exit",
                                           "error-at-exit"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(clean_exit_helper, BrokenExpectationsAreReported) {
  const outcome o = run_helper("no-such-mode");
  EXPECT_EQ(o.status, 3);
  EXPECT_EQ(o.err, "exit_helper: unknown mode\n");
}

TEST(stream_cache, ANewAllocatorNeverSeesAStaleStreamState) {
  // Each allocator caches (engine id, stream) -> state in this thread. Allocators created and
  // destroyed in a row usually reuse the same heap address; ids never repeat, so every new one
  // must register the stream afresh (a stale entry would be a use after free under ASan, and
  // would show up here as a wrong stream count or a foreign block).
  const stream_t s = reinterpret_cast<stream_t>(0x77);
  for (int i = 0; i < 50; ++i) {
    auto sim = std::make_shared<simulated_device>();
    auto a = std::make_unique<allocator>(config{}, sim);
    void* p = a->allocate(1000, s);
    EXPECT_EQ(a->stats().num_streams, 1u);
    const memory_snapshot snap = a->snapshot();
    ASSERT_EQ(snap.segments.size(), 1u);
    EXPECT_EQ(snap.segments[0].stream, s);
    EXPECT_TRUE(sim->is_live(p, 1000));
    a->deallocate(p);
  }
}

TEST(stream_cache, ThreadsThatExitLeaveNothingBehind) {
  auto sim = std::make_shared<simulated_device>();
  allocator a(config{}, sim);
  std::vector<void*> handed;
  for (int round = 0; round < 10; ++round) {
    void* p = nullptr;
    std::thread t([&] { p = a.allocate(4096, reinterpret_cast<stream_t>(round % 2)); });
    t.join();
    handed.push_back(p);
  }
  for (void* p : handed) a.deallocate(p);  // freed by a thread that never allocated them
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0u);
  EXPECT_EQ(a.stats().num_streams, 2u);
}

}  // namespace
}  // namespace cachalot
