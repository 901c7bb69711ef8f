"""Write-path benchmark of the Python client, with the naive baselines side by side.

    PYTHONPATH=build/python /usr/bin/python3 bench/log_bench.py

Prints: ts.init time; run.log cost per value for dicts of 1, 10 and 1,000 floats (the
training thread's cost) and the stored rate including the final flush; p50/p99 of one
one-value run.log call; and, in the same run, a naive sqlite3 executemany loop and JSON
lines writing the same values.
"""

import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time

started_import = time.perf_counter()
import trainscope as ts  # noqa: E402
IMPORT_SECONDS = time.perf_counter() - started_import


def bench_init(logdir, repeats=30):
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        run = ts.init(logdir=logdir, name=f"init{i}", config={"lr": 1e-3, "layers": 6})
        times.append(time.perf_counter() - t0)
        run.finish()
    return statistics.median(times)


def bench_log(logdir, values_per_call, total_values):
    calls = max(1, total_values // values_per_call)
    data = {f"layer{i}/value": 0.5 + i for i in range(values_per_call)}
    run = ts.init(logdir=logdir, name=f"log{values_per_call}")
    t0 = time.perf_counter()
    for step in range(calls):
        run.log(data, step=step)
    logged = time.perf_counter() - t0
    run.finish()
    stored = time.perf_counter() - t0
    n = calls * values_per_call
    return logged / n * 1e6, n / stored


def bench_latency(logdir, calls=200_000):
    run = ts.init(logdir=logdir, name="latency")
    clock = time.perf_counter_ns
    samples = []
    for step in range(calls):
        t0 = clock()
        run.log({"train/loss": 0.25})
        samples.append(clock() - t0)
    run.finish()
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int(len(samples) * 0.99)] / 1e3


def bench_sqlite_executemany(path, values_per_call, total_values):
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE points(tag TEXT, step INTEGER, value REAL)")
    data = {f"layer{i}/value": 0.5 + i for i in range(values_per_call)}
    t0 = time.perf_counter()
    for step in range(total_values // values_per_call):
        connection.executemany("INSERT INTO points VALUES(?, ?, ?)", [(k, step, v) for k, v in data.items()])
        if step % 100 == 0:
            connection.commit()
    connection.commit()
    elapsed = time.perf_counter() - t0
    connection.close()
    return elapsed / total_values * 1e6


def bench_jsonl(path, values_per_call, total_values):
    data = {f"layer{i}/value": 0.5 + i for i in range(values_per_call)}
    t0 = time.perf_counter()
    with open(path, "w") as out:
        for step in range(total_values // values_per_call):
            out.write(json.dumps({"step": step, **data}) + "\n")
    return (time.perf_counter() - t0) / total_values * 1e6


def main():
    total = int(os.environ.get("TS_BENCH_VALUES", 2_000_000))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"load {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
        print(f"import trainscope: {IMPORT_SECONDS * 1e3:.1f} ms")
        print(f"ts.init (median of 30): {bench_init(tmp) * 1e3:.2f} ms")
        p50, p99 = bench_latency(tmp)
        print(f"run.log one value: p50 {p50:.2f} us, p99 {p99:.2f} us")
        print(f"{'values/call':>12} {'trainscope us/value':>20} {'stored values/s':>16} "
              f"{'sqlite executemany us/value':>28} {'json lines us/value':>20}")
        for per_call in (1, 10, 1000):
            n = total if per_call > 1 else total // 4
            us, rate = bench_log(tmp, per_call, n)
            naive = bench_sqlite_executemany(os.path.join(tmp, f"naive{per_call}.db"), per_call, n)
            jsonl = bench_jsonl(os.path.join(tmp, f"log{per_call}.jsonl"), per_call, n)
            print(f"{per_call:>12} {us:>20.3f} {rate:>16,.0f} {naive:>28.3f} {jsonl:>20.3f}")


if __name__ == "__main__":
    main()
