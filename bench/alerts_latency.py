"""How long a "stop" alert rule takes to stop a real PyTorch training, in ms and in steps.

    PYTHONPATH=build/python /usr/bin/python3 bench/alerts_latency.py [repeats]

An MLP regression trains with a rule `nonfinite = true, actions = ["stop"]` on train/loss;
at step 100 its learning rate jumps to 1e6, so the loss overflows a few steps later. The
delay is from the run.log() of the first non-finite loss to ts.StopTraining, for models of
three widths (three step times), flush_interval = 1 s (the default) and 30 s. Medians of
`repeats` trainings each (default 5).
"""

import math
import os
import statistics
import sys
import tempfile
import time

import torch

import trainscope as ts

RULES = [{"name": "loss not finite", "series": "train/loss", "nonfinite": True, "actions": ["stop"]}]


def one_training(logdir, name, width, flush_interval):
    torch.manual_seed(0)
    x = torch.randn(1024, 64)
    y = x @ torch.randn(64, 1) / 8
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(logdir=logdir, name=name, alerts=RULES, flush_interval=flush_interval, doctor=False)
    logged_at, first_bad = [], None
    try:
        for step in range(1_000_000):
            if step == 100:
                for group in optimizer.param_groups:
                    group["lr"] = 1e6
            index = torch.randint(0, 1024, (128,))
            loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            value = loss.item()
            logged_at.append(time.perf_counter())
            if first_bad is None and not math.isfinite(value):
                first_bad = step
            run.log({"train/loss": value}, step=step)
    except ts.StopTraining:
        stopped_at = time.perf_counter()
    run.finish()
    step_ms = (logged_at[99] - logged_at[0]) / 99 * 1e3
    return step_ms, (stopped_at - logged_at[first_bad]) * 1e3, step - first_bad


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; torch {torch.__version__}; {repeats} repeats")
    print(f"{'width':>6} {'flush s':>8} {'step ms':>8} {'delay ms (median, max)':>24} {'delay steps (median, max)':>26}")
    with tempfile.TemporaryDirectory() as tmp:
        for width in (64, 1024, 8192):
            for flush in (1.0, 30.0):
                rows = [one_training(tmp, f"w{width}-f{flush}-{r}", width, flush) for r in range(repeats)]
                step_ms = statistics.median(r[0] for r in rows)
                delays = [r[1] for r in rows]
                steps = [r[2] for r in rows]
                print(f"{width:>6} {flush:>8.0f} {step_ms:>8.2f} {statistics.median(delays):>15.1f}, "
                      f"{max(delays):>6.1f} {statistics.median(steps):>17.0f}, {max(steps):>6}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
