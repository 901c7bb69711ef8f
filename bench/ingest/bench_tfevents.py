#!/usr/bin/env python3
"""Reading a large TensorBoard event file: trainscope vs TensorBoard's own loaders, side by
side in one run (issue 5).

  /usr/bin/python3 bench/ingest/bench_tfevents.py --build build [--mb 520] [--repeat 3]

Generates (once) an event file of scalars and histograms with `ingest_bench_read
--generate`, warms the page cache, then reads it with
  1. trainscope's reader alone (every record CRC-checked and decoded, values counted),
  2. trainscope's reader into an in-memory run (every point kept: what `diagnose` does),
  3. `trainscope import` into a store (SQLite),
  4. TensorBoard's data server (the Rust `server` of the tensorboard-data-server package,
     `--reload once --samples-per-plugin scalars=all,histograms=all`: every point kept),
     timed from start to its "Finished load cycle" log line,
  5. TensorBoard's Python EventAccumulator on a smaller file (it is too slow for 500 MB;
     MB/s is what is compared).
Medians of --repeat runs; wall time and CPU time (user + system), because the machine may
be shared. Every reader's point count is checked against what the generator wrote (the
data server's through its gRPC API, once, after its timing): the run stops if one is
short. Prints a Markdown table.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cpu_of(pid):
    """User + system seconds of a process (and its reaped children), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks


def peak_rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(cmd):
    """Runs cmd; returns (wall s, cpu s, peak RSS MB, stdout) via /usr/bin/time."""
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", *map(str, cmd)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"{cmd}: {r.stderr}")
    user, system, rss = r.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), int(rss) / 1024, r.stdout


# Asks a running data server (its gRPC API, as TensorBoard's frontend does) how many points
# it holds: every scalar, and every histogram (a tensor of the histograms plugin).
COUNT_DATA_SERVER = """
import sys, grpc
from tensorboard.data.proto import data_provider_pb2 as d, data_provider_pb2_grpc as g
channel = grpc.insecure_channel("localhost:" + sys.argv[1], options=[("grpc.max_receive_message_length", -1)])
stub = g.TensorBoardDataProviderStub(channel)
def count(plugin, list_rpc, read_rpc, list_req, read_req):
    listing = list_rpc(list_req(plugin_filter=d.PluginFilter(plugin_name=plugin)))
    n = 0
    for run in listing.runs:
        for tag in run.tags:
            flt = d.RunTagFilter(runs=d.RunFilter(names=[run.run_name]), tags=d.TagFilter(names=[tag.tag_name]))
            reply = read_rpc(read_req(plugin_filter=d.PluginFilter(plugin_name=plugin), run_tag_filter=flt,
                                      downsample=d.Downsample(num_points=2**62)))
            n += sum(len(t.data.step) for r in reply.runs for t in r.tags)  # columnar: one step per point
    return n
print(count("scalars", stub.ListScalars, stub.ReadScalars, d.ListScalarsRequest, d.ReadScalarsRequest),
      count("histograms", stub.ListTensors, stub.ReadTensors, d.ListTensorsRequest, d.ReadTensorsRequest))
"""


def data_server(server, logdir, python=None):
    """Loads logdir once with TensorBoard's data server; returns (wall, cpu, rss MB, points held).

    The points are counted (through the server's API, with `python`) after the timing is
    taken; None when not asked for."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = pathlib.Path(tmp) / "port"
        start = time.perf_counter()
        p = subprocess.Popen([server, "--logdir", str(logdir), "--reload", "once", "--samples-per-plugin",
                              "scalars=all,histograms=all", "--port", "0", "--port-file", str(port_file), "-v"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        try:
            for line in p.stderr:
                if "Finished load cycle" in line:
                    wall = time.perf_counter() - start
                    result = (wall, cpu_of(p.pid), peak_rss_mb(p.pid))
                    held = None
                    if python:
                        r = subprocess.run([python, "-c", COUNT_DATA_SERVER, port_file.read_text().strip()],
                                           capture_output=True, text=True)
                        if r.returncode != 0:
                            sys.exit(f"counting the data server's points failed: {r.stderr}")
                        held = tuple(map(int, r.stdout.split()))
                    return (*result, held)
            sys.exit("data server exited before finishing its load")
        finally:
            p.kill()
            p.wait()


def event_accumulator(python, path):
    code = """
import sys, time
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
t = time.process_time(); w = time.perf_counter()
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "histograms": 0})
acc.Reload()
n = sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"]) + sum(len(acc.Histograms(t)) for t in acc.Tags()["histograms"])
print(time.perf_counter() - w, time.process_time() - t, n)
"""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", python, "-c", code, str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    wall, cpu, n = r.stdout.split()
    return float(wall), float(cpu), int(r.stderr.strip().splitlines()[-1]) / 1024, int(n)


def check(reader, got, expected):
    """Every reader must deliver every point the generator wrote: a faster reader that drops
    points is not faster."""
    if got != expected:
        sys.exit(f"{reader}: expected {expected} points (scalars, histograms), got {got}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--mb", type=float, default=520)
    ap.add_argument("--ea-mb", type=float, default=30, help="size of the file for the Python EventAccumulator")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--venv", default=None, help="venv with tensorboard (default BUILD/venv-tb)")
    ap.add_argument("--scalars-only", action="store_true", help="a file of scalars only (no histograms)")
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    gen = build / "src" / "ingest" / "ingest_bench_read"
    cli = build / "trainscope"
    venv = pathlib.Path(args.venv or build / "venv-tb")
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    if subprocess.run([str(python), "-c", "import tensorboard_data_server"], capture_output=True).returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "tensorboard"], check=True)
    server = subprocess.run([str(python), "-c", "import tensorboard_data_server as t; print(t.server_binary())"],
                            capture_output=True, text=True, check=True).stdout.strip()

    data = build / ("bench_ingest_scalars" if args.scalars_only else "bench_ingest")
    big = data / "big" / "events.out.tfevents.1.bench"
    small = data / "small" / "events.out.tfevents.1.bench"
    written = {}  # file -> (scalars, histograms) as the generator wrote them
    for path, mb in [(big, args.mb), (small, args.ea_mb)]:
        counts = path.with_name("counts.json")  # next to the file: the servers read whole directories
        if not path.exists() or not counts.exists() or abs(path.stat().st_size - mb * 1e6) > 1e6:
            path.parent.mkdir(parents=True, exist_ok=True)
            cmd = [gen, "--generate", path, "--mb", str(mb)] + (["--scalars-only"] if args.scalars_only else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
            print(out, file=sys.stderr)
            counts.write_text(out)
        c = json.loads(counts.read_text())
        written[path] = (c["scalars"], c["histograms"])
    size = big.stat().st_size
    with open(big, "rb") as f:  # warm the page cache for everyone
        while f.read(1 << 24):
            pass

    rows = []
    points = None
    for sink in ["count", "run"]:
        out = json.loads(subprocess.run([gen, big, "--sink", sink, "--repeat", str(args.repeat)], capture_output=True,
                                        text=True, check=True).stdout)
        points = out["points"]
        check(f"trainscope reader, {sink} sink (delivered)", (out["scalars"], out["tensor_stats"]), written[big])
        check(f"trainscope reader, {sink} sink (kept)", out["kept"], sum(written[big]))
        label = {"count": "trainscope reader (CRC + decode every value)",
                 "run": "trainscope reader -> in-memory run (every point kept)"}[sink]
        rows.append((label, size, out["seconds"], out["cpu_seconds"], out["peak_rss_mb"], points))

    walls, cpus, rss = [], [], []
    for _ in range(args.repeat):
        out = pathlib.Path(tempfile.mkdtemp(dir=data))
        w, c, r, said = timed([cli, "import", big, "-o", out / "run"])
        m = re.search(r"(\d+) scalar points, (\d+) histograms", said)
        check("trainscope import", m and (int(m[1]), int(m[2])), written[big])
        walls.append(w), cpus.append(c), rss.append(r)
        shutil.rmtree(out)
    rows.append(("`trainscope import` -> SQLite store", size, statistics.median(walls), statistics.median(cpus),
                 max(rss), points))

    walls, cpus, rss = [], [], []
    for i in range(args.repeat):
        w, c, r, held = data_server(server, big.parent, str(python) if i == 0 else None)
        if held is not None:
            check("TensorBoard data server", held, written[big])
        walls.append(w), cpus.append(c), rss.append(r)
    rows.append(("TensorBoard data server (Rust, all samples kept)", size, statistics.median(walls),
                 statistics.median(cpus), max(rss), points))

    w, c, r, n = event_accumulator(str(python), small)
    check("TensorBoard EventAccumulator", n, sum(written[small]))
    rows.append((f"TensorBoard EventAccumulator (Python, {small.stat().st_size / 1e6:.0f} MB file)",
                 small.stat().st_size, w, c, r, n))

    kind = "scalars only" if args.scalars_only else "scalars + histograms"
    print(f"file: {size / 1e6:.0f} MB, {points} points ({kind}); medians of {args.repeat}")
    print(f"every reader delivered all {sum(written[big])} points ({written[big][0]} scalars, {written[big][1]} "
          f"histograms; EventAccumulator: all {sum(written[small])} of its file)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}\n")
    print("| reader | MB/s (wall) | MB/s per CPU-second | points/s (wall) | wall s | CPU s | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, nbytes, wall, cpu, peak, n in rows:
        print(f"| {label} | {nbytes / wall / 1e6:.0f} | {nbytes / cpu / 1e6:.0f} | {n / wall:,.0f} | {wall:.2f} | "
              f"{cpu:.2f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
