// Trace recording in RMM's CSV format (see detail/trace_writer.hpp).
#include "detail/trace_writer.hpp"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>
#include <utility>

#include "cachalot/errors.hpp"

namespace cachalot::detail {
namespace {

/// The calling thread's OS thread id (gettid), as RMM's logging adaptor writes it.
long os_thread_id() noexcept {
  thread_local const long id = static_cast<long>(::syscall(SYS_gettid));
  return id;
}

/// Files (device, inode) open for tracing in this process: two allocators writing one file
/// would interleave their lines into a trace that does not replay. Never destroyed, so that
/// allocators that outlive static destruction can still close their files.
std::mutex& open_files_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::set<std::pair<dev_t, ino_t>>& open_files() {
  static auto* files = new std::set<std::pair<dev_t, ino_t>>;
  return *files;
}

}  // namespace

trace_writer::trace_writer(const std::string& path) : file_(std::fopen(path.c_str(), "a")) {
  if (file_ == nullptr) {
    throw invalid_argument("trace_file: cannot open '" + path + "': " + std::strerror(errno),
                           __FILE__, __LINE__);
  }
  struct stat st {};
  if (::fstat(::fileno(file_), &st) == 0) {
    std::lock_guard<std::mutex> lock(open_files_mutex());
    if (!open_files().emplace(st.st_dev, st.st_ino).second) {
      std::fclose(file_);
      file_ = nullptr;
      throw invalid_argument("trace_file: '" + path +
                                 "' is already written by another allocator of this process; "
                                 "give each its own file (%d in the path is the device ordinal)",
                             __FILE__, __LINE__);
    }
    key_ = {st.st_dev, st.st_ino};
    registered_ = true;
  }
  // Opened for appending so that a clash is found before anything is lost; now start afresh.
  if (::ftruncate(::fileno(file_), 0) != 0) {
    const int e = errno;
    close();
    throw invalid_argument("trace_file: cannot truncate '" + path + "': " + std::strerror(e),
                           __FILE__, __LINE__);
  }
  std::fputs("Thread,Time,Action,Pointer,Size,Stream\n", file_);
}

trace_writer::~trace_writer() {
  close();
}

void trace_writer::close() noexcept {
  if (file_ == nullptr) return;
  if (registered_) {
    std::lock_guard<std::mutex> lock(open_files_mutex());
    open_files().erase({static_cast<dev_t>(key_.first), static_cast<ino_t>(key_.second)});
    registered_ = false;
  }
  std::fclose(file_);
  file_ = nullptr;
}

void trace_writer::on_allocate(const void* ptr, std::size_t size, stream_t stream) noexcept {
  write("allocate", ptr, size, stream);
}

void trace_writer::on_free(const void* ptr, std::size_t size, stream_t stream) noexcept {
  write("free", ptr, size, stream);
}

void trace_writer::on_allocate_failure(std::size_t size, stream_t stream) noexcept {
  write("allocate failure", nullptr, size, stream);
}

void trace_writer::flush() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fflush(file_);
}

void trace_writer::write(const char* action, const void* ptr, std::size_t size,
                         stream_t stream) noexcept {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  std::tm tm{};
  localtime_r(&tv.tv_sec, &tm);
  const long thread = os_thread_id();
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(file_, "%ld,%02d:%02d:%02d.%06ld,%s,%p,%zu,0x%zx\n", thread, tm.tm_hour, tm.tm_min,
               tm.tm_sec, static_cast<long>(tv.tv_usec), action, ptr, size,
               reinterpret_cast<std::size_t>(stream));
}

}  // namespace cachalot::detail
