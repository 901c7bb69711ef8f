"""A text classifier trained the way the usual sentiment tutorials do it: an Embedding, a
one-layer LSTM, the last hidden state into a Linear, CrossEntropyLoss, Adam at 2e-3, and a
StepLR(step_size=2, gamma=0.5) stepped once per epoch; a validation pass per epoch.
Small enough for a CPU.

The texts are generated here (no download): sequences of word ids in which a few "positive"
and "negative" words decide the class, among neutral filler words.

    /usr/bin/python3 tests/python/scripts/lstm_classifier.py --logdir runs [--fault NAME]

Faults (--fault):
  scheduler_per_batch  scheduler.step() inside the batch loop, with a scheduler written for
                       epochs (StepLR(step_size=1, gamma=0.1)): the LR is 1e-3 after 3
                       batches and ~1e-30 after 30, and the loss stops moving
  zero_grad_after_backward  optimizer.zero_grad() between loss.backward() and
                       optimizer.step(): every step sees zero gradients, nothing learns
  embedding_not_in_optimizer  the optimizer gets model.lstm's and model.fc's parameters
                       only: the embedding (float32) never changes
  no_zero_grad         optimizer.zero_grad() left out of the loop
  label_shift          labels 1 and 2 where the model has classes 0 and 1 (a 1-based label
                       file): cross_entropy raises at the first batch with a 2 in it
  lr_high              Adam at lr 0.5 where the tutorial has 2e-3

Variants (--variant), healthy runs that look odd:
  warm_restarts  CosineAnnealingWarmRestarts(T_0=50 batches) stepped every batch: the LR
                 jumps back up every 50 steps
  param_groups   the embedding in its own group at 5x the LR, no weight decay on biases
  clip           clip_grad_norm_(model.parameters(), 0.5) before every step
  sgd            SGD(lr=0.5, momentum=0.9) instead of Adam

The run directory gets truth.json: the fault and the step at which it is real.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn as nn

import trainscope as ts

FAULTS = ("none", "scheduler_per_batch", "zero_grad_after_backward", "embedding_not_in_optimizer", "no_zero_grad",
          "label_shift", "lr_high")
VARIANTS = ("none", "warm_restarts", "param_groups", "clip", "sgd")
VOCAB, LENGTH = 60, 16


def make_texts(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, VOCAB, (n, LENGTH), generator=g)  # filler words
    y = torch.randint(0, 2, (n,), generator=g)
    # each text holds two to four sentiment words: ids 0-1 positive, 2-3 negative, one in
    # five of them of the other class
    for i in range(n):
        k = int(torch.randint(2, 5, (1,), generator=g))
        where = torch.randperm(LENGTH, generator=g)[:k]
        flip = torch.rand(k, generator=g) < 0.2
        cls = torch.where(flip, 1 - y[i], y[i])
        x[i, where] = torch.where(cls == 1, torch.randint(0, 2, (k,), generator=g),
                                  torch.randint(2, 4, (k,), generator=g))
    return x, y


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=VOCAB, embed=24, hidden=32, classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        _, (h, _) = self.lstm(self.embedding(x))
        return self.fc(h[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    xs, ys = make_texts(1600, seed=1)
    if args.fault == "label_shift":
        ys = ys + 1
    vx, vy = make_texts(400, seed=2)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=32, shuffle=True)
    model = LSTMClassifier()
    criterion = nn.CrossEntropyLoss()
    lr = 0.5 if args.fault == "lr_high" else 2e-3
    if args.fault == "embedding_not_in_optimizer":
        params = list(model.lstm.parameters()) + list(model.fc.parameters())
    elif args.variant == "param_groups":
        biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
        weights = [p for n, p in model.named_parameters() if not n.endswith("bias") and not n.startswith("embedding")]
        params = [{"params": model.embedding.parameters(), "lr": 5 * lr}, {"params": weights, "weight_decay": 1e-4},
                  {"params": biases, "weight_decay": 0.0}]
    else:
        params = model.parameters()
    if args.variant == "sgd":
        lr = 0.5
        optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(params, lr=lr)
    batch_scheduler = None
    if args.variant == "warm_restarts":
        batch_scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=50)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=1.0)
    elif args.fault == "scheduler_per_batch":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    name = args.name or f"lstm_classifier-{args.fault}" + ("" if args.variant == "none" else f"-{args.variant}")
    truth = {"script": "lstm_classifier", "fault": args.fault, "variant": args.variant,
             "step": None if args.fault == "none" else 0}
    config = dict(lr=lr, batch_size=32, num_classes=2, optimizer=type(optimizer).__name__, fault=args.fault,
                  variant=args.variant)
    step = 0
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model, optimizer)
        for epoch in range(args.epochs):
            model.train()
            for x, y in run.data(train_loader):
                if args.fault != "no_zero_grad":
                    optimizer.zero_grad()
                out = model(x)
                loss = criterion(out, y)
                loss.backward()
                if args.fault == "zero_grad_after_backward":
                    optimizer.zero_grad()
                if args.variant == "clip":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                optimizer.step()
                if args.fault == "scheduler_per_batch":
                    scheduler.step()
                if batch_scheduler is not None:
                    batch_scheduler.step()
                acc = (out.argmax(1) == y).float().mean().item()
                run.log({"train/loss": loss.item(), "train/acc": acc})
                step += 1
            if args.fault != "scheduler_per_batch":
                scheduler.step()
            model.eval()
            with torch.no_grad():
                out = model(vx)
                run.log({"val/loss": criterion(out, vy).item(), "val/acc": (out.argmax(1) == vy).float().mean().item()})
        truth["steps"] = step
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
