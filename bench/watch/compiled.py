"""run.watch() overhead on a torch.compile'd model (torch 2.x), against the same model
compiled and unwatched, in one process.

Two copies of the model (same seed, same batches), each torch.compile'd (inductor by
default) and warmed up until compiled. Each round runs one step of each copy, in a seeded
random order; a window is --window rounds, and the watcher (run.watch defaults) moves to
the other copy at every window, so that neither copy's memory layout is always the watched
one. Reported: the median over windows of watched / plain median step time, its
quartiles, the ratio of the totals, and time/watch (trainscope's own measure of its hooks)
against plain's median step. Also that compiling saw no graph break and no extra graph.
One thread by default (--threads): on the shared 2-vCPU VM a second one only adds noise.

    PYTHONPATH=build/python "$(bash scripts/torch2-venv.sh)/bin/python" bench/watch/compiled.py lm [--windows 10] [--window 20]
    ... bench/watch/compiled.py cnn --backend aot_eager
    ... bench/watch/compiled.py lm --backend none     # the same loop eager, for comparison
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

import trainscope as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import cnn_setup, lm_setup  # noqa: E402


class Copy:
    def __init__(self, setup, backend):
        model, self.opt, self.batches, self.loss_fn = setup()
        self.model = model if backend == "none" else torch.compile(model, backend=backend)
        self.at = 0

    def step(self, run=None):
        x, y = self.batches[self.at % len(self.batches)]
        self.at += 1
        started = time.perf_counter()
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        if run is not None:
            run.log({"train/loss": loss})
        return time.perf_counter() - started


def quartiles(values):
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return q[0], q[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["lm", "cnn"])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="steps of each copy before measuring")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    setup = lm_setup if args.model == "lm" else cnn_setup
    counters.clear()
    started = time.perf_counter()
    copies = [Copy(setup, args.backend), Copy(setup, args.backend)]
    for copy in copies:
        for _ in range(args.warmup):
            copy.step()
    compile_seconds = time.perf_counter() - started
    unwatched_graphs = counters["stats"]["unique_graphs"]
    breaks_before = sum(counters["graph_break"].values())
    logdir = tempfile.mkdtemp(prefix="ts-bench-compiled-")
    run = ts.init(logdir, "watched", flush_interval=1.0)
    order = random.Random(args.seed)
    ratios, watched_total, plain_total, watch_seconds = [], 0.0, 0.0, []
    watched_all, plain_all = [], []
    for window in range(args.windows):
        watched, plain = copies[window % 2], copies[1 - window % 2]
        watcher = run.watch(watched.model, watched.opt, system_interval=0)
        for _ in range(2):  # the first steps of a watcher make its plans and series
            watched.step(run)
        first_step = run._step
        w_times, p_times = [], []
        for _ in range(args.window):
            pair = [(watched, w_times, run), (plain, p_times, None)]
            order.shuffle(pair)
            for copy, times, r in pair:
                times.append(copy.step(r))
        watcher.close()
        watch_seconds.append((first_step, run._step))
        ratios.append(statistics.median(w_times) / statistics.median(p_times))
        watched_total += sum(w_times)
        plain_total += sum(p_times)
        watched_all.extend(w_times)
        plain_all.extend(p_times)
    run.finish()
    graphs_after = counters["stats"]["unique_graphs"]
    breaks_after = sum(counters["graph_break"].values())
    view = ts.open_run(os.path.join(logdir, "watched"))
    scalars = view.scalars("time/watch")
    own = [v for s, v in zip(scalars["step"].tolist(), scalars["value"].tolist())
           if any(a <= s < b for a, b in watch_seconds)]
    plain_median = statistics.median(plain_all)
    q1, q3 = quartiles(ratios)
    print(f"torch {torch.__version__}, backend {args.backend}, model {args.model}, "
          f"{args.windows} windows x {args.window} rounds, threads {torch.get_num_threads()}")
    print(f"compile + warm-up {compile_seconds:.1f} s; graphs {unwatched_graphs} unwatched, {graphs_after} after "
          f"watching; graph breaks {breaks_before} -> {breaks_after}")
    print(f"step median: plain {1e3 * plain_median:.2f} ms, watched {1e3 * statistics.median(watched_all):.2f} ms")
    print(f"watched / plain, per window: median {statistics.median(ratios):.4f} (quartiles {q1:.4f} .. {q3:.4f}); "
          f"totals {watched_total / plain_total:.4f}")
    print(f"time/watch: median {1e3 * statistics.median(own):.3f} ms a step = "
          f"{100 * statistics.median(own) / plain_median:.2f} % of plain's median step")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
