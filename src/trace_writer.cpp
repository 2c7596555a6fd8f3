// Trace recording in RMM's CSV format (see detail/trace_writer.hpp).
#include "detail/trace_writer.hpp"

#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <thread>

#include "cachalot/errors.hpp"

namespace cachalot::detail {

trace_writer::trace_writer(const std::string& path) : file_(std::fopen(path.c_str(), "w")) {
  if (file_ == nullptr) {
    throw invalid_argument("trace_file: cannot open '" + path + "': " + std::strerror(errno),
                           __FILE__, __LINE__);
  }
  std::fputs("Thread,Time,Action,Pointer,Size,Stream\n", file_);
}

trace_writer::~trace_writer() {
  if (file_ != nullptr) std::fclose(file_);
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
  const std::size_t thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(file_, "%zu,%02d:%02d:%02d.%06ld,%s,%p,%zu,0x%zx\n", thread, tm.tm_hour, tm.tm_min,
               tm.tm_sec, static_cast<long>(tv.tv_usec), action, ptr, size,
               reinterpret_cast<std::size_t>(stream));
}

}  // namespace cachalot::detail
