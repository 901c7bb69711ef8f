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
