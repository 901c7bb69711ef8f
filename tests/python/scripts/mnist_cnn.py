"""A digit classifier trained the way PyTorch's examples/mnist/main.py does it: a Net of two
convolutions, max pooling, two Dropouts and two Linear layers written with F.relu and
F.log_softmax, F.nll_loss, Adadelta with StepLR, a train() and a test() per epoch over
DataLoaders. Small enough to train on a CPU in seconds.

The digits are generated here (no download): 14 x 14 images of ten stroke templates
(a seven-segment style drawing of each digit), shifted by a pixel or two, with stroke
thickness and noise varied, so a healthy run reaches ~95 % test accuracy, not 100 %.

    /usr/bin/python3 tests/python/scripts/mnist_cnn.py --logdir runs [--fault NAME]

Faults (--fault):
  label_roll     target.roll(1): each image gets its neighbour's label, the loss stays at
                 ln 10 (chance level)
  lr_100         Adadelta(lr=100) instead of 1.0: the first update blows the weights up,
                 the loss is enormous at step 1 and the network is dead after it
  bce_no_eps     a hand-written one-vs-all BCE, -(t log p + (1-t) log(1-p)) with p =
                 sigmoid(logits) and no epsilon: once a logit passes ~17, p is exactly 1.0 in
                 float32 and log(1 - p) = -inf (NONFINITE_LOSS)
  nan_weights    a NaN written into fc1's weights at step NAN_STEP (a corrupted checkpoint
                 merge): every output is NaN, the test accuracy collapses to one class
  dropout_09     Dropout(0.9) where the example has 0.25 and 0.5 (ARCHITECTURE_WARNING)
  dead_relu      fc1's bias initialised to -5: every F.relu(fc1(x)) unit is 0 for every
                 sample from the start (DEAD_UNITS, seen through F.relu: no ReLU module)
  no_zero_grad   optimizer.zero_grad() left out: every step adds its gradient to the last ones
  unnormalized   the images fed as 0-255 pixel values, without the example's Normalize
  nan_input      one pixel of one training image is NaN (a corrupt file), met in the first epoch
  double_softmax the network ends in F.softmax and the loss is F.cross_entropy (a second
                 softmax): the logits' scale is lost and the loss hardly moves
  detach_features  x = x.detach() after the convolutions (a debugging line left in): no
                 gradient reaches conv1 and conv2, they keep their initial weights
  lr_tiny        Adadelta(lr=1e-4) where the example has 1.0: the loss hardly moves

Variants (--variant), healthy runs that look odd:
  accum4         gradient accumulation over 4 batches (zero_grad and step every 4th batch)
  label_smoothing  cross_entropy with label_smoothing=0.1: the loss never goes below ~0.5
  sgd_momentum   SGD(lr=0.05, momentum=0.9, nesterov) instead of Adadelta
  set_to_none    zero_grad(set_to_none=True) after optimizer.step() instead of before forward
  onecycle       OneCycleLR stepped every batch (the LR rises 25x, then falls to ~0)
  cosine         CosineAnnealingLR to 0 over the run, stepped every batch
  eval_big_batch the test pass at batch 1000 (memory rises once per epoch, then is flat)
  ema            an exponential moving average of the weights, a second model watched
                 under its own name with no optimizer (updated under torch.no_grad)
  bf16_autocast  the forward under torch.autocast("cpu", dtype=torch.bfloat16)
  batch4         batches of 4, one epoch (a noisy loss)

The run directory gets truth.json: the fault and the step at which it is real (the
first non-finite loss for bce_no_eps, measured by the script itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

import trainscope as ts

FAULTS = ("none", "label_roll", "lr_100", "bce_no_eps", "nan_weights", "dropout_09", "dead_relu", "no_zero_grad",
          "unnormalized", "nan_input", "double_softmax", "detach_features", "lr_tiny")
VARIANTS = ("none", "accum4", "label_smoothing", "sgd_momentum", "set_to_none", "onecycle", "cosine",
            "eval_big_batch", "ema", "bf16_autocast", "batch4")
NAN_STEP = 120
SIZE = 14

# Seven segments (a..g) on a 14 x 14 grid: (row0, row1, col0, col1) of each bar.
_SEGMENTS = {"a": (1, 2, 3, 11), "b": (1, 7, 10, 11), "c": (7, 13, 10, 11), "d": (12, 13, 3, 11),
             "e": (7, 13, 3, 4), "f": (1, 7, 3, 4), "g": (6, 7, 3, 11)}
_DIGITS = ["abcdef", "bc", "abdeg", "abcdg", "bcfg", "acdfg", "acdefg", "abc", "abcdefg", "abcdfg"]


def make_digits(n, seed):
    g = torch.Generator().manual_seed(seed)
    templates = torch.zeros(10, SIZE, SIZE)
    for digit, segments in enumerate(_DIGITS):
        for s in segments:
            r0, r1, c0, c1 = _SEGMENTS[s]
            templates[digit, r0:r1, c0:c1] = 1.0
    y = torch.randint(0, 10, (n,), generator=g)
    x = templates[y].clone()
    thick = torch.rand(n, generator=g) < 0.5  # half the digits drawn with a thicker pen
    x[thick] = torch.clamp(x[thick] + torch.roll(x[thick], 1, dims=2), max=1.0)
    shifts = torch.randint(-1, 2, (n, 2), generator=g)
    for i in range(n):
        x[i] = torch.roll(x[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(0, 1))
    x = x + 0.5 * torch.randn(n, SIZE, SIZE, generator=g)
    x = (x - 0.25) / 0.6  # the examples' Normalize((0.1307,), (0.3081,)) in spirit
    return x.unsqueeze(1), y


class Net(nn.Module):
    def __init__(self, dropout1=0.25, dropout2=0.5, detach_features=False, softmax_out=False):
        super().__init__()
        self.detach_features = detach_features
        self.softmax_out = softmax_out
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.dropout1 = nn.Dropout(dropout1)
        self.dropout2 = nn.Dropout(dropout2)
        self.fc1 = nn.Linear(32 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        if self.detach_features:
            x = x.detach()
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        if self.softmax_out:
            return F.softmax(self.fc2(x), dim=1)
        return self.fc2(x)  # logits; log_softmax in the loss, as the example's output layer does


def nll_of_logits(logits, target):
    return F.nll_loss(F.log_softmax(logits, dim=1), target)


def bce_no_eps(logits, target):
    """The bug: BCE by hand on sigmoid outputs, log(p) with no epsilon or clamp."""
    p = torch.sigmoid(logits)
    t = F.one_hot(target, 10).float()
    return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).sum(dim=1).mean()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.fault == "bce_no_eps" and args.epochs == 5:
        args.epochs = 10
    if args.variant == "batch4":
        args.epochs = 1
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_x, train_y = make_digits(4000, seed=args.seed)
    test_x, test_y = make_digits(1000, seed=args.seed + 100)
    if args.fault == "unnormalized":  # back to 0-255 pixels, as if Normalize and ToTensor's /255 were left out
        train_x, test_x = (train_x * 0.6 + 0.25) * 255, (test_x * 0.6 + 0.25) * 255
    if args.fault == "nan_input":
        train_x[0, 0, 5, 5] = float("nan")
    batch_size = 4 if args.variant == "batch4" else 64
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=1000 if args.variant == "eval_big_batch" else 500)

    model = Net(dropout1=0.9 if args.fault == "dropout_09" else 0.25, detach_features=args.fault == "detach_features",
                softmax_out=args.fault == "double_softmax")
    ema = None
    if args.variant == "ema":
        ema = Net()
        ema.load_state_dict(model.state_dict())
        ema.requires_grad_(False)
        ema.eval()
    if args.fault == "dead_relu":
        with torch.no_grad():
            model.fc1.bias.fill_(-5.0)
    lr = {"lr_100": 100.0, "lr_tiny": 1e-4}.get(args.fault, 1.0)
    if args.variant == "sgd_momentum":
        lr = 0.05
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True)
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=lr)
    steps_per_epoch = len(train_loader)
    batch_scheduler = None  # a scheduler stepped every batch
    if args.variant == "onecycle":
        batch_scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, epochs=args.epochs,
                                                              steps_per_epoch=steps_per_epoch, cycle_momentum=False)
    elif args.variant == "cosine":
        batch_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    # The BCE variant trains hot and without decay (lr 3, gamma 1, 10 epochs), so its logits keep growing.
    scheduler = StepLR(optimizer, step_size=1, gamma=1.0 if args.fault == "bce_no_eps" or batch_scheduler else 0.7)
    if args.fault == "bce_no_eps":
        loss_fn = bce_no_eps
    elif args.fault == "double_softmax":
        def loss_fn(probabilities, target):
            return F.cross_entropy(probabilities, target)
    elif args.variant == "label_smoothing":
        def loss_fn(logits, target):
            return F.cross_entropy(logits, target, label_smoothing=0.1)
    else:
        loss_fn = nll_of_logits
    bce_lr_scale = 3.0 if args.fault == "bce_no_eps" else 1.0  # the BCE run trains hot, so its logits grow
    for group in optimizer.param_groups:
        group["lr"] *= bce_lr_scale

    truth = {"script": "mnist_cnn", "fault": args.fault, "variant": args.variant,
             "step": None if args.fault in ("none", "nan_input") else 0}
    name = args.name or f"mnist_cnn-{args.fault}" + ("" if args.variant == "none" else f"-{args.variant}")
    config = dict(batch_size=batch_size, lr=lr * bce_lr_scale, optimizer=type(optimizer).__name__, epochs=args.epochs,
                  fault=args.fault, variant=args.variant)
    step = 0
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model, optimizer)
        if ema is not None:
            run.watch(ema, name="ema")
        accumulate = 4 if args.variant == "accum4" else 1
        for epoch in range(1, args.epochs + 1):
            model.train()
            for data, target in run.data(train_loader):
                if args.fault == "label_roll":
                    target = target.roll(1)
                if args.fault == "nan_weights" and step == NAN_STEP:
                    with torch.no_grad():
                        model.fc1.weight[3, 7] = float("nan")
                    truth["step"] = step
                if args.fault == "nan_input" and truth["step"] is None and not torch.isfinite(data).all():
                    truth["step"] = step
                if args.fault != "no_zero_grad" and args.variant != "set_to_none" and step % accumulate == 0:
                    optimizer.zero_grad()
                if args.variant == "bf16_autocast":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        output = model(data)
                    output = output.float()
                else:
                    output = model(data)
                loss = loss_fn(output, target)
                if not math.isfinite(loss.item()) and truth.get("first_nonfinite_loss") is None:
                    truth["first_nonfinite_loss"] = step
                    if args.fault == "bce_no_eps":
                        truth["step"] = step
                (loss / accumulate).backward()
                if (step + 1) % accumulate == 0:
                    optimizer.step()
                    if args.variant == "set_to_none":
                        optimizer.zero_grad(set_to_none=True)
                    if batch_scheduler is not None:
                        batch_scheduler.step()
                    if ema is not None:
                        with torch.no_grad():
                            for e, p in zip(ema.parameters(), model.parameters()):
                                e.mul_(0.99).add_(p, alpha=0.01)
                run.log({"train/loss": loss.item()})
                step += 1
            model.eval()
            test_loss, correct = 0.0, 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    if args.fault == "double_softmax":
                        output = output.log()
                    test_loss += nll_of_logits(output, target).item() * len(target)
                    correct += output.argmax(dim=1).eq(target).sum().item()
            run.log({"val/loss": test_loss / len(test_loader.dataset), "val/acc": correct / len(test_loader.dataset)})
            if ema is not None:
                with torch.no_grad():
                    ema_correct = sum(ema(data).argmax(dim=1).eq(target).sum().item() for data, target in test_loader)
                run.log({"val/ema_acc": ema_correct / len(test_loader.dataset)})
            truth[f"val_acc_epoch{epoch}"] = correct / len(test_loader.dataset)
            scheduler.step()
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
