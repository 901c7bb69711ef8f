"""Holistic Trace Analysis (HTA) beside `trainscope trace` on the same Kineto traces.

Run with the interpreter of a venv that has HTA (pip install HolisticTraceAnalysis):

  /work/helpers/venvs/hta/bin/python bench/perf/hta_compare.py --reference tests/data/hta_reference.json
      writes HTA's temporal and idle-time breakdowns of every trace (the test's reference)
  /work/helpers/venvs/hta/bin/python bench/perf/hta_compare.py --time --runs 5 --trainscope build/trainscope
      times HTA (load + analyses, in process) and trainscope (the whole command, a new process
      each run) and prints the medians and the agreement of the temporal breakdowns

Each trace is analysed alone (HTA reads a folder: each file is copied to a folder of its own).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "testdata", "external", "profiler_traces")
KEYS = ["idle_us", "compute_us", "non_compute_us", "kernel_us", "idle_pct", "compute_pct", "non_compute_pct"]
HTA_COLUMNS = ["idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)",
               "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"]


def quiet():
    import logging
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


def hta_analyses(folder):
    """HTA's load and the analyses trainscope also does; returns (seconds, results)."""
    from hta.trace_analysis import TraceAnalysis
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    out = {}
    rank = analyzer.t.get_ranks()[0]
    for name, call in [
        ("temporal", lambda: analyzer.get_temporal_breakdown(visualize=False)),
        ("idle", lambda: analyzer.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]),
        ("kernels", lambda: analyzer.get_gpu_kernel_breakdown(visualize=False)),
        ("overlap", lambda: analyzer.get_comm_comp_overlap(visualize=False)),
        ("launch", lambda: analyzer.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)),
    ]:
        try:
            out[name] = call()
        except Exception as e:  # HTA raises on traces without GPU kernels
            out[name] = e
    return time.perf_counter() - t0, rank, out


def one_folder(path, workdir):
    folder = os.path.join(workdir, os.path.basename(path) + ".d")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(path, folder)
    return folder


def hta_breakdowns(folder):
    _, rank, res = hta_analyses(folder)
    entry = {"rank": int(rank)}
    t = res["temporal"]
    if isinstance(t, Exception):
        entry["temporal_error"] = type(t).__name__
    else:
        row = t.iloc[0]
        entry["temporal"] = {k: float(row[c]) for k, c in zip(KEYS, HTA_COLUMNS)}
    idle = res["idle"]
    if not isinstance(idle, Exception):
        sums = idle.groupby("idle_category")["idle_time"].sum()
        entry["idle_breakdown"] = {k + "_us": float(v) for k, v in sums.items()}
    overlap = res["overlap"]
    if not isinstance(overlap, Exception) and len(overlap):
        value = float(overlap.iloc[0]["comp_comm_overlap_pctg"])
        if value == value:  # NaN: no communication kernels
            entry["comm_overlap_pct"] = value
    launch = res["launch"]
    if not isinstance(launch, Exception) and launch:
        df = list(launch.values())[0]
        if len(df):
            entry["launch_delay"] = {"count": int(len(df)), "median_us": float(df["launch_delay"].median()),
                                     "max_us": float(df["launch_delay"].max())}
    return entry


def reference(files, out_path):
    import hta
    quiet()
    ref = {"produced_by": "bench/perf/hta_compare.py --reference, HolisticTraceAnalysis " +
           getattr(hta, "__version__", "?") + " from PyPI: TraceAnalysis(trace_dir=<a folder with the one file>), "
           "get_temporal_breakdown(visualize=False), get_idle_time_breakdown(ranks=[rank]) summed over streams, "
           "get_comm_comp_overlap() (comm_overlap_pct), get_cuda_kernel_launch_stats() (launch_delay: count, median, max); "
           "include_last_profiler_step=False (HTA's default). 'hta' is HTA as it comes; 'hta_no_ns_rounding' is "
           "HTA with HTA_DISABLE_NS_ROUNDING=1 (by default HTA rounds the events of traces with fractional "
           "microseconds inward to whole microseconds: ts up, end down)", "traces": {}}
    with tempfile.TemporaryDirectory() as work:
        for f in files:
            folder = one_folder(f, work)
            os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
            entry = {"hta": hta_breakdowns(folder)}
            os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
            entry["hta_no_ns_rounding"] = hta_breakdowns(folder)
            os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
            ref["traces"][os.path.basename(f)] = entry
    with open(out_path, "w") as fh:
        json.dump(ref, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {out_path} ({len(files)} traces)")


def trainscope_core(trainscope):
    """The built _core module, loaded by its path (the venv has HTA, not torch: the package's
    __init__ is not imported)."""
    import glob
    import importlib.util
    folder = os.path.join(os.path.dirname(os.path.abspath(trainscope)), "python", "trainscope")
    found = glob.glob(os.path.join(folder, "_core*.so"))
    if not found:
        return None
    spec = importlib.util.spec_from_file_location("_core", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module if hasattr(module, "analyze_traces") else None


def timing(files, runs, trainscope):
    """Per trace: HTA's load + analyses in process; trainscope's read + every analysis in
    process (_core.analyze_traces, what run.profile calls) and as a whole command (a new
    process each run, `trainscope trace --json`)."""
    quiet()
    core = trainscope_core(trainscope)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for f in files:
            folder = one_folder(f, work)
            hta_times, proc_times, core_times = [], [], []
            for _ in range(runs):
                seconds, _, res = hta_analyses(folder)
                hta_times.append(seconds)
            for _ in range(runs):
                t0 = time.perf_counter()
                out = subprocess.run([trainscope, "trace", "--json", f], capture_output=True, text=True, check=True).stdout
                proc_times.append(time.perf_counter() - t0)
                if core is not None:
                    t0 = time.perf_counter()
                    core.analyze_traces([f], 10, False)
                    core_times.append(time.perf_counter() - t0)
            mine = json.loads(out)["ranks"][0]["temporal"]
            t = res["temporal"]
            diff = "HTA: " + type(t).__name__ if isinstance(t, Exception) else \
                "%.2f pct points" % max(abs(mine[k] - float(t.iloc[0][c])) for k, c in zip(KEYS[4:], HTA_COLUMNS[4:]))
            h, p = statistics.median(hta_times), statistics.median(proc_times)
            c = statistics.median(core_times) if core_times else float("nan")
            rows.append((os.path.basename(f), os.path.getsize(f), h, c, p, diff))
    print(f"medians of {runs} runs each")
    print("| trace | bytes | HTA load + analyses | trainscope in process | speed-up | `trainscope trace --json` (process) | speed-up | temporal breakdown vs HTA (max) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, size, h, c, p, diff in rows:
        print(f"| {name} | {size} | {h * 1e3:.1f} ms | {c * 1e3:.2f} ms | {h / c:.0f}x | {p * 1e3:.1f} ms | {h / p:.0f}x | {diff} |")
    th, tc, tp = (sum(r[i] for r in rows) for i in (2, 3, 4))
    print(f"| all {len(rows)} | {sum(r[1] for r in rows)} | {th * 1e3:.0f} ms | {tc * 1e3:.1f} ms | {th / tc:.0f}x | {tp * 1e3:.0f} ms | {th / tp:.0f}x | |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", default=TRACES, help="folder of Kineto traces")
    p.add_argument("--extra", action="append", default=[], help="another trace file to time (not in the reference)")
    p.add_argument("--reference", help="write HTA's breakdowns to this JSON")
    p.add_argument("--time", action="store_true", help="time HTA and trainscope")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--trainscope", default="build/trainscope")
    a = p.parse_args()
    files = sorted(os.path.join(a.traces, f) for f in os.listdir(a.traces) if f.endswith((".json", ".json.gz")))
    if a.reference:
        reference(files, a.reference)
    if a.time:
        timing(files + a.extra, a.runs, a.trainscope)
    if not a.reference and not a.time:
        p.error("give --reference FILE and/or --time")


if __name__ == "__main__":
    sys.exit(main())
