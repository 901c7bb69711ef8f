"""A word-level LSTM language model trained the way PyTorch's
examples/word_language_model/main.py does it: a corpus batchified into columns,
get_batch(source, i) cutting bptt-long windows, an RNNModel (Embedding, LSTM, Linear
decoder, dropout), the hidden state repackaged between batches, **no optimizer** (the
weights are stepped by hand: `p.data.add_(p.grad, alpha=-lr)`), gradient clipping at 0.25,
the learning rate divided by 4 when the validation loss stops improving, and
`torch.save(model, path)` after each epoch that improved. Small enough for a CPU.

The corpus is generated here (no download): sentences of a small random grammar, so a
healthy run ends well above zero loss (the word choices are random).

    /usr/bin/python3 tests/python/scripts/word_lm.py --logdir runs [--fault NAME]

Faults (--fault):
  target_leak   get_batch returns source[i:i+seq_len] as targets (the current words) instead
                of source[i+1:i+1+seq_len]: the model copies its input (TARGET_LEAK)
  lr_high       lr = 2000 where the example uses 20: even clipped at 0.25, each hand-made
                update is 500 in norm (the loss explodes at once)
  no_zero_grad  model.zero_grad() left out: the hand-made update uses the sum of every
                gradient so far (clipped to 0.25 in norm, so it drifts rather than explodes)

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

FAULTS = ("none", "target_leak", "lr_high", "no_zero_grad")


def make_corpus(words=24_000, seed=0):
    g = torch.Generator().manual_seed(seed)
    det = ["the", "a", "one", "every", "that"]
    adj = ["big", "small", "red", "old", "quiet", "happy", "dark", ""]
    noun = ["cat", "dog", "man", "woman", "child", "bird", "car", "tree", "house", "river"]
    verb = ["sees", "likes", "follows", "finds", "hears", "paints", "builds", "wants"]
    tokens = []
    pick = lambda ws: ws[int(torch.randint(len(ws), (1,), generator=g))]
    while len(tokens) < words:
        for part in (det, adj, noun, verb, det, adj, noun):
            w = pick(part)
            if w:
                tokens.append(w)
        tokens.append("<eos>")
    vocab = {w: i for i, w in enumerate(sorted(set(tokens)))}
    return torch.tensor([vocab[w] for w in tokens], dtype=torch.long), len(vocab)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=32, nhid=48, nlayers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers, self.ntoken = nhid, nlayers, ntoken
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="runs")
    parser.add_argument("--name", default=None)
    parser.add_argument("--fault", default="none", choices=FAULTS)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1111)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    corpus, ntokens = make_corpus()
    n = len(corpus)
    train_data = batchify(corpus[: int(0.8 * n)], 20)
    val_data = batchify(corpus[int(0.8 * n):], 10)
    bptt, clip = 20, 0.25
    lr = 2000.0 if args.fault == "lr_high" else 20.0

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        data = source[i:i + seq_len]
        if args.fault == "target_leak":
            target = source[i:i + seq_len].reshape(-1)  # the bug: no +1
        else:
            target = source[i + 1:i + 1 + seq_len].reshape(-1)
        return data, target

    model = RNNModel(ntokens)
    criterion = nn.NLLLoss()

    def evaluate(source):
        model.eval()
        total, hidden = 0.0, model.init_hidden(source.size(1))
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, bptt):
                data, targets = get_batch(source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total += len(data) * criterion(output, targets).item()
        return total / (len(source) - 1)

    name = args.name or f"word_lm-{args.fault}"
    save_path = os.path.join(args.logdir, f"{name}.pt")
    truth = {"script": "word_lm", "fault": args.fault, "step": None if args.fault == "none" else 0}
    config = dict(lr=lr, clip=clip, bptt=bptt, batch_size=20, fault=args.fault)
    best_val = None
    with ts.init(logdir=args.logdir, name=name, config=config) as run:
        run.watch(model)  # no optimizer: the weights are stepped by hand
        for epoch in range(1, args.epochs + 1):
            model.train()
            hidden = model.init_hidden(20)
            windows = (get_batch(train_data, i) for i in range(0, train_data.size(0) - 1, bptt))
            for data, targets in run.data(windows):
                if args.fault != "no_zero_grad":
                    model.zero_grad()
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
                loss = criterion(output, targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
                run.log({"train/loss": loss.item(), "opt/lr": lr})
            val_loss = evaluate(val_data)
            run.log({"val/loss": val_loss})
            truth[f"val_loss_epoch{epoch}"] = val_loss
            if best_val is None or val_loss < best_val:
                with open(save_path, "wb") as f:
                    torch.save(model, f)  # the whole watched model, as the example does
                best_val = val_loss
            else:
                lr /= 4.0
        truth["saved"] = os.path.exists(save_path)
        with open(os.path.join(run.dir, "truth.json"), "w") as f:
            json.dump(truth, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
