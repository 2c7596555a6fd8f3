// SVG line charts of memory over a replay: requested, allocated and reserved bytes against
// the operation count, with axes, binary units, a grid and a legend. Plain SVG 1.1 text, no
// scripts, readable in a browser or converted to PNG with rsvg-convert.
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
  std::vector<double> x;  ///< x values
  std::vector<double> y;  ///< y values (bytes)
};

/// A chart: title, subtitle, x-axis label and lines.
struct plot_spec {
  std::string title;                ///< top line
  std::string subtitle;             ///< second line (key figures)
  std::string x_label;              ///< x-axis label
  std::vector<plot_series> series;  ///< lines, drawn in order
};

/// Renders a chart as an SVG document.
std::string render_svg(const plot_spec& spec);

/// The chart of one replay; `baseline`, when not null, adds its reserved bytes dashed.
plot_spec replay_plot(const std::string& trace_name, const replay_result& r,
                      const replay_result* baseline);

}  // namespace cachalot::tools
