"""run.watch() overhead with the modes interleaved step by step, in one process.

Several copies of the model (same seed, same batches), one per mode: one step of each mode
per round, in a fresh random order each round (seeded), so that no mode always follows the
same neighbour: with the order only rotated, each mode kept its predecessor (plain always
ran right after detect_anomaly, defaults right after plain), and the five-mode run put the
defaults 0.9 % *below* plain. Neighbouring steps share the
host's state (its other tenants, its clock), which on the shared development VM moves by
more than the effect measured; blocks of steps (overhead.py; inprocess.py before) let it drift
between the blocks compared. The copies themselves differ (their tensors lie at other
addresses: a first try with fixed roles measured one watched copy 3.6 % *faster* than the
plain one), so the roles rotate: each window the modes move to the next copy (a watcher is
attached for the window and closed after it; its first --warmup rounds are not measured),
and a cycle gives every mode every copy once.

Reported per mode: the ratio of its total step time to plain's per cycle (median and
quartiles over cycles) and over the whole run. Wall time of the loop iteration;
trainscope's helper thread, where it works beside the training, shows only as far as it
delays it. Also time/watch, trainscope's own measure of the time spent in its hooks and
wrappers in each step, against plain's step time.

    PYTHONPATH=build/python /usr/bin/python3 bench/watch/interleaved.py lm [--cycles 8] [--window 20]
    ... bench/watch/interleaved.py cnn --modes plain,defaults,everything
"""

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time

if __name__ == "__main__":  # before torch loads OpenBLAS: one thread, no spinning helpers
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch

import trainscope as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import EVERYTHING, cnn_setup, lm_setup, train_step  # noqa: E402

# dense: the first steps' dense phase (watch(dense_steps=...)) for the whole run, to price it;
# sparse: the defaults without it (the sampling of the code before it, for A/B runs).
# A/B of the watcher's special paths against the defaults: sync_grads waits for the gradient
# pass before the optimizer step instead of overlapping it; hot measures gradients inside
# backward (hot_gradients=True; "auto" leaves it off for torch.optim's optimizers).
WATCH_OPTIONS = {"defaults": {}, "everything": EVERYTHING, "dense": {"dense_steps": 10 ** 9},
                 "sparse": {"dense_steps": 0}, "sync_grads": {}, "hot": {"hot_gradients": True}}
AFTER_WATCH = {"sync_grads": lambda watcher: setattr(watcher, "_overlap", False)}
ALL_MODES = ["plain", "defaults", "everything", "naive", "anomaly", "dense", "sparse", "sync_grads", "hot"]


class Copy:
    """One copy of the model, its optimizer and its batches."""

    def __init__(self, setup):
        self.model, self.opt, batches, self.loss_fn = setup()
        self.batches = itertools.cycle(batches)


class Mode:
    def __init__(self, name, logdir):
        self.name = name
        self.run = ts.init(logdir, name, flush_interval=1.0) if name in WATCH_OPTIONS else None
        self.copy = self.watcher = self.batches = None
        self.seconds = []  # per window: wall seconds of each measured step
        self.watch_steps = []  # per window: the run's measured steps, [first, end)

    def take(self, copy):
        self.copy, self.batches = copy, copy.batches
        if self.run is not None:
            self.watcher = self.run.watch(copy.model, copy.opt, **WATCH_OPTIONS[self.name])
            AFTER_WATCH.get(self.name, lambda watcher: None)(self.watcher)
            self.batches = iter(self.run.data(copy.batches))
        self.seconds.append([])

    def release(self, measured_from):
        if self.watcher is not None:
            self.watcher.close()
            self.watch_steps.append((measured_from, self.run._step))

    def watch_total(self):
        """Seconds of time/watch over the measured steps (read once the run has finished)."""
        watch = ts.open_run(self.run.dir).scalars("time/watch")
        return sum(value for step, value in zip(watch["step"].tolist(), watch["value"].tolist())
                   if any(lo <= step < hi for lo, hi in self.watch_steps))

    def step(self):
        start = time.perf_counter()
        x, y = next(self.batches)
        train_step(self.name, self.copy.model, self.copy.opt, self.copy.loss_fn, x, y, self.run)
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", choices=["lm", "cnn"], default="lm")
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--window", type=int, default=20, help="measured rounds per window")
    parser.add_argument("--warmup", type=int, default=2, help="rounds of each window not measured")
    parser.add_argument("--modes", default="plain,defaults,everything,naive,anomaly")
    args = parser.parse_args()
    names = args.modes.split(",")
    if names[0] != "plain" or any(n not in ALL_MODES for n in names):
        parser.error(f"--modes: plain first, then any of {ALL_MODES[1:]}")
    torch.set_num_threads(1)
    logdir = tempfile.mkdtemp(prefix="ts-interleaved-")
    copies = [Copy(lm_setup if args.model == "lm" else cnn_setup) for _ in names]
    modes = [Mode(n, logdir) for n in names]
    order = random.Random(0)
    for window in range(args.cycles * len(modes)):
        for index, mode in enumerate(modes):
            mode.take(copies[(index + window) % len(copies)])
        measured_from = {m.name: m.run._step + args.warmup for m in modes if m.run is not None}
        for r in range(args.warmup + args.window):
            for mode in order.sample(modes, len(modes)):
                seconds = mode.step()
                if r >= args.warmup:
                    mode.seconds[-1].append(seconds)
        for mode in modes:
            mode.release(measured_from.get(mode.name))
    load = open("/proc/loadavg").read().split()[:3]
    for mode in modes:
        if mode.run is not None:
            mode.run.finish()
    n = len(modes)
    plain = modes[0]
    plain_total = sum(map(sum, plain.seconds))
    print(f"{args.model}: {args.cycles} cycles of {n} windows of {args.window} measured rounds, one step per mode "
          f"per round, one process; torch {torch.__version__}, 1 thread; load average {load}")
    print(f"{'mode':<12}{'ms/step':>9}{'cycle ratio':>13}{'(quartiles)':>20}{'whole run':>11}{'time/watch':>12}")
    for mode in modes:
        ratios = []
        for c in range(args.cycles):
            part = slice(c * n, (c + 1) * n)
            ratios.append(sum(map(sum, mode.seconds[part])) / sum(map(sum, plain.seconds[part])) - 1)
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        own = f"{mode.watch_total() / plain_total * 100:+.2f}%" if mode.run is not None else ""
        every = [s for window in mode.seconds for s in window]
        print(f"{mode.name:<12}{statistics.median(every) * 1e3:>9.2f}{statistics.median(ratios) * 100:>+12.2f}%"
              f"{f'({q1 * 100:+.2f} .. {q3 * 100:+.2f})':>20}{(sum(every) / plain_total - 1) * 100:>+10.2f}%"
              f"{own:>12}")


if __name__ == "__main__":
    sys.exit(main())
