"""A line chart of memory over a trace as a standalone SVG 1.1 document (no scripts): step lines
of bytes against the trace's operations, with axes in binary units, a grid and a legend.

Series longer than the chart is wide are reduced to the highest value of each pixel column, so
that a peak is never drawn lower than it was.
"""
from xml.sax.saxutils import escape

__all__ = ["Series", "line_chart"]

_UNITS = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))


class Series:
    """One line: ``points`` are (x, bytes) pairs in x order; the value holds until the next."""

    def __init__(self, label, points, color, width=1.6, dashed=False):
        self.label, self.points, self.color = label, list(points), color
        self.width, self.dashed = width, dashed


def _unit(top):
    for scale, name in _UNITS:
        if top >= scale:
            return scale, name
    return 1, "B"


def _step(top):
    """A round grid step giving 4 to 10 lines below `top`."""
    step = 1
    while top / step > 10:
        for m in (2, 2.5, 2):
            step *= m
            if top / step <= 10:
                break
    return step


def _reduce(points, x0, x1, columns):
    """At most `columns` points: the highest value in each column, at its x."""
    if len(points) <= 2 * columns or x1 <= x0:
        return points
    out, col, best = [], None, None
    for x, y in points:
        c = int((x - x0) * columns / (x1 - x0))
        if c != col:
            if best is not None:
                out.append(best)
            col, best = c, (x, y)
        elif y > best[1]:
            best = (best[0], y)
    out.append(best)
    return out


def line_chart(title, subtitle, series, x_label="operations", width=960, height=420,
               markers=()):
    """The SVG text of a chart of `series` (a list of Series); `markers`: (x, label) pairs drawn
    as labelled vertical lines."""
    left, right, top, bottom = 80, 24, 58, 48 + 18 * ((len(series) + 1) // 2)
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series for x, _ in s.points] or [0, 1]
    ys = [y for s in series for _, y in s.points] or [0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    ymax = max(max(ys), 1) * 1.05
    scale, unit = _unit(ymax)
    step = _step(ymax / scale) * scale

    def px(x):
        return left + (x - x0) * pw / (x1 - x0)

    def py(y):
        return top + ph - y * ph / ymax

    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>' % (left,
                                                                              escape(title)),
           '<text x="%d" y="40" fill="#444">%s</text>' % (left, escape(subtitle))]
    y = 0.0
    while y <= ymax:
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>'
                   % (left, py(y), left + pw, py(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>'
                   % (left - 6, py(y) + 4, round(y / scale, 3)))
        y += step
    out.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">'
               'memory (%s)</text>' % (top + ph // 2, top + ph // 2, unit))
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                   % (px(x), top + ph + 16, round(x)))
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>'
               % (left + pw // 2, top + ph + 32, escape(x_label)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
               % (left, top, pw, ph))
    for x, label in markers:
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#777" '
                   'stroke-dasharray="2,3"/>' % (px(x), top, px(x), top + ph))
        out.append('<text x="%.1f" y="%d" fill="#555">%s</text>' % (px(x) + 4, top + 14,
                                                                    escape(label)))
    for s in sorted(series, key=lambda s: -s.width):  # widest first: all stay visible
        pts = _reduce(s.points, x0, x1, pw)
        if not pts:
            continue
        path = ["%.1f,%.1f" % (px(pts[0][0]), py(pts[0][1]))]
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            path.append("%.1f,%.1f %.1f,%.1f" % (px(xb), py(ya), px(xb), py(yb)))
        path.append("%.1f,%.1f" % (px(x1), py(pts[-1][1])))
        out.append('<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>'
                   % (s.color, s.width, ' stroke-dasharray="6,4"' if s.dashed else "",
                      " ".join(path)))
    for i, s in enumerate(series):
        lx = left + (i % 2) * (pw // 2)
        ly = top + ph + 48 + 18 * (i // 2)
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"%s/>'
                   % (lx, ly - 4, lx + 28, ly - 4, s.color, max(s.width, 2),
                      ' stroke-dasharray="6,4"' if s.dashed else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 34, ly, escape(s.label)))
    out.append("</svg>")
    return "\n".join(out) + "\n"
