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

FAULTS = ("none", "label_roll", "lr_100", "bce_no_eps", "nan_weights", "dropout_09", "dead_relu")
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
    def __init__(self, dropout1=0.25, dropout2=0.5):
        super().__init__()
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
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
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
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.fault == "bce_no_eps" and args.epochs == 5:
        args.epochs = 10
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    train_x, train_y = make_digits(4000, seed=args.seed)
    test_x, test_y = make_digits(1000, seed=args.seed + 100)
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=64, shuffle=True)
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=500)

    model = Net(dropout1=0.9 if args.fault == "dropout_09" else 0.25)
    if args.fault == "dead_relu":
        with torch.no_grad():
            model.fc1.bias.fill_(-5.0)
    lr = 100.0 if args.fault == "lr_100" else 1.0
    optimizer = torch.optim.Adadelta(model.parameters(), lr=lr)
    # The BCE variant trains hot and without decay (lr 3, gamma 1, 10 epochs), so its logits keep growing.
    scheduler = StepLR(optimizer, step_size=1, gamma=1.0 if args.fault == "bce_no_eps" else 0.7)
    loss_fn = bce_no_eps if args.fault == "bce_no_eps" else nll_of_logits
    bce_lr_scale = 3.0 if args.fault == "bce_no_eps" else 1.0  # the BCE run trains hot, so its logits grow
    for group in optimizer.param_groups:
        group["lr"] *= bce_lr_scale

    truth = {"script": "mnist_cnn", "fault": args.fault, "step": None if args.fault == "none" else 0}
    name = args.name or f"mnist_cnn-{args.fault}"
    config = dict(batch_size=64, lr=lr * bce_lr_scale, optimizer="Adadelta", epochs=args.epochs, fault=args.fault)
    step = 0
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model, optimizer)
        for epoch in range(1, args.epochs + 1):
            model.train()
            for data, target in run.data(train_loader):
                if args.fault == "label_roll":
                    target = target.roll(1)
                if args.fault == "nan_weights" and step == NAN_STEP:
                    with torch.no_grad():
                        model.fc1.weight[3, 7] = float("nan")
                    truth["step"] = step
                optimizer.zero_grad()
                output = model(data)
                loss = loss_fn(output, target)
                if not math.isfinite(loss.item()) and truth.get("first_nonfinite_loss") is None:
                    truth["first_nonfinite_loss"] = step
                    if args.fault == "bce_no_eps":
                        truth["step"] = step
                loss.backward()
                optimizer.step()
                run.log({"train/loss": loss.item()})
                step += 1
            model.eval()
            test_loss, correct = 0.0, 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    test_loss += nll_of_logits(output, target).item() * len(target)
                    correct += output.argmax(dim=1).eq(target).sum().item()
            run.log({"val/loss": test_loss / len(test_loader.dataset), "val/acc": correct / len(test_loader.dataset)})
            truth[f"val_acc_epoch{epoch}"] = correct / len(test_loader.dataset)
            scheduler.step()
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
