"""run.log cost with the ts.init options that add work beside the writer: alert rules and
the TensorBoard mirror, side by side with a plain run, interleaved, medians of repeats.

    PYTHONPATH=build/python /usr/bin/python3 bench/log_options_bench.py [repeats]

Per configuration: p50/p99 of a one-value run.log (the training thread's cost, 200,000
calls), µs per value for 10-value dicts (1 M values), and the time until everything is
stored (finish), which includes the writer's extra work (rules, mirror).
"""

import os
import statistics
import sys
import tempfile
import time

import trainscope as ts

CONFIGS = {
    "plain": {},
    "alerts, no rule on the logged tags": {"alerts": [{"series": "val/acc", "below": 0.0}]},
    "alerts, a rule on every logged tag": {"alerts": [{"series": "*", "above": 1e30},
                                                       {"series": "train/loss", "above_median": 1e9}]},
    "tensorboard mirror": {"tensorboard": True},
}


def one_value_latency(logdir, name, options, calls=200_000):
    run = ts.init(logdir=logdir, name=name, **options)
    clock = time.perf_counter_ns
    samples = []
    for step in range(calls):
        t0 = clock()
        run.log({"train/loss": 0.25 + (step % 7) * 0.01}, step=step)
        samples.append(clock() - t0)
    run.finish()
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int(len(samples) * 0.99)] / 1e3


def ten_values(logdir, name, options, total=1_000_000):
    data = {f"layer{i}/value": 0.5 + i for i in range(10)}
    run = ts.init(logdir=logdir, name=name, **options)
    t0 = time.perf_counter()
    for step in range(total // 10):
        run.log(data, step=step)
    logged = time.perf_counter() - t0
    run.finish()
    return logged / total * 1e6, time.perf_counter() - t0


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    results = {name: {"p50": [], "p99": [], "us10": [], "stored": []} for name in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; {repeats} interleaved repeats")
        for r in range(repeats):
            for index, (name, options) in enumerate(CONFIGS.items()):
                p50, p99 = one_value_latency(tmp, f"lat{r}-{index}", options)
                us, stored = ten_values(tmp, f"ten{r}-{index}", options)
                results[name]["p50"].append(p50)
                results[name]["p99"].append(p99)
                results[name]["us10"].append(us)
                results[name]["stored"].append(stored)
        print(f"load at the end {os.getloadavg()[0]:.2f}")
    print(f"{'configuration':<38} {'1 value p50 us':>15} {'p99 us':>8} {'10 values us/value':>19} "
          f"{'1 M values stored s':>20}")
    for name, r in results.items():
        print(f"{name:<38} {statistics.median(r['p50']):>15.3f} {statistics.median(r['p99']):>8.2f} "
              f"{statistics.median(r['us10']):>19.3f} {statistics.median(r['stored']):>20.3f}")


if __name__ == "__main__":
    main()
