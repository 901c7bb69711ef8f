"""run.watch() overhead measured in one process: the same model and optimizer trained in
blocks, unwatched and watched in turn (plain, defaults, everything, rotating order).

overhead.py gives each mode its own process; on the development VM that put the watched
defaults 2-4 % *below* plain, run after run: processes differ (allocator state, memory
layout) by more than the effect measured. Here every mode trains the same tensors in the
same process; a watcher is attached for a block (after 2 warm-up steps, which also fill its
weight snapshots) and closed after it. Reported: the median over rounds of the per-round
ratio of each mode's mean step time to plain's (wall time and the training thread's CPU
time; trainscope's helper threads are in the process CPU ratio).

    PYTHONPATH=build/python /usr/bin/python3 bench/watch/inprocess.py [lm|cnn] [--rounds 20] [--block 10]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

if __name__ == "__main__":  # before torch loads OpenBLAS: one thread, no spinning helpers
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch

import trainscope as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import cnn_setup, lm_setup  # noqa: E402

EVERYTHING = dict(every=1, histograms_every=1, activations_every=1, weights_every=1, units_every=1)
MODES = {"plain": None, "defaults": {}, "everything": EVERYTHING}
WARMUP = 2


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", choices=["lm", "cnn"], default="lm")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=10,
                        help="measured steps per block, after 2 warm-up steps (10: one weights step in each)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, opt, batches, loss_fn = (lm_setup if args.model == "lm" else cnn_setup)()
    run = ts.init(tempfile.mkdtemp(prefix="ts-inprocess-"), "inprocess", flush_interval=1.0)
    cursor = 0

    def block(options):
        nonlocal cursor
        watcher = run.watch(model, opt, checks=False, **options) if options is not None else None
        wall = cpu = process = 0.0
        for i in range(WARMUP + args.block):
            x, y = batches[cursor % len(batches)]
            cursor += 1
            if i == WARMUP:
                w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if watcher is not None:
                run.log({"train/loss": loss})
        wall, cpu, process = time.perf_counter() - w0, time.thread_time() - c0, time.process_time() - p0
        if watcher is not None:
            watcher.close()
        return wall / args.block, cpu / args.block, process / args.block

    names = list(MODES)
    for name in names:  # warm-up round
        block(MODES[name])
    per_round = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        per_round.append({name: block(MODES[name]) for name in order})
    run.finish()
    print(f"{args.model}: {args.rounds} rounds of {args.block} steps per mode in one process, torch "
          f"{torch.__version__}, 1 thread; load average {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'mode':<12}{'wall ms':>9}{'wall ratio':>12}{'(quartiles)':>20}{'thread ratio':>14}{'process ratio':>15}")
    for name in names:
        wall = statistics.median(r[name][0] for r in per_round)
        ratios = [[r[name][k] / r["plain"][k] - 1 for r in per_round] for k in range(3)]
        q1, _, q3 = statistics.quantiles(ratios[0], n=4)
        print(f"{name:<12}{wall * 1e3:>9.2f}{statistics.median(ratios[0]) * 100:>+11.2f}%"
              f"{f'({q1 * 100:+.2f} .. {q3 * 100:+.2f})':>20}{statistics.median(ratios[1]) * 100:>+13.2f}%"
              f"{statistics.median(ratios[2]) * 100:>+14.2f}%")


if __name__ == "__main__":
    sys.exit(main())
