"""A sequence model trained the way PyTorch's examples/time_sequence_prediction/train.py
does it: two LSTMCells and a Linear over sine waves, float64, MSELoss, and LBFGS(lr=0.8)
stepped with a closure that zeroes the gradients, runs the forward and the backward and
returns the loss; the test loss after each step. Small enough for a CPU.

The waves are generated here, as the example's generate_sine_wave.py does.

    /usr/bin/python3 tests/python/scripts/lstm_lbfgs.py --logdir runs [--fault NAME]

Faults (--fault):
  no_zero_grad  the closure does not call optimizer.zero_grad(): every evaluation adds its
                gradient to the last ones, LBFGS's line search works on a sum of stale
                gradients (GRAD_NOT_ZEROED)
  lr_high       LBFGS(lr=20) where the example has 0.8, with no line search

Variants (--variant), healthy runs that look odd:
  converged     40 steps: LBFGS reaches its tolerance and stops moving the weights

The run directory gets truth.json: the fault and the step at which it is real.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
import torch.nn as nn

import trainscope as ts

FAULTS = ("none", "no_zero_grad", "lr_high")
VARIANTS = ("none", "converged")


def make_waves(n=24, length=200, period=20, seed=2):
    rng = np.random.RandomState(seed)
    x = np.empty((n, length), "int64")
    x[:] = np.arange(length) + rng.randint(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


class Sequence(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        n = input.size(0)
        h_t = torch.zeros(n, self.hidden, dtype=torch.double)
        c_t = torch.zeros(n, self.hidden, dtype=torch.double)
        h_t2 = torch.zeros(n, self.hidden, dtype=torch.double)
        c_t2 = torch.zeros(n, self.hidden, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    data = make_waves()
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    seq = Sequence().double()
    criterion = nn.MSELoss()
    if args.variant == "converged":
        args.steps = 40
    lr = 20.0 if args.fault == "lr_high" else 0.8
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=lr, max_iter=8)

    name = args.name or f"lstm_lbfgs-{args.fault}" + ("" if args.variant == "none" else f"-{args.variant}")
    truth = {"script": "lstm_lbfgs", "fault": args.fault, "step": None if args.fault == "none" else 0,
             "closure_calls": []}
    config = dict(optimizer="lbfgs", lr=lr, max_iter=8, fault=args.fault, variant=args.variant)
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(seq, optimizer)
        for i in range(args.steps):
            calls = 0

            def closure():
                nonlocal calls
                calls += 1
                if args.fault != "no_zero_grad":
                    optimizer.zero_grad()
                out = seq(input)
                loss = criterion(out, target)
                loss.backward()
                return loss

            loss = optimizer.step(closure)
            truth["closure_calls"].append(calls)
            with torch.no_grad():
                future = 50
                pred = seq(test_input, future=future)
                test_loss = criterion(pred[:, :-future], test_target)
            run.log({"train/loss": loss.item(), "val/loss": test_loss.item()})
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
