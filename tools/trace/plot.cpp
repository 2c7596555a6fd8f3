// SVG rendering of memory-over-time charts (see plot.hpp): panels stacked on one x axis,
// legends to the right of each panel.
#include "trace/plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

namespace cachalot::tools {
namespace {

constexpr double width = 1100;
constexpr double left = 90, right = 240, top = 70, bottom = 56, gap = 44;
constexpr double plot_w = width - left - right;
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
  double y0, h;  // top of the panel and its height
  double px(double x) const { return left + x / x_max * plot_w; }
  double py(double y) const { return y0 + h - y / y_max * h; }
};

void draw_axes(std::string& svg, const frame& f, const char* unit, const std::string& y_label) {
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
        f.px(x), f.y0, f.px(x), f.y0 + f.h, f.px(x), f.y0 + f.h + 16, count_label(x));
  }
  svg += fmt::format(
      "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n"
      "<text transform='translate(22 {}) rotate(-90)' text-anchor='middle' "
      "font-size='13'>{} ({})</text>\n",
      left, f.y0, plot_w, f.h, f.y0 + f.h / 2, escape(y_label), unit);
}

void draw_series(std::string& svg, const frame& f, const plot_series& s) {
  if (s.x.empty()) return;
  std::string points;
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    points += fmt::format("{:.1f},{:.1f} ", f.px(s.x[i]), f.py(s.y[i]));
  }
  svg += fmt::format(
      "<polyline fill='none' stroke='{}' stroke-width='{:.1f}' stroke-linejoin='round'{} "
      "points='{}'/>\n",
      s.color, s.width, s.dashed ? " stroke-dasharray='6 4'" : "", points);
}

void draw_hline(std::string& svg, const frame& f, const plot_hline& l) {
  if (l.y > f.y_max) return;
  svg += fmt::format(
      "<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}' stroke-width='1.2' "
      "stroke-dasharray='2 3'/><text x='{:.1f}' y='{:.1f}' text-anchor='end' font-size='11' "
      "fill='{}'>{}</text>\n",
      left, f.py(l.y), left + plot_w, f.py(l.y), l.color, left + plot_w - 6, f.py(l.y) - 4, l.color,
      escape(l.label));
}

void draw_legend(std::string& svg, const frame& f, const std::vector<plot_series>& series) {
  double y = f.y0 + 14;
  for (const plot_series& s : series) {
    const double x = left + plot_w + 6;
    svg += fmt::format(
        "<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' stroke='{}' stroke-width='3'{}/>"
        "<text x='{:.1f}' y='{:.1f}' font-size='11'>{}</text>\n",
        x, y - 4, x + 18, y - 4, s.color, s.dashed ? " stroke-dasharray='6 4'" : "", x + 22, y,
        escape(s.label));
    y += 16;
  }
}

double panel_x_max(const plot_spec& spec) {
  double x_max = 1;
  for (const plot_panel& p : spec.panels) {
    for (const plot_series& s : p.series) {
      for (const double v : s.x) x_max = std::max(x_max, v);
    }
  }
  return x_max;
}

void draw_panel(std::string& svg, const plot_panel& p, double x_max, double y0) {
  double y_max = 1;
  for (const plot_series& s : p.series) {
    for (const double v : s.y) y_max = std::max(y_max, v);
  }
  for (const plot_hline& l : p.hlines) y_max = std::max(y_max, l.y);
  const auto [div, unit] = byte_unit(y_max);
  const frame f{x_max, y_max * 1.05, div, y0, p.height};
  draw_axes(svg, f, unit, p.y_label);
  std::vector<const plot_series*> order;
  for (const plot_series& s : p.series) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const plot_series* a, const plot_series* b) { return a->width > b->width; });
  for (const plot_series* s : order) draw_series(svg, f, thin(*s, x_max));
  for (const plot_hline& l : p.hlines) draw_hline(svg, f, l);
  draw_legend(svg, f, p.series);
}

}  // namespace

std::string render_svg(const plot_spec& spec) {
  double height = top + bottom - gap;
  for (const plot_panel& p : spec.panels) height += p.height + gap;
  std::string svg = fmt::format(
      "<?xml version='1.0' encoding='UTF-8'?>\n"
      "<svg xmlns='http://www.w3.org/2000/svg' width='{0}' height='{1}' viewBox='0 0 {0} {1}' "
      "font-family='DejaVu Sans, Arial, sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{2}' y='28' font-size='17' font-weight='bold'>{3}</text>\n"
      "<text x='{2}' y='50' font-size='13' fill='#333'>{4}</text>\n",
      width, height, left, escape(spec.title), escape(spec.subtitle));
  const double x_max = panel_x_max(spec);
  double y0 = top;
  for (const plot_panel& p : spec.panels) {
    draw_panel(svg, p, x_max, y0);
    y0 += p.height + gap;
  }
  svg += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='13'>{}</text>\n",
                     left + plot_w / 2, height - 16, escape(spec.x_label));
  svg += "</svg>\n";
  return svg;
}

plot_spec replay_plot(const std::string& trace_name, const replay_result& r,
                      const replay_result* baseline) {
  plot_spec spec;
  spec.title = trace_name + ": device memory during the replay";
  spec.subtitle = fmt::format(
      "{} ops on {}; peak requested {}, peak reserved {}, {}", r.ops, r.backend,
      format_size(static_cast<double>(r.peak_requested)),
      format_size(static_cast<double>(r.peak_reserved)),
      r.complete() ? fmt::format("fragmentation {:.3f}", r.fragmentation)
                   : fmt::format("INCOMPLETE: {} allocations refused (out of memory)", r.ooms));
  spec.x_label = "operations (allocations and frees, in log order)";
  using field = std::size_t timeline_point::*;
  auto series = [](std::string label, const char* color, bool dashed, double w,
                   const replay_result& res, field a, field minus) {
    plot_series s{std::move(label), color, dashed, w, {}, {}};
    for (const timeline_point& p : res.timeline) {
      s.x.push_back(static_cast<double>(p.op));
      const double v = static_cast<double>(p.*a);
      s.y.push_back(minus == nullptr ? v : v - static_cast<double>(p.*minus));
    }
    return s;
  };
  plot_panel bytes{"memory", {}, {}, 330};
  bytes.series.push_back(
      series("reserved", "#d62728", false, 1.6, r, &timeline_point::reserved, nullptr));
  if (baseline != nullptr) {
    bytes.series.push_back(series("pass-through reserved", "#2ca02c", false, 6, *baseline,
                                  &timeline_point::reserved, nullptr));
  }
  bytes.series.push_back(
      series("allocated", "#ff7f0e", false, 3.5, r, &timeline_point::allocated, nullptr));
  bytes.series.push_back(
      series("requested", "#1f77b4", true, 1.6, r, &timeline_point::requested, nullptr));
  bytes.hlines.push_back({"capacity " + format_size(static_cast<double>(r.capacity)), "#555",
                          static_cast<double>(r.capacity)});
  if (r.memory_limit != 0 && r.memory_limit < r.capacity) {
    bytes.hlines.push_back({"limit " + format_size(static_cast<double>(r.memory_limit)), "#9467bd",
                            static_cast<double>(r.memory_limit)});
  }
  plot_panel gaps{"over requested", {}, {}, 170};
  gaps.series.push_back(series("reserved - requested", "#d62728", false, 1.6, r,
                               &timeline_point::reserved, &timeline_point::requested));
  gaps.series.push_back(series("allocated - requested", "#ff7f0e", false, 1.6, r,
                               &timeline_point::allocated, &timeline_point::requested));
  if (baseline != nullptr) {
    gaps.series.push_back(series("pass-through reserved - requested", "#2ca02c", true, 1.6,
                                 *baseline, &timeline_point::reserved, &timeline_point::requested));
  }
  spec.panels = {std::move(bytes), std::move(gaps)};
  return spec;
}

std::string timeline_csv(const replay_result& r) {
  std::string out = "op,requested,allocated,reserved\n";
  for (const timeline_point& p : r.timeline) {
    out += fmt::format("{},{},{},{}\n", p.op, p.requested, p.allocated, p.reserved);
  }
  return out;
}

}  // namespace cachalot::tools
