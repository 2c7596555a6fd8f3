// SVG rendering of memory-over-time charts (see plot.hpp).
#include "trace/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

namespace cachalot::tools {
namespace {

constexpr double width = 960, height = 520;
constexpr double left = 90, right = 30, top = 78, bottom = 62;
constexpr double plot_w = width - left - right, plot_h = height - top - bottom;
constexpr std::size_t max_points = 1200;

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// A tick step near `range / 6` of the form 1, 2 or 5 times a power of ten.
double nice_step(double range) {
  const double raw = std::max(range, 1e-9) / 6.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double f = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  return f * mag;
}

/// Binary unit for a maximum byte value: divisor and name.
std::pair<double, const char*> byte_unit(double max_bytes) {
  constexpr std::array<const char*, 5> names = {"B", "KiB", "MiB", "GiB", "TiB"};
  double div = 1;
  std::size_t i = 0;
  while (i + 1 < names.size() && max_bytes >= div * 1024) div *= 1024, ++i;
  return {div, names[i]};
}

std::string count_label(double v) {
  if (v >= 1e6) return fmt::format("{:g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:g}k", v / 1e3);
  return fmt::format("{:g}", v);
}

std::string format_size(double bytes) {
  const auto [div, unit] = byte_unit(bytes);
  return fmt::format("{:.2f} {}", bytes / div, unit);
}

/// Keeps the highest point of each of `max_points` x buckets (the envelope of the line).
plot_series thin(const plot_series& s, double x_max) {
  if (s.x.size() <= max_points || x_max <= 0) return s;
  plot_series out = s;
  out.x.clear();
  out.y.clear();
  std::size_t bucket = SIZE_MAX;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    const auto b = static_cast<std::size_t>(s.x[i] / x_max * (max_points - 1));
    if (b != bucket) {
      out.x.push_back(s.x[i]);
      out.y.push_back(s.y[i]);
      bucket = b;
    } else if (s.y[i] > out.y.back()) {
      out.y.back() = s.y[i];
    }
  }
  return out;
}

struct frame {
  double x_max, y_max, y_div;
  double px(double x) const { return left + x / x_max * plot_w; }
  double py(double y) const { return top + plot_h - y / y_max * plot_h; }
};

void draw_axes(std::string& svg, const frame& f, const char* unit, const std::string& x_label) {
  const double y_step = nice_step(f.y_max / f.y_div) * f.y_div;
  for (double y = 0; y <= f.y_max * 1.0001; y += y_step) {
    svg += fmt::format(
        "<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#ddd'/>"
        "<text x='{:.1f}' y='{:.1f}' text-anchor='end' font-size='12'>{:g}</text>\n",
        left, f.py(y), left + plot_w, f.py(y), left - 8, f.py(y) + 4, y / f.y_div);
  }
  const double x_step = nice_step(f.x_max);
  for (double x = 0; x <= f.x_max * 1.0001; x += x_step) {
    svg += fmt::format(
        "<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='#eee'/>"
        "<text x='{:.1f}' y='{:.1f}' text-anchor='middle' font-size='12'>{}</text>\n",
        f.px(x), top, f.px(x), top + plot_h, f.px(x), top + plot_h + 18, count_label(x));
  }
  svg += fmt::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n"
      "<text x='{}' y='{}' text-anchor='middle' font-size='13'>{}</text>\n"
      "<text transform='translate(22 {}) rotate(-90)' text-anchor='middle' "
      "font-size='13'>memory ({})</text>\n",
      left, top, plot_w, plot_h, left + plot_w / 2, height - 18, escape(x_label), top + plot_h / 2,
      unit);
}

void draw_series(std::string& svg, const frame& f, const plot_series& s) {
  if (s.x.empty()) return;
  std::string points;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    points += fmt::format("{:.1f},{:.1f} ", f.px(s.x[i]), f.py(s.y[i]));
  }
  svg += fmt::format(
      "<polyline fill='none' stroke='{}' stroke-width='1.6' stroke-linejoin='round'{} "
      "points='{}'/>\n",
      s.color, s.dashed ? " stroke-dasharray='6 4'" : "", points);
}

void draw_legend(std::string& svg, const std::vector<plot_series>& series) {
  double x = left + 12;
  const double y = top + 18;
  for (const plot_series& s : series) {
    svg += fmt::format(
        "<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}' stroke-width='3'{}/>"
        "<text x='{:.1f}' y='{:.1f}' font-size='12'>{}</text>\n",
        x, y - 4, x + 24, y - 4, s.color, s.dashed ? " stroke-dasharray='6 4'" : "", x + 30, y,
        escape(s.label));
    x += 30 + 7.0 * static_cast<double>(s.label.size()) + 24;
  }
}

}  // namespace

std::string render_svg(const plot_spec& spec) {
  double x_max = 1, y_max = 1;
  for (const plot_series& s : spec.series) {
    for (const double v : s.x) x_max = std::max(x_max, v);
    for (const double v : s.y) y_max = std::max(y_max, v);
  }
  const auto [div, unit] = byte_unit(y_max);
  y_max *= 1.12;  // room for the legend
  const frame f{x_max, y_max, div};
  std::string svg = fmt::format(
      "<?xml version='1.0' encoding='UTF-8'?>\n"
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0}' height='{1}' viewBox='0 0 {0} {1}' "
      "font-family='DejaVu Sans, Arial, sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{2}' y='28' font-size='17' font-weight='bold'>{3}</text>\n"
      "<text x='{2}' y='50' font-size='13' fill='#333'>{4}</text>\n",
      width, height, left, escape(spec.title), escape(spec.subtitle));
  draw_axes(svg, f, unit, spec.x_label);
  for (const plot_series& s : spec.series) draw_series(svg, f, thin(s, x_max));
  draw_legend(svg, spec.series);
  svg += "</svg>\n";
  return svg;
}

plot_spec replay_plot(const std::string& trace_name, const replay_result& r,
                      const replay_result* baseline) {
  plot_spec spec;
  spec.title = trace_name + ": device memory during the replay";
  spec.subtitle =
      fmt::format("{} ops on {}; peak requested {}, peak reserved {}, fragmentation {:.3f}, {} OOM",
                  r.ops, r.backend, format_size(static_cast<double>(r.peak_requested)),
                  format_size(static_cast<double>(r.peak_reserved)), r.fragmentation, r.ooms);
  spec.x_label = "operations (allocations and frees, in log order)";
  auto series = [](const char* label, const char* color, bool dashed, const replay_result& res,
                   std::size_t timeline_point::*field) {
    plot_series s{label, color, dashed, {}, {}};
    for (const timeline_point& p : res.timeline) {
      s.x.push_back(static_cast<double>(p.op));
      s.y.push_back(static_cast<double>(p.*field));
    }
    return s;
  };
  spec.series.push_back(series("reserved", "#d62728", false, r, &timeline_point::reserved));
  spec.series.push_back(series("allocated", "#ff7f0e", false, r, &timeline_point::allocated));
  spec.series.push_back(series("requested", "#1f77b4", false, r, &timeline_point::requested));
  if (baseline != nullptr) {  // last, dashed on top: it hugs the requested line
    spec.series.push_back(
        series("pass-through reserved", "#2ca02c", true, *baseline, &timeline_point::reserved));
  }
  return spec;
}

}  // namespace cachalot::tools
