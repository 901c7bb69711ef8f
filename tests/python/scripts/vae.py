"""A variational autoencoder trained the way PyTorch's examples/vae/main.py does it: fc1,
fc21/fc22 (mu, logvar), the reparameterisation trick, fc3/fc4 with a sigmoid, the loss
BCE(sum) + KLD summed over the batch, Adam at 1e-3, a train() and a test() per epoch.
--likelihood gaussian swaps the Bernoulli decoder for a Gaussian one with a learned
log-variance per pixel, whose negative log-likelihood goes below zero as the model gets
good (a healthy negative loss). Small enough for a CPU: 12 x 12 images.

The images are generated here (no download): blurred strokes at random angles.

    /usr/bin/python3 tests/python/scripts/vae.py --logdir runs [--fault NAME] [--likelihood bernoulli|gaussian]

Faults (--fault):
  kld_sign   the KL term written with the wrong sign, 0.5 * sum(1 + logvar - mu^2 - exp(logvar)):
             the model is rewarded for a posterior far from the prior, exp(logvar) grows
             without bound and the loss runs to -inf (NEGATIVE_LOSS, then non-finite)
  exp_std    std = exp(logvar) where exp(0.5 * logvar) is meant, with logvar's layer
             initialised large (bias 100): exp(100) overflows float32, z is infinite and
             the decoder's first layer gives NaN (NONFINITE_ACTIVATION at fc3)
  lr_high    Adam at lr 0.1 where the example has 1e-3
  no_zero_grad  optimizer.zero_grad() left out of the loop

Variants (--variant), healthy runs that look odd:
  kl_warmup  the KL term's weight rises from 0 to 1 over the first two epochs (KL annealing):
             the loss goes up while the model gets better
  adamw      AdamW(lr=2e-3, weight_decay=0.05) instead of Adam

The run directory gets truth.json: the fault and the step at which it is real.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainscope as ts

FAULTS = ("none", "kld_sign", "exp_std", "lr_high", "no_zero_grad")
VARIANTS = ("none", "kl_warmup", "adamw")
SIZE = 12
PIXELS = SIZE * SIZE


def make_strokes(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32),
                            indexing="ij")
    theta = torch.rand(n, generator=g) * math.pi
    cy, cx = (torch.rand(2, n, generator=g) * 4 + SIZE / 2 - 2)
    dist = ((xx[None] - cx[:, None, None]) * torch.sin(theta)[:, None, None]
            - (yy[None] - cy[:, None, None]) * torch.cos(theta)[:, None, None]).abs()
    return torch.exp(-dist ** 2 / 1.5).reshape(n, PIXELS)


class VAE(nn.Module):
    def __init__(self, gaussian=False):
        super().__init__()
        self.fc1 = nn.Linear(PIXELS, 64)
        self.fc21 = nn.Linear(64, 8)
        self.fc22 = nn.Linear(64, 8)
        self.fc3 = nn.Linear(8, 64)
        self.fc4 = nn.Linear(64, PIXELS)
        self.gaussian = gaussian
        self.dec_logvar = nn.Parameter(torch.zeros(PIXELS)) if gaussian else None

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, exp_std=False):
        std = torch.exp(logvar) if exp_std else torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        out = self.fc4(h3)
        return out if self.gaussian else torch.sigmoid(out)

    def forward(self, x, exp_std=False):
        mu, logvar = self.encode(x.view(-1, PIXELS))
        z = self.reparameterize(mu, logvar, exp_std)
        return self.decode(z), mu, logvar


def loss_function(model, recon_x, x, mu, logvar, kld_sign=False, beta=1.0):
    if model.gaussian:
        lv = model.dec_logvar
        rec = 0.5 * torch.sum(lv + (x - recon_x) ** 2 / lv.exp() + math.log(2 * math.pi))
    else:
        rec = F.binary_cross_entropy(recon_x, x.view(-1, PIXELS), reduction="sum")
    if kld_sign:
        kld = 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    else:
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return rec + beta * kld


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--likelihood", default="bernoulli", choices=("bernoulli", "gaussian"))
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train = torch.utils.data.TensorDataset(make_strokes(2048, seed=2))
    test = torch.utils.data.TensorDataset(make_strokes(256, seed=3))
    train_loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test, batch_size=64)
    model = VAE(gaussian=args.likelihood == "gaussian")
    if args.fault == "exp_std":
        nn.init.constant_(model.fc22.bias, 100.0)  # the bug's trigger: a large initial logvar
    lr = 0.1 if args.fault == "lr_high" else 1e-3
    if args.variant == "adamw":
        lr = 2e-3
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    warmup_steps = 2 * len(train_loader) if args.variant == "kl_warmup" else 0

    suffix = ("-gaussian" if args.likelihood == "gaussian" else "") + ("" if args.variant == "none" else f"-{args.variant}")
    name = args.name or f"vae-{args.fault}{suffix}"
    truth = {"script": "vae", "fault": args.fault, "likelihood": args.likelihood, "variant": args.variant,
             "step": 0 if args.fault in ("lr_high", "no_zero_grad") else None}
    config = dict(lr=lr, batch_size=64, latent=8, likelihood=args.likelihood, optimizer=type(optimizer).__name__,
                  fault=args.fault, variant=args.variant)
    step = 0
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model, optimizer)
        for epoch in range(1, args.epochs + 1):
            model.train()
            for (data,) in run.data(train_loader):
                if args.fault != "no_zero_grad":
                    optimizer.zero_grad()
                recon_batch, mu, logvar = model(data, exp_std=args.fault == "exp_std")
                beta = min(1.0, step / warmup_steps) if warmup_steps else 1.0
                loss = loss_function(model, recon_batch, data, mu, logvar, kld_sign=args.fault == "kld_sign", beta=beta)
                loss.backward()
                optimizer.step()
                value = loss.item() / len(data)
                if args.fault in ("kld_sign", "exp_std") and truth["step"] is None and (
                        not math.isfinite(value) or (args.fault == "kld_sign" and value < 0)):
                    truth["step"] = step
                run.log({"train/loss": value})
                step += 1
            model.eval()
            test_loss = 0.0
            with torch.no_grad():
                for (data,) in test_loader:
                    recon, mu, logvar = model(data, exp_std=args.fault == "exp_std")
                    test_loss += loss_function(model, recon, data, mu, logvar,
                                               kld_sign=args.fault == "kld_sign").item()
            run.log({"val/loss": test_loss / len(test_loader.dataset)})
            truth[f"val_loss_epoch{epoch}"] = test_loss / len(test_loader.dataset)
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
