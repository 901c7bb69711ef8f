"""Runs whose pictures are known in advance, for tests/e2e/truth.e2e.mjs.

    /usr/bin/python3 tests/e2e/truth_fixture.py LOGDIR

nan-at-40   a small ReLU MLP learns a synthetic task with SGD, every statistic every step;
            before step 40's forward one weight of its first layer is set to NaN, so from
            step 40 on every activation, gradient, weight and the loss hold NaN.
sparse-100  the same MLP, healthy, 400 steps, with histograms, per-unit norms, activations
            and weights every 100th step (after run.watch's dense first 50 steps).
explode     no model: train/loss = 10^(22 s/149) over 150 steps (1 to 1e22), and a signed
            train/drift that stays near +-1 and reaches -1e20 at the end.
diverged    a linear regression with SGD at lr 0.8, past its stability limit: the loss grows
            from 38 to about 1e21 over 150 steps, its weights and gradients with it, all finite.
seed-0, seed-1, seed-2
            a sweep without a model: train/loss = k / (s + 1) over 100 steps (k = 1, 2, 4),
            lr 0.1, 0.1, 0.01, seed 0, 1, 2; seed-0 spikes to 1000 at step 50; epoch = s / 10.
"""
import sys

import torch
import trainscope as ts

NAN_STEP = 40


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def train(logdir, name, steps, cadence, nan_step=None):
    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    y = (x @ torch.randn(16, 4)).argmax(1)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = ts.init(logdir=logdir, name=name, config={"steps": steps, "cadence": cadence})
    run.watch(model, opt, every=1, histograms_every=cadence, activations_every=cadence, weights_every=cadence,
              units_every=cadence)

    def batches():
        for s in range(steps):
            i = (s * 32) % (2048 - 32)
            yield x[i:i + 32], y[i:i + 32]

    for step, (xb, yb) in enumerate(run.data(batches())):
        if step == nan_step:
            with torch.no_grad():
                model[0].weight[0, 0] = float("nan")
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss}, step=step)
    run.finish()


def diverged(logdir):
    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    y = x @ torch.randn(16, 1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.8)
    run = ts.init(logdir=logdir, name="diverged", config={"steps": 150, "lr": 0.8})
    run.watch(model, opt, every=1, histograms_every=10)
    for step in range(150):
        i = (step * 32) % (2048 - 32)
        loss = torch.nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss}, step=step)
    run.finish()


def explode(logdir):
    run = ts.init(logdir=logdir, name="explode", config={"steps": 150})
    for s in range(150):
        drift = (-1) ** s * (1 + 0.1 * (s % 7)) if s < 145 else -(10.0 ** (5 * (s - 144) - 5))
        run.log({"train/loss": 10.0 ** (22 * s / 149), "train/drift": drift}, step=s)
    run.finish()


def sweep(logdir):
    for seed, (k, lr) in enumerate([(1, 0.1), (2, 0.1), (4, 0.01)]):
        run = ts.init(logdir=logdir, name=f"seed-{seed}", config={"lr": lr, "seed": seed}, doctor=False)
        for s in range(100):
            loss = 1000.0 if seed == 0 and s == 50 else k / (s + 1)
            run.log({"train/loss": loss, "epoch": s / 10}, step=s)
        run.finish()


def main():
    logdir = sys.argv[1]
    train(logdir, "nan-at-40", 100, 1, nan_step=NAN_STEP)
    train(logdir, "sparse-100", 400, 100)
    explode(logdir)
    diverged(logdir)
    sweep(logdir)
    print(f"truth fixture: nan-at-40 (NaN from step {NAN_STEP}), sparse-100, explode, seed-0..2")


if __name__ == "__main__":
    main()
