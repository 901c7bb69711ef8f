#!/usr/bin/env python3
"""A long run: trainscope's memory against the run's length, and diagnose on the result
(issue 28).

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/store/soak.py --build build
      [--steps 1000000] [--scalars 200] [--every 10000] [--svg docs/img/soak_rss.svg]

A small MLP is trained for --steps steps under `run.watch` (defaults), logging the loss and
--scalars other scalars every step (issue 28's child.py). The training process samples its
own RssAnon every --every steps. The same loop without trainscope runs for 20,000 steps as
the reference level. Then `trainscope diagnose --json` reads the run: its CPU seconds, peak
RSS and findings (MEMORY_LEAK must not be among them). Prints Markdown; --svg draws RSS
against steps.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

from store_path import run_measured  # bench/store, beside this script

CHILD = r"""
import json, sys, time
import torch, torch.nn as nn
logdir, steps, n, every, monitored = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
def anon_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
torch.manual_seed(0); torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
if monitored:
    import trainscope as ts
    run = ts.init(logdir=logdir, name="soak")
    run.watch(model, opt)
x = torch.randn(64, 32); y = torch.randint(0, 10, (64,))
extra = {f"soak/v{i}": float(i) for i in range(n)}
samples = []
start = time.monotonic()
for step in range(steps):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    extra["soak/v0"] = float(step)
    d = {"train/loss": loss.item()}
    d.update(extra)
    if monitored:
        run.log(d, step=step)
    if step % every == 0 or step == steps - 1:
        samples.append([step, anon_mb(), time.monotonic() - start])
if monitored:
    run.finish()
samples.append([steps, anon_mb(), time.monotonic() - start])
print(json.dumps(samples))
"""


def svg(samples, reference, path):
    """RSS (MB) against steps: the monitored run's samples and the reference level."""
    w, h, left, bottom = 640, 320, 60, 40
    max_step = max(s for s, _, _ in samples) or 1
    top = max(max(r for _, r, _ in samples), reference) * 1.15
    x = lambda s: left + (w - left - 20) * s / max_step
    y = lambda r: h - bottom - (h - bottom - 20) * r / top
    pts = " ".join(f"{x(s):.1f},{y(r):.1f}" for s, r, _ in samples)
    ticks = "".join(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>'
                    f'<line x1="{left}" x2="{w - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                    for v in [top * k / 4 for k in range(5)])
    xticks = "".join(f'<text x="{x(max_step * k / 4):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                     f'{max_step * k / 4:,.0f}</text>' for k in range(5))
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">'
        f'{ticks}{xticks}'
        f'<line x1="{left}" x2="{w - 20}" y1="{y(reference):.1f}" y2="{y(reference):.1f}" stroke="#999" '
        f'stroke-dasharray="4 3"/><text x="{w - 22}" y="{y(reference) - 4:.1f}" text-anchor="end" fill="#666">'
        f'without trainscope</text>'
        f'<polyline points="{pts}" fill="none" stroke="#3b6ea5" stroke-width="2"/>'
        f'<text x="{left}" y="12">anonymous RSS of the training process, MB</text>'
        f'<text x="{w - 20}" y="{h - 6}" text-anchor="end">step</text></svg>\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--scalars", type=int, default=200)
    ap.add_argument("--every", type=int, default=10_000)
    ap.add_argument("--logdir", default=None)
    ap.add_argument("--svg", default=None)
    args = ap.parse_args()
    build = pathlib.Path(args.build).resolve()
    logdir = pathlib.Path(args.logdir or tempfile.mkdtemp(prefix="trainscope-soak-"))
    env = dict(os.environ, PYTHONPATH=str(build / "python"), OPENBLAS_NUM_THREADS="1")

    ref_out, *_ = run_measured([sys.executable, "-c", CHILD, str(logdir), "20000", str(args.scalars),
                                str(args.every), "0"], env)
    reference = max(r for _, r, _ in json.loads(ref_out))
    out, wall, cpu, _ = run_measured([sys.executable, "-c", CHILD, str(logdir), str(args.steps),
                                      str(args.scalars), str(args.every), "1"], env)
    samples = json.loads(out)
    run_dir = logdir / "soak"
    report, d_wall, d_cpu, d_rss = run_measured([str(build / "trainscope"), "diagnose", "--json", str(run_dir)])
    codes = [f["code"] + "/" + f["severity"] for f in json.loads(report)["findings"]]
    points = args.steps * (args.scalars + 1)
    size = sum(p.stat().st_size for p in run_dir.iterdir() if p.is_file())

    first = next(r for s, r, _ in samples if s >= min(args.every, args.steps))
    peak = max(r for _, r, _ in samples)
    print(f"steps {args.steps:,} x {args.scalars + 1} scalars = {points:,} points logged; training "
          f"{wall:.0f} s wall ({args.steps / samples[-1][2]:,.0f} steps/s), {cpu:.0f} CPU s; store {size / 1e9:.2f} GB")
    print(f"anonymous RSS: without trainscope {reference:.0f} MB; with it {first:.0f} MB at step "
          f"{min(args.every, args.steps):,}, {peak:.0f} MB at most, {samples[-1][1]:.0f} MB after finish()")
    print(f"diagnose: {d_wall:.1f} s wall, {d_cpu:.1f} CPU s, {points / d_cpu:,.0f} points per CPU-second, "
          f"peak RSS {d_rss:.0f} MB; findings: {', '.join(codes) or 'none'}")
    print(f"MEMORY_LEAK found: {'yes' if any(c.startswith('MEMORY_LEAK') for c in codes) else 'no'}\n")
    print("| step | anonymous RSS MB | seconds |")
    print("|---:|---:|---:|")
    stride = max(1, len(samples) // 10)
    for s, r, t in samples[::stride] + ([samples[-1]] if (len(samples) - 1) % stride else []):
        print(f"| {s:,} | {r:.0f} | {t:.0f} |")
    if args.svg:
        svg(samples, reference, args.svg)


if __name__ == "__main__":
    main()
