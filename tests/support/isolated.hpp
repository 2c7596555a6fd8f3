// Scenarios in a fresh child process (fork), for what lives as long as a process (the default
// allocators, log_once's memory, the log threshold): stderr goes to a file the scenario reads,
// CACHALOT_CONF is set or unset, and a failed CHILD_EXPECT ends the child with its message,
// which fails the test in the parent.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "detail/log.hpp"

namespace cachalot::test {

/// What a scenario sees: it reads what the process printed on stderr so far.
struct child {
  FILE* err = nullptr;
  std::string stderr_text() const {
    std::fflush(stderr);
    std::string text;
    std::rewind(err);
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, err)) > 0) text.append(buf, n);
    return text;
  }
};

/// A failed expectation inside the child: its message is the child's stdout.
#define CHILD_EXPECT(cond, msg)                                                            \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #cond, std::string(msg).c_str()); \
      std::fflush(stdout);                                                                 \
      _exit(1);                                                                            \
    }                                                                                      \
  } while (0)

/// How many times `what` occurs in `text`.
inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

/// The number of lines of `text`.
inline std::size_t lines(const std::string& text) {
  return count(text, "\n");
}

/// Runs `scenario` in a child process with CACHALOT_CONF = `conf` (nullptr: unset), the log
/// threshold `level` and stderr captured; fails the test with the child's message if it fails.
inline void isolated(const char* conf, detail::log_level level,
                     const std::function<void(child&)>& scenario) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(out[0]);
    dup2(out[1], STDOUT_FILENO);
    child c;
    c.err = std::tmpfile();
    dup2(fileno(c.err), STDERR_FILENO);
    if (conf == nullptr) {
      unsetenv("CACHALOT_CONF");
    } else {
      setenv("CACHALOT_CONF", conf, 1);
    }
    detail::set_log_threshold(level);
    scenario(c);
    std::fflush(stdout);
    _exit(0);
  }
  close(out[1]);
  std::string message;
  char buf[1024];
  ssize_t n = 0;
  while ((n = read(out[0], buf, sizeof buf)) > 0) message.append(buf, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << message;
}

}  // namespace cachalot::test
