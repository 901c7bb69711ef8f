#!/usr/bin/env python3
"""The store's write and read paths against plain SQLite on the same points (issue 28).

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/store/store_path.py --cli build/trainscope
      [--cli OTHER/trainscope ...] [--points 4e6,40e6] [--series 200] [--repeat 3]

For each size, one CSV of `steps x series` scalars (a loss falling with noise, a learning
rate, a gradient norm and per-layer norms: what a long run logs) is written once, then, for
each CLI given (e.g. the code before and after a change), in turns:

  write: `trainscope import run.csv -o store`   read: `trainscope diagnose store`

and, in the same run, plain SQLite on the same points (Python's sqlite3, one table
(series, step, value), one transaction): an insert of every point, and a scan that reads
every point back into the program (each row fetched and its value summed). Times are CPU seconds (user + system) of
the process doing the work, medians of --repeat, because the machine may be shared; peak
RSS from GNU time (run_measured). The ratios trainscope / plain SQLite are what the quick test
(tests/python/test_store_speed.py) guards: a 3x slowdown of either path moves them by 3x
whatever the machine.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def write_csv(path: pathlib.Path, steps: int, series: int, seed: int = 0) -> int:
    """A run of `steps` rows and `series` columns; returns the number of points."""
    rng = random.Random(seed)
    names = ["train/loss", "train/lr", "train/grad_norm"] + [f"layer{i}/weight_norm" for i in range(series - 3)]
    with open(path, "w") as f:
        f.write("step," + ",".join(names) + "\n")
        for s in range(steps):
            loss = 2.3 * math.exp(-s / max(1, steps / 4)) + 0.1 + 0.02 * rng.gauss(0, 1)
            row = [loss, 0.01, 1.0 + 0.1 * rng.gauss(0, 1)]
            row += [1.0 + 0.001 * s / steps + 0.01 * rng.gauss(0, 1) for _ in range(series - 3)]
            f.write(f"{s}," + ",".join(f"{v:.6g}" for v in row) + "\n")
    return steps * series


def read_points(path: pathlib.Path):
    """The CSV's points as (series, step, value) rows."""
    with open(path) as f:
        f.readline()
        for line in f:
            fields = line.split(",")
            step = int(fields[0])
            for k, v in enumerate(fields[1:]):
                yield k, step, float(v)


def run_measured(cmd, env=None) -> tuple[str, float, float, float]:
    """(stdout, wall s, CPU s, peak RSS MB) of one command; raises if it fails. The pipes are
    drained before the wait, so a child that writes a lot cannot block on them.

    The peak comes from GNU time (Debian's `time`), which forks the command itself: a child
    this process starts (by vfork) inherits this process's peak RSS as its own, so wait4's
    ru_maxrss reads at least what Python holds (416 MB while the points of a 4 M-point CSV
    are in memory, whatever the command did)."""
    start = time.perf_counter()
    peak_file = tempfile.NamedTemporaryFile(prefix="trainscope-peak-", delete=False)
    peak_file.close()
    timed = ["/usr/bin/time", "-f", "%M", "-o", peak_file.name] + [str(c) for c in cmd]
    proc = subprocess.Popen(timed, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    out = proc.stdout.read()
    reader.join()
    err = errors[0] if errors else b""
    _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): wait4 gives the child's usage
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.perf_counter() - start
    proc.stdout.close()
    proc.stderr.close()
    peak_text = pathlib.Path(peak_file.name).read_text().strip().splitlines()
    os.unlink(peak_file.name)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {err.decode(errors='replace')[-2000:]}")
    return out.decode(errors="replace"), wall, usage.ru_utime + usage.ru_stime, int(peak_text[-1]) / 1024


def sqlite_insert_and_scan(csv: pathlib.Path, db: pathlib.Path) -> tuple[float, float, int]:
    """CPU seconds of a plain insert of every point and of a scan reading them back."""
    points = list(read_points(csv))  # parsed before timing: the insert alone is compared
    if db.exists():
        db.unlink()
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE points (series INTEGER, step INTEGER, value REAL)")
    start = time.process_time()
    with con:
        con.executemany("INSERT INTO points VALUES (?, ?, ?)", points)
    insert = time.process_time() - start
    con.close()
    con = sqlite3.connect(db)
    start = time.process_time()
    n, total = 0, 0.0
    for _series, _step, value in con.execute("SELECT series, step, value FROM points"):
        n += 1
        total += value
    scan = time.process_time() - start
    con.close()
    return insert, scan, n


def measure(cli: pathlib.Path, csv: pathlib.Path, work: pathlib.Path) -> dict:
    """One import and one diagnose of `csv` by `cli`: CPU s, wall s, peak RSS MB."""
    store = work / "store"
    shutil.rmtree(store, ignore_errors=True)
    _, w_wall, w_cpu, w_rss = run_measured([cli, "import", csv, "-o", store])
    _, r_wall, r_cpu, r_rss = run_measured([cli, "diagnose", store])
    shutil.rmtree(store, ignore_errors=True)
    return {"write_cpu": w_cpu, "write_wall": w_wall, "write_rss": w_rss,
            "read_cpu": r_cpu, "read_wall": r_wall, "read_rss": r_rss}


def ratios(cli: pathlib.Path, steps: int, series: int, repeat: int, work: pathlib.Path) -> dict:
    """Medians over `repeat` turns of trainscope's and plain SQLite's CPU seconds, and their
    ratios (the quick test's measure)."""
    csv = work / f"run-{steps}x{series}.csv"
    if not csv.exists():
        write_csv(csv, steps, series)
    runs, inserts, scans = [], [], []
    for _ in range(repeat):
        runs.append(measure(cli, csv, work))
        insert, scan, n = sqlite_insert_and_scan(csv, work / "plain.db")
        inserts.append(insert)
        scans.append(scan)
        assert n == steps * series, (n, steps * series)
    (work / "plain.db").unlink(missing_ok=True)
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out["sqlite_insert_cpu"] = statistics.median(inserts)
    out["sqlite_scan_cpu"] = statistics.median(scans)
    out["write_ratio"] = out["write_cpu"] / out["sqlite_insert_cpu"]
    out["read_ratio"] = out["read_cpu"] / out["sqlite_scan_cpu"]
    out["points"] = steps * series
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", action="append", required=True, help="a trainscope binary (repeatable)")
    ap.add_argument("--points", default="4e6", help="comma-separated sizes (points)")
    ap.add_argument("--series", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None, help="folder for the CSVs and stores (default: a temp folder)")
    args = ap.parse_args()
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="trainscope-store-path-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; series {args.series}; "
          f"CPU seconds, medians of {args.repeat}\n")
    print("| points | trainscope | import CPU s | import points/s | import peak MB | diagnose CPU s | "
          "diagnose points/s | diagnose peak MB | SQLite insert CPU s | SQLite scan CPU s | "
          "import / insert | diagnose / scan |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in [int(float(p)) for p in args.points.split(",")]:
        steps = size // args.series
        for cli in args.cli:
            r = ratios(pathlib.Path(cli), steps, args.series, args.repeat, work)
            n = r["points"]
            print(f"| {n:,} | {cli} | {r['write_cpu']:.2f} | {n / r['write_cpu']:,.0f} | {r['write_rss']:.0f} | "
                  f"{r['read_cpu']:.2f} | {n / r['read_cpu']:,.0f} | {r['read_rss']:.0f} | "
                  f"{r['sqlite_insert_cpu']:.2f} | {r['sqlite_scan_cpu']:.2f} | {r['write_ratio']:.2f} | "
                  f"{r['read_ratio']:.2f} |", flush=True)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    main()
