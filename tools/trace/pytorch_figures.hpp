// What a trace converted from a PyTorch memory snapshot says about PyTorch's own run, and when
// PyTorch's figure may stand next to a replay's. `python -m cachalot.convert` writes it as
// "# pytorch.KEY: VALUE" comment lines: peak_reserved (and peak_reserved_kind exact or
// lower-bound), reserved_at_start (what PyTorch had reserved when the recorded window began, with
// its kind), reconstructed_allocations and reconstructed_bytes (the live set at the window's
// start, which the converter puts as allocations at the trace's start).
//
// Like with like: a replay starts with nothing reserved. PyTorch's recorded peak compares with
// it only when PyTorch too started the window with nothing reserved (a cold start, known
// exactly). Otherwise the recorded peak includes the cache of earlier phases, which the trace
// never asked for; the reports then print why, and the peak minus the bytes reserved before the
// window (what PyTorch added in it), labelled as such, never beside cachalot's peak as if
// comparable.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cachalot::tools {

/// PyTorch's figures from a converted trace's comment lines.
struct pytorch_figures {
  bool present = false;               ///< the trace carries a "# pytorch.peak_reserved" line
  std::size_t peak_reserved = 0;      ///< PyTorch's peak reserved bytes over the window
  bool exact = false;                 ///< exact (snapshot segments known), else a lower bound
  bool start_known = false;           ///< the trace carries "# pytorch.reserved_at_start"
  std::size_t reserved_at_start = 0;  ///< reserved bytes when the window began
  bool start_exact = false;           ///< exact, else a lower bound
  std::size_t reconstructed_allocations = 0;  ///< live set at the start, reconstructed
  std::size_t reconstructed_bytes = 0;        ///< its requested bytes

  /// PyTorch had nothing reserved and nothing allocated when the window began (known exactly).
  bool cold_start() const noexcept {
    return start_known && start_exact && reserved_at_start == 0 && reconstructed_allocations == 0;
  }
  /// The recorded peak compares with a replay's peak reserved (a cold start).
  bool comparable() const noexcept { return present && cold_start(); }
  /// The recorded peak minus the bytes reserved before the window (0 when unknown).
  std::size_t peak_minus_start() const noexcept {
    return peak_reserved > reserved_at_start ? peak_reserved - reserved_at_start : 0;
  }
  /// Why the recorded peak is not comparable ("" when it is).
  std::string why_not_comparable() const;
};

/// Reads a "pytorch.KEY" comment's value into `p`; false when `key` is not one of the keys
/// above (other comments are ignored). @throws std::invalid_argument for a bad number
bool read_pytorch_key(pytorch_figures& p, std::string_view key, std::string_view value);

/// The report's lines about PyTorch (each indented two spaces, ending in a newline; "" when the
/// trace has no PyTorch figures). `cachalot_peak_reserved`: the replay's, shown beside
/// PyTorch's only when comparable; 0 leaves cachalot out.
std::string pytorch_text(const pytorch_figures& p, std::size_t cachalot_peak_reserved);

/// PyTorch's figures as JSON members, each with a leading comma ("" without figures):
/// pytorch_comparable, pytorch_peak_reserved_bytes and pytorch_peak_exact (only when
/// comparable), pytorch_recorded_peak_reserved_bytes, pytorch_reserved_at_start_bytes,
/// pytorch_reserved_at_start_exact and pytorch_peak_minus_start_bytes (when the start is known),
/// pytorch_not_comparable (the reason, when not), reconstructed_allocations and
/// reconstructed_bytes.
std::string pytorch_json(const pytorch_figures& p);

}  // namespace cachalot::tools
