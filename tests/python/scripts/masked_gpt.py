"""A GPT trained the way minGPT's projects/demo does it: a small causal transformer learns
to sort a few digits; the targets of the prompt positions are masked with -1 and the loss
is cross_entropy(..., ignore_index=-1); a library-style Trainer makes its own AdamW (weight
decay on the Linear weights only, two param groups) inside run(), so the user can only call
run.watch(model) before handing the model over. Small enough for a CPU.

    /usr/bin/python3 tests/python/scripts/masked_gpt.py --logdir runs [--fault NAME]

Faults (--fault):
  default_ignore_index  the targets masked with -1 but the loss left at cross_entropy's
                  default ignore_index (-100): -1 is then a class index out of range, and the
                  first batch raises (on a GPU: a device-side assert); the run crashes at
                  step 0 (LABEL_OUT_OF_RANGE)
  lr_high         AdamW at lr 0.3 where the demo uses 5e-4: the first updates blow the model up
                  (LOSS_DIVERGENCE or non-finite)
  no_zero_grad    the Trainer's model.zero_grad(set_to_none=True) left out

Variants (--variant), healthy runs that look odd:
  label_smoothing cross_entropy with label_smoothing=0.1 (the loss stays well above 0 on a
                  task the model solves)

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

FAULTS = ("none", "default_ignore_index", "lr_high", "no_zero_grad")
VARIANTS = ("none", "label_smoothing")
LENGTH, DIGITS = 6, 3


class SortDataset(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.inp = torch.randint(DIGITS, (n, LENGTH), generator=g)

    def __len__(self):
        return len(self.inp)

    def __getitem__(self, idx):
        inp = self.inp[idx]
        sol = torch.sort(inp)[0]
        cat = torch.cat((inp, sol), dim=0)
        x = cat[:-1].clone()
        y = cat[1:].clone()
        y[:LENGTH - 1] = -1  # only the sorted half is predicted
        return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_head=4, n_embd=48, ignore_index=-1, label_smoothing=0.0):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def configure_optimizers(self, learning_rate, weight_decay=0.1, betas=(0.9, 0.95)):
        decay = [p for n, p in self.named_parameters() if n.endswith("weight") and p.dim() >= 2]
        no_decay = [p for n, p in self.named_parameters() if not (n.endswith("weight") and p.dim() >= 2)]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=self.ignore_index,
                                   label_smoothing=self.label_smoothing)
        return logits, loss


class Trainer:
    """minGPT's Trainer: the optimizer is made inside run(); callbacks after each batch."""

    def __init__(self, model, dataset, learning_rate, max_iters, batch_size=32, zero_grad=True):
        self.model, self.dataset = model, dataset
        self.learning_rate, self.max_iters, self.batch_size = learning_rate, max_iters, batch_size
        self.zero_grad = zero_grad
        self.callbacks = []
        self.iter_num, self.loss = 0, None

    def add_callback(self, fn):
        self.callbacks.append(fn)

    def run(self):
        model = self.model
        self.optimizer = model.configure_optimizers(self.learning_rate)
        sampler = torch.utils.data.RandomSampler(self.dataset, replacement=True, num_samples=int(1e10))
        loader = torch.utils.data.DataLoader(self.dataset, sampler=sampler, batch_size=self.batch_size)
        model.train()
        data_iter = iter(loader)
        while self.iter_num < self.max_iters:
            x, y = next(data_iter)
            logits, self.loss = model(x, y)
            if self.zero_grad:
                model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            self.optimizer.step()
            for fn in self.callbacks:
                fn(self)
            self.iter_num += 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--seed", type=int, default=3407)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    dataset = SortDataset(2000, seed=1)
    model = GPT(vocab_size=DIGITS, block_size=2 * LENGTH - 1,
                ignore_index=-100 if args.fault == "default_ignore_index" else -1,
                label_smoothing=0.1 if args.variant == "label_smoothing" else 0.0)
    lr = 0.3 if args.fault == "lr_high" else 5e-4
    trainer = Trainer(model, dataset, learning_rate=lr, max_iters=args.iters, zero_grad=args.fault != "no_zero_grad")

    name = args.name or f"masked_gpt-{args.fault}" + ("" if args.variant == "none" else f"-{args.variant}")
    truth = {"script": "masked_gpt", "fault": args.fault, "step": None if args.fault == "none" else 0}
    config = dict(lr=lr, batch_size=32, n_layer=2, n_embd=48, fault=args.fault)
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model)  # the Trainer makes the optimizer later, inside run()

        def log_loss(t):
            run.log({"train/loss": t.loss.item()})

        trainer.add_callback(log_loss)
        trainer.run()
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
