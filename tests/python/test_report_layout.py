"""The HTML report's pictures stay legible as runs grow (issue 19): heatmap row labels never
overlap (26 and 500 parameters), nothing is dropped past 80 rows, non-negative curves keep
their axis at or above zero (the learning rate), tick labels are short. Runs come from the
build's trainscope_server_gen; the report from the built CLI."""

import re
import subprocess

import pytest

from conftest import BUILD, CLI

GEN = BUILD / "trainscope_server_gen"

pytestmark = pytest.mark.skipif(not GEN.exists(), reason="needs build/trainscope_server_gen")


def report(tmp_path, layers, steps=120):
    subprocess.run([str(GEN), "demo", str(tmp_path), f"p{layers}", "--steps", str(steps), "--layers", str(layers)],
                   check=True, capture_output=True)
    out = tmp_path / f"p{layers}.html"
    subprocess.run([str(CLI), "report", str(tmp_path / f"p{layers}"), "-o", str(out)], check=True, capture_output=True)
    return out.read_text()


def heatmap_rows(html):
    svg = html[html.index("Gradient L2 norm per layer"):]
    svg = svg[:svg.index("</svg>")]
    return [(float(y), name) for y, name in re.findall(r'<text x="216" y="([0-9.]+)" class="ax" text-anchor="end">([^<]+)</text>', svg)]


@pytest.mark.parametrize("layers", [26, 500])
def test_heatmap_labels_never_overlap_and_no_row_is_dropped(tmp_path, layers):
    html = report(tmp_path, layers)
    rows = heatmap_rows(html)
    assert len(rows) == layers
    gaps = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    assert min(gaps) >= 12 - 1e-6, min(gaps)  # 10 px labels in rows of at least 12
    assert all(len(name) <= 38 for _, name in rows)
    assert 'class="heat"' in html  # the tall picture scrolls in its box


def test_axes_of_non_negative_values_stay_at_or_above_zero_and_ticks_are_short(tmp_path):
    html = report(tmp_path, 26)
    lr = html[html.index("<h2>Learning rate</h2>"):]
    lr = lr[:lr.index("</svg>")]
    ticks = re.findall(r'class="ax" text-anchor="end">([^<]+)</text>', lr)
    assert ticks, lr[:400]
    assert not any(t.startswith("-") for t in ticks), ticks
    start = html.index('<div class="heat">')
    curves = html[:start] + html[html.index("</div>", start):]  # the line charts, without the heatmap's row labels
    for t in re.findall(r'class="ax" text-anchor="(?:end|middle)">([^<]+)</text>', curves):
        assert len(t) <= 7 and "e+" not in t, t


def _number(label):
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(label[-1:], 1)
    return float(label[:-1] if scale != 1 else label) * scale


def test_tick_labels_sit_at_the_values_they_name_and_finding_labels_do_not_overlap(tmp_path):
    """Issue 30: a label names its tick's value (125 is never "130"): on each line chart the
    y labels' positions are linear in the values they read, x ticks are whole steps 1-2-5
    apart; finding labels on the loss chart never overlap; the heatmap's colour legend is
    written in numbers, not exponents of ten ("1e-1.6")."""
    html = report(tmp_path, 26, steps=300)
    start = html.index('<div class="heat">')
    charts = [c for c in re.split(r"<svg ", html[:start] + html[html.index("</div>", start):]) if 'class="ax"' in c]
    assert charts
    for svg in charts:
        ys = [(float(y), _number(t)) for y, t in re.findall(r'<text x="[0-9.]+" y="([0-9.]+)" class="ax" text-anchor="end">([^<]+)</text>', svg)]
        if "(log)" not in svg and len(ys) >= 3:
            (y0, v0), (y1, v1) = ys[0], ys[1]
            for y, v in ys[2:]:
                assert abs(y0 + (v - v0) * (y1 - y0) / (v1 - v0) - y) < 0.6, (ys, svg[:200])
        xs = [_number(t) for t in re.findall(r'class="ax" text-anchor="middle">([^<]+)</text>', svg)]
        assert all(x == int(x) for x in xs), xs
        if len(xs) >= 2:
            step = xs[1] - xs[0]
            assert step / 10 ** int(f"{step:e}".split("e")[1]) in (1, 2, 5), xs
    loss = html[html.index("<h2>Loss</h2>"):]
    loss = loss[:loss.index("</svg>")]
    marks = [(float(x), float(y), text) for x, y, text in re.findall(r'<text x="([0-9.]+)" y="([0-9.]+)" class="mk"[^>]*>([^<]+)</text>', loss)]
    assert len(marks) >= 2, loss[-600:]
    for i, (x, y, text) in enumerate(marks):
        for x2, y2, text2 in marks[i + 1:]:
            if y == y2:
                assert x + 6.2 * len(text) <= x2 or x2 + 6.2 * len(text2) <= x, (text, text2)
    legend = html[html.index("Gradient L2 norm per layer"):]
    assert not re.search(r">1e-?\d+\.\d", legend[:legend.index("</svg>")])
