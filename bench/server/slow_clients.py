#!/usr/bin/env python3
"""`trainscope serve` under slow clients and many runs (issue 28).

  /usr/bin/python3 bench/server/slow_clients.py --build build [--cli OTHER/trainscope ...]
      [--slow 80] [--requests 200] [--runs 30] [--load 10000]

For each CLI (e.g. the code before and after a change), on one logdir of --runs generated
runs (trainscope_server_gen demo, 300 steps each):
  1. latency: --requests GETs of /api/run, one after the other, alone and then while --slow
     connections trickle their headers (a byte each per request, so none is ever idle long
     enough to be cut); median and p99 in ms, and how many timed out (10 s);
  2. memory: --load requests spread over the runs and endpoints (run, scalars, findings,
     layers), the server's RSS sampled every 1,000.
Prints Markdown.
"""

from __future__ import annotations

import argparse
import http.client
import os
import pathlib
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time


def serve(cli, logdir):
    proc = subprocess.Popen([str(cli), "serve", str(logdir), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    port = int(re.search(r":(\d+)/", proc.stdout.readline()).group(1))
    return proc, port


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_get(port, target, timeout=10):
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request("GET", target)
        res = conn.getresponse()
        res.read()
        conn.close()
        return time.perf_counter() - start, res.status
    except (OSError, http.client.HTTPException):
        return None, None


def latency(port, requests, slow_count):
    slow = []
    for _ in range(slow_count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        slow.append(s)
    waits, failed = [], 0
    try:
        for _ in range(requests):
            for s in slow:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass
            wait, status = timed_get(port, "/api/run?run=run00")
            if wait is None or status != 200:
                failed += 1
            else:
                waits.append(wait * 1000)
    finally:
        for s in slow:
            s.close()
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else float("nan")
    return (statistics.median(waits) if waits else float("nan")), p99, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--cli", action="append", default=None)
    ap.add_argument("--slow", type=int, default=80)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--load", type=int, default=10000)
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    clis = args.cli or [str(build / "trainscope")]
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="trainscope-slow-"))
    for k in range(args.runs):
        subprocess.run([str(build / "trainscope_server_gen"), "demo", str(logdir), f"run{k:02d}", "--steps", "300"],
                       check=True, capture_output=True)
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {args.runs} runs of 300 steps\n")
    print(f"| trainscope | alone: median ms | alone: p99 ms | {args.slow} slow clients: median ms | p99 ms | "
          f"timed out | RSS MB after 0 / {args.load:,} requests | RSS MB at each 1,000 |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    endpoints = ["/api/run?run={}", "/api/scalars?run={}&tag=train/loss&width=500", "/api/findings?run={}",
                 "/api/layers?run={}"]
    for cli in clis:
        proc, port = serve(cli, logdir)
        try:
            alone = latency(port, args.requests, 0)
            slow = latency(port, args.requests, args.slow)
            time.sleep(6)  # the slow connections' workers are free again
            start_rss = rss_mb(proc.pid)
            samples = []
            for i in range(args.load):
                run = f"run{i % args.runs:02d}"
                timed_get(port, endpoints[(i // args.runs) % len(endpoints)].format(run))
                if (i + 1) % 1000 == 0:
                    samples.append(rss_mb(proc.pid))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        print(f"| {cli} | {alone[0]:.1f} | {alone[1]:.1f} | {slow[0]:.1f} | {slow[1]:.1f} | {slow[2]} | "
              f"{start_rss:.0f} / {samples[-1]:.0f} | {' '.join(f'{r:.0f}' for r in samples)} |", flush=True)
    shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    main()
