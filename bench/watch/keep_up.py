"""Does run.watch()'s helper thread keep up with a fast training? The tiny MLP of
own_time.py under watch() defaults, paced at given step rates (and unpaced), for --steps
steps each.

The helper never drops a statistic: the training thread waits for the step's gradient pass
before the gradients change again (its next zero_grad or forward), so a helper that cannot
keep up shows as that wait, not as lost points. Reported per rate: the rate reached, the
median and p99 wait per step on the training thread, the share of steps that had to wait
(the pass not done when asked), the recorder's dropped points (its queue full), and whether
every step's gradient norm and input statistics reached the store.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/watch/keep_up.py --rates 1000,2000,3000,0
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

import trainscope as ts
from trainscope._watch.watcher import Watcher

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from own_time import mlp_setup  # noqa: E402


def measure(rate, steps):
    torch.set_num_threads(1)
    model, opt, batches, loss_fn = mlp_setup()
    run = ts.init(tempfile.mkdtemp(prefix="keep-up-"), name=f"rate-{rate}")
    watcher = run.watch(model, opt)
    waits, late = [], [0]
    finish = Watcher._finish_gradients

    def timed_finish(self):  # the training thread's wait for the gradient pass
        ticket = self._grad_ticket
        if ticket is not None and not ticket.done():
            late[0] += 1
        started = time.perf_counter()
        finish(self)
        waits.append(time.perf_counter() - started)
    Watcher._finish_gradients = timed_finish
    try:
        period = 1.0 / rate if rate else 0.0
        loader = (batches * (steps // len(batches) + 1))[:steps]
        started = time.perf_counter()
        for i, (x, y) in enumerate(run.data(loader)):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            run.log({"train/loss": loss})
            while period and time.perf_counter() < started + (i + 1) * period:
                pass
        elapsed = time.perf_counter() - started
        dropped = run._recorder.dropped
        run.finish()
    finally:
        Watcher._finish_gradients = finish
    view = ts.open_run(run.dir)
    norms = len(view.scalars("grad/global_norm")["step"])
    inputs = len(view.tensor_stats("input/0"))
    del watcher
    return {"rate": rate, "reached": steps / elapsed, "wait_median_us": 1e6 * statistics.median(waits),
            "wait_p99_us": 1e6 * sorted(waits)[int(0.99 * len(waits))], "late": late[0] / max(1, len(waits)),
            "dropped": dropped, "norms": norms, "inputs": inputs, "steps": steps}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,2000,3000,0", help="steps per second; 0: as fast as it goes")
    parser.add_argument("--steps", type=int, default=6000)
    args = parser.parse_args()
    print(f"{'asked':>7} {'reached':>8} {'wait med us':>11} {'wait p99 us':>11} {'late':>6} {'dropped':>7} "
          f"{'norms':>6} {'inputs':>6} {'of':>6}")
    for rate in (int(r) for r in args.rates.split(",")):
        r = measure(rate, args.steps)
        print(f"{rate or 'max':>7} {r['reached']:8.0f} {r['wait_median_us']:11.1f} {r['wait_p99_us']:11.1f} "
              f"{100 * r['late']:5.1f}% {r['dropped']:7d} {r['norms']:6d} {r['inputs']:6d} {r['steps']:6d}",
              flush=True)


if __name__ == "__main__":
    main()
