"""The pieces behind python -m cachalot.report and scripts/snapshot_table.py that need no replay:
the smallest-capacity search, sizes, the SVG chart."""
import xml.etree.ElementTree as ET

import pytest

from cachalot import _replaytools as rt
from cachalot import _svg
from cachalot import report

MiB = 1 << 20


@pytest.mark.parametrize("need,peak,found", [
    (37 * MiB, 30 * MiB, 38 * MiB),   # rounded up to the 2 MiB granule
    (30 * MiB, 30 * MiB, 30 * MiB),   # exactly the peak
    (300 * MiB, 30 * MiB, 300 * MiB),  # after doubling
    (1 * MiB, 1, 2 * MiB),            # never below one granule
])
def test_smallest_capacity_is_the_first_granule_that_fits(need, peak, found):
    probed = []

    def fits(capacity):
        probed.append(capacity)
        return capacity >= need

    assert rt.smallest_capacity(fits, peak) == (found, len(probed))
    assert all(c % rt.GRANULE == 0 for c in probed)
    assert all(c >= peak for c in probed) or peak < rt.GRANULE  # below the peak nothing fits


def test_smallest_capacity_gives_up_past_the_limit():
    assert rt.smallest_capacity(lambda c: False, 10 * MiB, max_factor=4)[0] is None


@pytest.mark.parametrize("text,value", [("80GiB", 80 << 30), ("512MiB", 512 * MiB),
                                        ("1.5GiB", 3 << 29), ("4096", 4096), ("2 kib", 2048)])
def test_sizes(text, value):
    assert report.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1GiB", "0", "3 PB"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        report.parse_size(text)


def test_bytes_are_printed_in_binary_units():
    assert [report.format_bytes(n) for n in (512, 3 * MiB // 2, 80 << 30, None)] == \
        ["512 B", "1.50 MiB", "80.00 GiB", "-"]


def test_the_chart_keeps_peaks_and_names_every_series():
    spike = [(i, 10 * MiB) for i in range(20000)]
    spike[12345] = (12345, 900 * MiB)  # one operation's peak among 20,000 points
    doc = _svg.line_chart("t <&>", "sub", [_svg.Series("live", spike, "#1f77b4"),
                                           _svg.Series("reserved", [(0, 0), (19999, MiB)],
                                                       "#d62728", dashed=True)],
                          markers=[(5000, "window begins")])
    root = ET.fromstring(doc.split("\n", 1)[1])  # well-formed SVG
    ns = "{http://www.w3.org/2000/svg}"
    lines = list(root.iter(ns + "polyline"))
    assert len(lines) == 2
    ys = [float(p.split(",")[1]) for p in lines[0].attrib["points"].split()]
    # the spike survives the reduction to the chart's width: its y is the smallest (highest)
    assert len(ys) < 4000 and min(ys) < 100
    texts = [t.text for t in root.iter(ns + "text")]
    assert "t <&>" in texts and "live" in texts and "reserved" in texts
    assert "window begins" in texts and "memory (MiB)" in texts
