// PyTorch's figures from a converted trace, and when they compare (see pytorch_figures.hpp).
#include "trace/pytorch_figures.hpp"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

#include "cachalot/config.hpp"
#include "trace/report.hpp"

namespace cachalot::tools {
namespace {

std::size_t number(std::string_view key, std::string_view value) {
  std::size_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc{} || end != value.data() + value.size() || value.empty()) {
    throw std::invalid_argument("bad " + std::string(key) + " '" + std::string(value) + "'");
  }
  return v;
}

}  // namespace

std::string pytorch_figures::why_not_comparable() const {
  if (!present || comparable()) return "";
  if (!start_known) {
    return "the trace does not say what PyTorch had reserved before the recorded window began "
           "(convert the snapshot again with this version of python -m cachalot.convert)";
  }
  if (!start_exact) {
    return fmt::format(
        "PyTorch had at least {} reserved before the recorded window began, and the snapshot "
        "has no segment list to say how much more; a replay starts with nothing reserved",
        format_bytes(reserved_at_start));
  }
  if (reserved_at_start == 0) {
    return fmt::format(
        "the snapshot is inconsistent: PyTorch had nothing reserved when the recorded window "
        "began, yet {} allocations were live then",
        reconstructed_allocations);
  }
  return fmt::format(
      "PyTorch had {} reserved before the recorded window began (its cache of earlier phases "
      "included); a replay starts with nothing reserved",
      format_bytes(reserved_at_start));
}

bool read_pytorch_key(pytorch_figures& p, std::string_view key, std::string_view value) {
  if (key == "pytorch.peak_reserved") {
    p.peak_reserved = number(key, value);
    p.present = true;
  } else if (key == "pytorch.peak_reserved_kind") {
    p.exact = value == "exact";
  } else if (key == "pytorch.reserved_at_start") {
    p.reserved_at_start = number(key, value);
    p.start_known = true;
  } else if (key == "pytorch.reserved_at_start_kind") {
    p.start_exact = value == "exact";
  } else if (key == "pytorch.reconstructed_allocations") {
    p.reconstructed_allocations = number(key, value);
  } else if (key == "pytorch.reconstructed_bytes") {
    p.reconstructed_bytes = number(key, value);
  } else {
    return false;
  }
  return true;
}

std::string pytorch_text(const pytorch_figures& p, std::size_t cachalot_peak_reserved) {
  std::string out;
  if (p.reconstructed_allocations != 0) {
    out += fmt::format(
        "  live set when the recorded window began: {} allocations, {} (reconstructed from the "
        "snapshot, allocated at the trace's start)\n",
        p.reconstructed_allocations, format_bytes(p.reconstructed_bytes));
  }
  if (!p.present) return out;
  if (p.comparable()) {
    out += fmt::format("  PyTorch reserved at its peak (from the snapshot, a cold start): {}{}",
                       format_bytes(p.peak_reserved), p.exact ? "" : " (a lower bound)");
    if (cachalot_peak_reserved != 0) {
      out += fmt::format("; cachalot: {}", format_bytes(cachalot_peak_reserved));
      if (p.peak_reserved != 0) {
        out += fmt::format(" ({:+.1f}%)", 100.0 * (static_cast<double>(cachalot_peak_reserved) /
                                                       static_cast<double>(p.peak_reserved) -
                                                   1.0));
      }
    }
    return out + "\n";
  }
  out += fmt::format("  PyTorch's recorded peak reserved ({}{}) is not comparable: {}.\n",
                     format_bytes(p.peak_reserved), p.exact ? "" : ", a lower bound",
                     p.why_not_comparable());
  if (p.start_known) {
    out += fmt::format(
        "  PyTorch's peak minus what it had reserved before the window: {} (what it added in "
        "the window); PyTorch's allocator on this same trace: cachalot-pytorch-replay\n",
        format_bytes(p.peak_minus_start()));
  }
  return out;
}

std::string pytorch_json(const pytorch_figures& p) {
  std::string out;
  if (p.reconstructed_allocations != 0 || p.present) {
    out += fmt::format(",\"reconstructed_allocations\":{},\"reconstructed_bytes\":{}",
                       p.reconstructed_allocations, p.reconstructed_bytes);
  }
  if (!p.present) return out;
  out += fmt::format(",\"pytorch_comparable\":{}", p.comparable() ? "true" : "false");
  if (p.comparable()) {
    out += fmt::format(",\"pytorch_peak_reserved_bytes\":{},\"pytorch_peak_exact\":{}",
                       p.peak_reserved, p.exact ? "true" : "false");
  } else {
    out += ",\"pytorch_not_comparable\":" + json_string(p.why_not_comparable());
  }
  out += fmt::format(",\"pytorch_recorded_peak_reserved_bytes\":{}", p.peak_reserved);
  if (p.start_known) {
    out += fmt::format(
        ",\"pytorch_reserved_at_start_bytes\":{},\"pytorch_reserved_at_start_exact\":{},"
        "\"pytorch_peak_minus_start_bytes\":{}",
        p.reserved_at_start, p.start_exact ? "true" : "false", p.peak_minus_start());
  }
  return out;
}

}  // namespace cachalot::tools
