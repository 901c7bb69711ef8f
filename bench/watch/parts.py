"""Where run.watch()'s time goes: wall time per step of each watcher part, and its median
per call (a part that runs every k-th step, or waits now and then, skews the mean).

Wraps the Watcher's methods (and, with PROXY=1, its recorder calls) with a timer and
trains the benchmark transformer (lm), CNN (cnn) or the tiny MLP (mlp) for 100 steps (STEPS=n) after 5 of warm-up, with
Python's garbage collector off during them (a collection would be charged to whichever part
it starts in). The timer is perf_counter: on the development VM, time.thread_time is a
system call whose own first-in-the-step cost (~0.1 ms) swamped the small parts it timed.
Watch options go as key=value (Python literals):

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/watch/parts.py lm
    ... bench/watch/parts.py cnn every=1 histograms_every=1 activations_every=1
    BETWEEN=2 ... bench/watch/parts.py lm   # 2 plain steps of other copies between watched steps

BETWEEN=n trains n unwatched copies of the model between the watched steps, as
interleaved.py does: trainscope's code then runs as cold as it does there. Recorder calls
are timed (as rec.*) only with PROXY=1: the helper thread takes the real recorder, so the
passes it runs fail under the proxy.

"""

import collections
import gc
import os
import sys
import tempfile
import time

import torch

import trainscope as ts
from trainscope import watch as W

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import cnn_setup, lm_setup  # noqa: E402
from own_time import mlp_setup  # noqa: E402

SETUPS = {"lm": lm_setup, "cnn": cnn_setup, "mlp": mlp_setup}

PARTS = ["_before_update", "_gradient_pass", "_finish_gradients", "_after_update", "_weight_pass",
         "_refresh_snapshots", "_wait_weights", "_on_step_end", "_on_forward_begin", "_on_forward_end",
         "_submit_forward", "_commit_activations", "_log_inputs", "_hot_totals", "_inspect_batch",
         "_step_begin", "_step_returned", "_close_step", "_zero_grad", "_after_real_step"]


def main():
    torch.set_num_threads(1)
    which = sys.argv[1] if len(sys.argv) > 1 else "lm"
    options = {}
    for item in sys.argv[2:]:
        key, value = item.split("=", 1)
        options[key] = eval(value)  # a benchmark's command line: literals only
    spent = collections.defaultdict(float)
    calls = collections.defaultdict(int)
    each = collections.defaultdict(list)  # every call's seconds, for the median per call

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - start
                spent[name] += seconds
                calls[name] += 1
                each[name].append(seconds)
        return wrapper

    for name in PARTS:
        setattr(W.Watcher, name, timed(name, getattr(W.Watcher, name)))
    grad_hook, activation_hook = W.Watcher._grad_hook, W.Watcher._activation_hook
    W.Watcher._grad_hook = lambda self, slot, p: timed("grad_hook", grad_hook(self, slot, p))
    W.Watcher._activation_hook = lambda self, n, m: timed("act_hook", activation_hook(self, n, m))

    setup = SETUPS[which]
    model, opt, batches, loss_fn = setup()
    run = ts.init(logdir=tempfile.mkdtemp(prefix="ts-parts-"), name="parts")
    watcher = run.watch(model, opt, **options)

    class TimedRecorder:
        def __init__(self, recorder):
            self._recorder = recorder

        def __getattr__(self, key):
            attr = getattr(self._recorder, key)
            return timed("rec." + key, attr) if callable(attr) else attr

    if os.environ.get("PROXY"):
        watcher.rec = TimedRecorder(watcher.rec)

    others = [setup() for _ in range(int(os.environ.get("BETWEEN", "0")))]

    def plain_step(other, x, y):
        other_model, other_opt, _, _ = other
        other_opt.zero_grad()
        loss_fn(other_model(x), y).backward()
        other_opt.step()

    def train(steps):
        for _, (x, y) in zip(range(steps), run.data(batches * (steps // len(batches) + 1))):
            for other in others:
                plain_step(other, x, y)
            opt.zero_grad()
            start = time.perf_counter()
            out = model(x)
            spent["~forward (with hooks)"] += time.perf_counter() - start
            loss = loss_fn(out, y)
            start = time.perf_counter()
            loss.backward()
            spent["~backward (with hooks)"] += time.perf_counter() - start
            start = time.perf_counter()
            opt.step()
            spent["~optimizer.step (with wrapper)"] += time.perf_counter() - start
            run.log({"train/loss": loss})

    train(5)
    spent.clear()
    calls.clear()
    each.clear()
    steps = int(os.environ.get("STEPS", "100"))
    thread0, process0 = time.thread_time(), time.process_time()
    gc.collect()
    gc.disable()
    try:
        train(steps)
    finally:
        gc.enable()
    thread, process = time.thread_time() - thread0, time.process_time() - process0
    run.finish()
    watch = ts.open_run(run.dir).scalars("time/watch")["value"].tolist()[-steps:]
    print(f"time/watch {sum(watch) / steps * 1e3:.3f} ms/step (median {sorted(watch)[steps // 2] * 1e3:.3f})")
    print(f"{which} {options}: training thread {thread / steps * 1e3:.1f} ms CPU/step, process "
          f"{process / steps * 1e3:.1f} ms/step (other threads {(process - thread) / steps * 1e3:.1f} ms)")
    for name in sorted(spent, key=lambda k: -spent[k]):
        median = sorted(each[name])[len(each[name]) // 2] if each[name] else 0.0
        print(f"  {name:32s} {spent[name] / steps * 1e3:8.3f} ms/step   calls/step {calls[name] / steps:6.1f}"
              f"   median/call {median * 1e6:7.1f} us")


if __name__ == "__main__":
    main()
