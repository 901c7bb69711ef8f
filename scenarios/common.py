"""Shared pieces of the scenario trainings: generated data, small models, one training loop.

Every scenario is a real PyTorch training on the CPU (seconds), recorded with trainscope's
own client (ts.init + run.watch), with a known fault injected at a known step — or none,
for the healthy ones. Each scenario module defines SPEC (what the doctor should find) and
main(logdir); bench/doctor/run_scenarios.py runs them all and scores the doctor.

SPEC keys: name, kind ("faulty" | "healthy"), expected (finding codes, the first is the
primary one; any of them counts as found), step (the injected step, None when the fault is
there from the start and has no single step), location (the true first producer for
non-finite faults, else None), cause (the cause id the doctor should rank first, or None).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainscope as ts

NUM_CLASSES = 10
FEATURES = 32


def make_classification(n=4096, d=FEATURES, classes=NUM_CLASSES, seed=0, noise=2.0, scale=1.0):
    """Gaussian blobs: learnable to ~90 % by a small MLP; `scale` multiplies the features."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g) * 1.2
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + noise * torch.randn(n, d, generator=g)
    return x * scale, y


def make_sequences(n=2048, length=20, d=8, classes=NUM_CLASSES, seed=0):
    """Sequences whose class is set by a pattern in the mean of a few steps."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    codes = torch.randn(classes, d, generator=g)
    x = 0.8 * torch.randn(n, length, d, generator=g)
    x[:, length // 2:length // 2 + 4, :] += codes[y].unsqueeze(1)
    return x, y


def make_images(n=2048, size=8, classes=NUM_CLASSES, seed=0):
    """1 x size x size images: a class-specific template plus noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    templates = torch.randn(classes, 1, size, size, generator=g)
    x = templates[y] + 0.8 * torch.randn(n, 1, size, size, generator=g)
    return x, y


def mlp(d_in=FEATURES, hidden=64, classes=NUM_CLASSES, depth=2, act=nn.ReLU, bias=True):
    layers = []
    width = d_in
    names = []
    for i in range(depth):
        layers += [(f"fc{i + 1}", nn.Linear(width, hidden, bias=bias)), (f"act{i + 1}", act())]
        width = hidden
    layers.append(("head", nn.Linear(width, classes, bias=bias)))
    return nn.Sequential(dict_of(layers))


def dict_of(pairs):
    from collections import OrderedDict
    return OrderedDict(pairs)


def batches(x, y, batch, seed=0):
    """Endless shuffled mini-batches (epoch after epoch)."""
    g = torch.Generator().manual_seed(seed)
    n = x.shape[0]
    while True:
        perm = torch.randperm(n, generator=g)
        for i in range(0, n - batch + 1, batch):
            idx = perm[i:i + batch]
            yield x[idx], y[idx]


def train(logdir, spec, model, *, data=None, steps=300, lr=0.1, optimizer="sgd", batch=32, momentum=0.0,
          weight_decay=0.0, loss_fn=None, fault=None, zero_grad=True, val=None, val_every=25, clip=None,
          scheduler=None, watch=None, config=None, seed=0, loader=None, log_classification=False,
          source_fault=None, param_groups=None):
    """The standard loop: forward, loss, backward, (clip), step; the scenario's `fault(step,
    x, y, model, opt)` may change the batch or the model at its step and returns (x, y);
    `source_fault(step, x, y)` does the same inside the data source, so the batch is already
    wrong when run.data() sees it (labels, samples)."""
    torch.manual_seed(seed)
    x_all, y_all = data if data is not None else make_classification(seed=seed)
    params = param_groups(model) if param_groups else model.parameters()
    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = scheduler(opt) if scheduler else None
    loss_fn = loss_fn or (lambda out, y: F.cross_entropy(out, y))
    cfg = {"num_classes": NUM_CLASSES, "optimizer": optimizer, "lr": lr, "batch": batch, "scenario": spec["name"]}
    cfg.update(config or {})
    watch_options = {"activations_every": 1, "weights_every": 1, "units_every": 10, "census_every": 10,
                     "system_interval": 0}
    watch_options.update(watch or {})
    with ts.init(logdir=logdir, name=spec["name"], config=cfg) as run:
        run.watch(model, opt, **watch_options)
        source = loader if loader is not None else batches(x_all, y_all, batch, seed)
        if source_fault is not None:
            source = (source_fault(i, xb, yb) for i, (xb, yb) in enumerate(source))
        it = run.data(source)
        for step in range(steps):
            x, y = next(it)
            if fault is not None:
                x, y = fault(step, x, y, model, opt)
            out = model(x)
            loss = loss_fn(out, y)
            if callable(zero_grad):
                if zero_grad(step):
                    opt.zero_grad(set_to_none=True)
            elif zero_grad:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            if sched is not None:
                sched.step()
            with torch.no_grad():
                acc = (out.argmax(1) == y).float().mean().item() if out.dim() == 2 else float("nan")
            run.log({"train/loss": loss.item(), "train/acc": acc})
            if val is not None and step % val_every == val_every - 1:
                xv, yv = val
                model.eval()
                with torch.no_grad():
                    ov = model(xv)
                    logs = {"val/loss": loss_fn(ov, yv).item()}
                    if log_classification:
                        run.log_classification(ov, yv, prefix="val", num_classes=NUM_CLASSES, commit=True)
                    else:
                        logs["val/acc"] = (ov.argmax(1) == yv).float().mean().item()
                model.train()
                run.log(logs)
    return 0


def cli(main):
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", default="runs/scenarios")
    args = parser.parse_args()
    torch.manual_seed(0)  # the model's initialisation, before main() builds it
    try:
        main(args.logdir)
    except Exception as error:  # a fault that crashes the training is still a scenario
        print(f"scenario crashed: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(3)
