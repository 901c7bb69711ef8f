"""A character-level GPT trained the way nanoGPT's train.py does it: a corpus held as one
tensor of token ids, get_batch() cutting random windows out of it, model(idx, targets)
returning (logits, loss), AdamW, gradient clipping at 1.0, an estimate_loss() on a held-out
split every eval_interval iterations. Small enough to train on a CPU in seconds.

The corpus is generated here (no download): sentences drawn from a tiny random grammar,
so the next character is partly predictable (a healthy run ends near 1.2 nats) and never
fully (the word choices are random).

    /usr/bin/python3 tests/python/scripts/char_gpt.py --logdir runs [--fault NAME]

Faults (--fault):
  target_leak   get_batch returns the current characters as targets (y = x) instead of the
                next ones: the model copies its input and the loss goes to ~0 (TARGET_LEAK)
  slow_batch    get_batch sleeps 30 ms (a slow tokenizer, a file read per batch): the data
                wait is most of each step (DATALOADER_BOTTLENECK, via run.data(get_batch))
  no_zero_grad  optimizer.zero_grad(set_to_none=True) left out of the loop
  lr_high       AdamW at lr 1.0 where nanoGPT's small models use 1e-3 (the clip at 1.0 does
                not help: Adam's step does not scale with the gradient's norm)

Variants (--variant), healthy runs that look odd:
  accum4        gradient accumulation over 4 micro-batches per iteration (the last micro-batch's
                loss logged, the optimizer stepped once per 4)
  warmup_cosine nanoGPT's get_lr: linear warmup over 30 iterations, cosine decay to lr/10

The run directory gets truth.json: the fault and the step at which it is real.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainscope as ts

FAULTS = ("none", "target_leak", "slow_batch", "no_zero_grad", "lr_high")
VARIANTS = ("none", "accum4", "warmup_cosine")


def make_corpus(chars=60_000, seed=0):
    g = torch.Generator().manual_seed(seed)
    subjects = ["the cat", "a dog", "my friend", "the old man", "she", "he", "the bird", "our team"]
    verbs = ["sees", "likes", "finds", "eats", "wants", "makes", "takes", "hears"]
    objects = ["the ball", "a red apple", "some bread", "the river", "a small box", "the moon", "tea", "a song"]
    ends = [".", "!", " today.", " again.", " at night."]
    parts = []
    total = 0
    while total < chars:
        pick = lambda words: words[int(torch.randint(len(words), (1,), generator=g))]
        sentence = f"{pick(subjects)} {pick(verbs)} {pick(objects)}{pick(ends)}\n"
        parts.append(sentence)
        total += len(sentence)
    text = "".join(parts)
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([stoi[c] for c in text], dtype=torch.long), len(vocab)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size=32, n_layer=2, n_head=2, n_embd=48, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--variant", default="none", choices=VARIANTS)
    parser.add_argument("--max-iters", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    data, vocab_size = make_corpus()
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    block_size, batch_size, eval_interval, eval_iters = 32, 16, 50, 10

    def get_batch(split):
        source = train_data if split == "train" else val_data
        ix = torch.randint(len(source) - block_size - 1, (batch_size,))
        x = torch.stack([source[i:i + block_size] for i in ix])
        if args.fault == "target_leak":
            y = torch.stack([source[i:i + block_size] for i in ix])  # the bug: no +1
        else:
            y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])
        if args.fault == "slow_batch" and split == "train":
            time.sleep(0.03)
        return x, y

    model = GPT(vocab_size)
    learning_rate = 1.0 if args.fault == "lr_high" else 3e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.99), weight_decay=0.1)
    micro_steps = 4 if args.variant == "accum4" else 1
    warmup_iters, min_lr = 30, learning_rate / 10

    def get_lr(it):  # nanoGPT's schedule
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        ratio = (it - warmup_iters) / max(1, args.max_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    name = args.name or f"char_gpt-{args.fault}" + ("" if args.variant == "none" else f"-{args.variant}")
    config = dict(block_size=block_size, batch_size=batch_size, lr=learning_rate, grad_clip=1.0, fault=args.fault,
                  variant=args.variant, gradient_accumulation_steps=micro_steps)
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model, optimizer)
        batches = run.data(lambda: get_batch("train"))  # a batch function: one batch per next()
        for iter_num in range(args.max_iters + 1):
            if iter_num % eval_interval == 0 or iter_num == args.max_iters:
                losses = estimate_loss()
                run.log({"val/loss": losses["val"]})
            if iter_num == args.max_iters:
                break
            if args.variant == "warmup_cosine":
                for group in optimizer.param_groups:
                    group["lr"] = get_lr(iter_num)
            for _ in range(micro_steps):
                X, Y = next(batches)
                logits, loss = model(X, Y)
                (loss / micro_steps).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if args.fault != "no_zero_grad":
                optimizer.zero_grad(set_to_none=True)
            run.log({"train/loss": loss.item()})  # the last micro-batch's, as nanoGPT logs it
        truth = {"script": "char_gpt", "fault": args.fault, "variant": args.variant,
                 "step": 0 if args.fault != "none" else None,
                 "final_train_loss": loss.item(), "final_val_loss": losses["val"]}
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
