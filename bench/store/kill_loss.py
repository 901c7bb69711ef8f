#!/usr/bin/env python3
"""What a SIGKILL loses: random kills of a watched training, each store checked (issue 28).

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/store/kill_loss.py --build build
      [--kills 100] [--heavy-share 0.5] [--seed 1]

The child is issue 28's: an MLP under `run.watch`, logging its loss and the step every step
and, in heavy mode, 1,000 more values a step; it prints each step's time after logging it.
Each kill comes at a random moment 1-6 s after the training starts. Afterwards the store
must pass SQLite's integrity check, read through trainscope, and hold a prefix of the
steps; the data lost is the kill's time minus the printed time of the last stored step (0
when the stored step is past the last printed one: the kill cut the print). Prints one line
per kill and a Markdown summary. tests/python/test_crash.py runs a few of these.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

CHILD = textwrap.dedent("""
    import sys, time
    import torch, torch.nn as nn
    import trainscope as ts
    logdir, mode = sys.argv[1], sys.argv[2]
    torch.manual_seed(0); torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = ts.init(logdir=logdir, name="victim", config={"mode": mode})
    run.watch(model, opt)
    x = torch.randn(64, 32); y = torch.randint(0, 10, (64,))
    print("READY", time.monotonic(), flush=True)
    extra = {f"heavy/v{i}": float(i) for i in range(1000)} if mode == "heavy" else None
    step = 0
    while True:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        d = {"train/loss": loss.item(), "train/step_echo": float(step)}
        if extra is not None:
            extra["heavy/v0"] = float(step); d.update(extra)
        run.log(d, step=step)
        print(step, time.monotonic(), flush=True)
        step += 1
""")


def kill_once(env, logdir: pathlib.Path, mode: str, delay: float) -> dict:
    """Trains, kills after `delay` seconds, checks the store. Returns what was kept and lost."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(logdir), mode], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    if not ready.startswith("READY"):
        raise RuntimeError(proc.stderr.read())
    # The child's lines are read as they come: a full pipe would stop its training.
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    time.sleep(delay)
    killed = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    reader.join(timeout=60)
    proc.stderr.close()
    printed = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            try:
                printed[int(parts[0])] = float(parts[1])
            except ValueError:
                pass  # the kill cut the line
    db = logdir / "victim" / "trainscope.db"
    with sqlite3.connect(db) as connection:
        integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
    import trainscope as ts
    view = ts.open_run(logdir / "victim")
    stored = view.scalars("train/step_echo")["step"].tolist() if view.series() else []
    last = int(stored[-1]) if stored else -1
    if last in printed:
        lost = killed - printed[last]
    elif printed and last > max(printed):
        lost = 0.0
    else:  # nothing of what was printed is stored
        lost = killed - (min(printed.values()) if printed else float(ready.split()[1]))
    return {"integrity": integrity, "status": view.meta.get("status"), "prefix": stored == list(range(len(stored))),
            "last_stored": last, "last_printed": max(printed) if printed else -1, "lost": lost}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--heavy-share", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    python_dir = str(pathlib.Path(args.build).resolve() / "python")
    sys.path.insert(0, python_dir)
    env = dict(os.environ, PYTHONPATH=python_dir, OPENBLAS_NUM_THREADS="1")
    rng = random.Random(args.seed)
    work = pathlib.Path(tempfile.mkdtemp(prefix="trainscope-kills-"))
    results = {"normal": [], "heavy": []}
    unreadable = 0
    for k in range(args.kills):
        mode = "heavy" if rng.random() < args.heavy_share else "normal"
        logdir = work / f"kill{k}"
        try:
            r = kill_once(env, logdir, mode, rng.uniform(1.0, 6.0))
        except Exception as e:  # an unreadable store is the failure this counts
            unreadable += 1
            print(f"kill {k} ({mode}): UNREADABLE: {e}", flush=True)
            continue
        ok = r["integrity"] == "ok" and r["prefix"] and r["status"] == "crashed"
        unreadable += not ok
        results[mode].append(r["lost"])
        print(f"kill {k} ({mode}): {'ok' if ok else 'BAD'}; stored through step {r['last_stored']} of "
              f"{r['last_printed']}; lost {r['lost']:.2f} s", flush=True)
        shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nmachine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
    print("| mode | kills | lost s: median | max | kills losing > 1 s |")
    print("|---|---:|---:|---:|---:|")
    for mode, lost in results.items():
        if lost:
            lost.sort()
            print(f"| {mode} | {len(lost)} | {lost[len(lost) // 2]:.2f} | {lost[-1]:.2f} | {sum(x > 1 for x in lost)} |")
    print(f"\nunreadable or inconsistent stores: {unreadable} of {args.kills}")


if __name__ == "__main__":
    main()
