"""A GAN trained the way PyTorch's examples/dcgan/main.py does it: a generator and a
discriminator of transposed and plain convolutions with BatchNorm and LeakyReLU, two Adam
optimizers (lr 2e-4, betas (0.5, 0.999)), BCE on the discriminator's sigmoid output, and
the loop of the example: update D on a real and a fake batch, then G with real labels.
Small enough for a CPU: 16 x 16 one-channel images.

The images are generated here (no download): soft discs and bars at random places, so
the discriminator cannot win at once and both losses wander as adversarial losses do (D's
loss rising while G learns is normal).

    /usr/bin/python3 tests/python/scripts/dcgan.py --logdir runs [--fault NAME] [--names]

--names watches the two models as run.watch(netG, optG, name="G") and
run.watch(netD, optD, name="D"); without it as two plain run.watch calls (the second one
is then named after its class).

Faults (--fault):
  d_no_zero_grad  netD.zero_grad() left out: D's gradients pile up over every iteration
                  (GRAD_NOT_ZEROED on D; G is fine)
  log_no_eps      the BCE written by hand, -(log D(x) + log(1 - D(G(z)))) for D and
                  -log D(G(z)) for G, no epsilon, with D's lr at 2e-2: D saturates, D(G(z)) is
                  exactly 0.0 or 1.0 in float32 and the log is -inf (NONFINITE_LOSS)
  g_no_zero_grad  netG.zero_grad() left out: G's gradients pile up (GRAD_NOT_ZEROED on G)

Variants (--variant), healthy runs that look odd:
  wgan            WGAN with weight clipping: RMSprop at 5e-5, D (the critic, no sigmoid
                  loss) stepped 5 times per G step, its weights clipped to [-0.01, 0.01]

The run directory gets truth.json: the fault and the step at which it is real.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.nn as nn

import trainscope as ts

FAULTS = ("none", "d_no_zero_grad", "log_no_eps", "g_no_zero_grad")
VARIANTS = ("none", "wgan")
NZ, NGF, NDF, SIZE = 16, 16, 16, 16


def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(SIZE, dtype=torch.float32), torch.arange(SIZE, dtype=torch.float32),
                            indexing="ij")
    images = torch.empty(n, 1, SIZE, SIZE)
    for i in range(n):
        cy, cx = (torch.rand(2, generator=g) * (SIZE - 6) + 3).tolist()
        if i % 2:
            r = float(torch.rand(1, generator=g)) * 2.5 + 2.0
            img = torch.sigmoid((r - ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()) * 2.0)
        else:
            img = torch.sigmoid((2.0 - (yy - cy).abs()) * 2.0) * ((xx - cx).abs() < 5).float()
        images[i, 0] = img * 2 - 1  # Tanh range, as the example's Normalize((0.5,), (0.5,))
    return images


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),  # 4x4
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),  # 8x8
            nn.ConvTranspose2d(NGF, 1, 4, 2, 1, bias=False), nn.Tanh())  # 16x16

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 8x8
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())  # 1x1

    def forward(self, x, critic=False):
        if critic:  # WGAN's critic: the same network without its sigmoid
            return self.main[:-1](x).view(-1)
        return self.main(x).view(-1)


def weights_init(m):
    name = type(m).__name__
    if "Conv" in name:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif "BatchNorm" in name:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def train_wgan(run, netG, netD, optimizerG, optimizerD, loader, epochs, n_critic=5, clip=0.01):
    """The WGAN loop (Arjovsky et al., algorithm 1): n_critic critic steps on the mean of
    D's output (D's last sigmoid left out), then one generator step."""
    def critic(x):
        return netD(x, critic=True)

    iterations = 0
    for epoch in range(epochs):
        batches = iter(loader)
        while True:
            try:
                for _ in range(n_critic):
                    (real,) = next(batches)
                    netD.zero_grad()
                    fake = netG(torch.randn(real.size(0), NZ, 1, 1)).detach()
                    errD = critic(fake).mean() - critic(real).mean()
                    errD.backward()
                    optimizerD.step()
                    for p in netD.parameters():
                        p.data.clamp_(-clip, clip)
            except StopIteration:
                break
            netG.zero_grad()
            errG = -critic(netG(torch.randn(real.size(0), NZ, 1, 1))).mean()
            errG.backward()
            optimizerG.step()
            run.log({"loss/D": errD.item(), "loss/G": errG.item()})
            iterations += 1
    return iterations


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--names", action="store_true")
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=999)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    data = make_images(1280, seed=1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=32, shuffle=True)
    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    lr_d = 2e-2 if args.fault == "log_no_eps" else 2e-4
    wgan = args.variant == "wgan"
    if wgan:
        lr_d = 5e-5
        optimizerD = torch.optim.RMSprop(netD.parameters(), lr=lr_d)
        optimizerG = torch.optim.RMSprop(netG.parameters(), lr=lr_d)
    else:
        optimizerD = torch.optim.Adam(netD.parameters(), lr=lr_d, betas=(0.5, 0.999))
        optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))

    def d_loss(real_out, fake_out):
        if args.fault == "log_no_eps":
            return -(torch.log(real_out) + torch.log(1 - fake_out)).mean()
        return criterion(real_out, torch.ones_like(real_out)) + criterion(fake_out, torch.zeros_like(fake_out))

    name = (args.name or f"dcgan-{args.fault}" + ("-names" if args.names else "")
            + ("" if args.variant == "none" else f"-{args.variant}"))
    truth = {"script": "dcgan", "fault": args.fault, "variant": args.variant,
             "step": 0 if args.fault in ("d_no_zero_grad", "g_no_zero_grad") else None}
    config = dict(lr_d=lr_d, lr_g=2e-4, batch_size=32, nz=NZ, fault=args.fault)
    step = 0
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        if args.names:
            run.watch(netG, optimizerG, name="G")
            run.watch(netD, optimizerD, name="D")
        else:
            run.watch(netG, optimizerG)
            run.watch(netD, optimizerD)
        if wgan:
            step = train_wgan(run, netG, netD, optimizerG, optimizerD, loader, args.epochs)
        for epoch in range(0 if wgan else args.epochs):
            for (real,) in loader:
                # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
                if args.fault != "d_no_zero_grad":
                    netD.zero_grad()
                noise = torch.randn(real.size(0), NZ, 1, 1)
                fake = netG(noise)
                errD = d_loss(netD(real), netD(fake.detach()))
                errD.backward()
                optimizerD.step()
                # (2) Update G: maximize log(D(G(z)))
                if args.fault != "g_no_zero_grad":
                    netG.zero_grad()
                output = netD(fake)
                if args.fault == "log_no_eps":
                    errG = -torch.log(output).mean()
                else:
                    errG = criterion(output, torch.ones_like(output))
                errG.backward()
                optimizerG.step()
                d_value = errD.item()
                if not math.isfinite(d_value) and truth["step"] is None:
                    truth["step"] = step
                run.log({"loss/D": d_value, "loss/G": errG.item(), "D/x": output.mean().item()})
                step += 1
        truth["iterations"] = step
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
