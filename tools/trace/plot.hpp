// SVG charts of memory over a replay, against the operation count, with axes, binary units, a
// grid and a legend per panel. The replay chart has two panels: the bytes themselves
// (cachalot's reserved, allocated and requested bytes and the pass-through baseline's reserved
// bytes, drawn widest first so that lines lying on top of each other all stay visible, plus the
// device capacity and the memory limit as horizontal lines), and below it the gaps over the
// requested bytes (reserved - requested, allocated - requested, and the baseline's reserved -
// requested), which the first panel's scale hides. Plain SVG 1.1 text, no scripts.
#pragma once

#include <string>
#include <vector>

#include "trace/replay.hpp"

namespace cachalot::tools {

/// One line of a chart.
struct plot_series {
  std::string label;      ///< legend text
  std::string color;      ///< SVG colour
  bool dashed = false;    ///< dashed line
  double width = 1.6;     ///< stroke width (wider lines are drawn first)
  std::vector<double> x;  ///< x values
  std::vector<double> y;  ///< y values (bytes)
};

/// A horizontal reference line (a capacity, a limit).
struct plot_hline {
  std::string label;  ///< text at its right end
  std::string color;  ///< SVG colour
  double y = 0;       ///< bytes
};

/// One chart area: a y-axis label, lines and reference lines, and its share of the height.
struct plot_panel {
  std::string y_label;              ///< y-axis label (the unit is appended)
  std::vector<plot_series> series;  ///< lines
  std::vector<plot_hline> hlines;   ///< reference lines
  double height = 380;              ///< pixels
};

/// A chart: title, subtitle, x-axis label and panels stacked top to bottom (sharing the x axis).
struct plot_spec {
  std::string title;               ///< top line
  std::string subtitle;            ///< second line (key figures)
  std::string x_label;             ///< x-axis label
  std::vector<plot_panel> panels;  ///< chart areas
};

/// Renders a chart as an SVG document.
std::string render_svg(const plot_spec& spec);

/// The sampled timeline of a replay as CSV: the header "op,requested,allocated,reserved", then
/// one line per sample (operations done, bytes).
std::string timeline_csv(const replay_result& r);

/// The chart of one replay (see the file comment); `baseline` may be null.
plot_spec replay_plot(const std::string& trace_name, const replay_result& r,
                      const replay_result* baseline);

}  // namespace cachalot::tools
