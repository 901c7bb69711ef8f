"""Healthy: one pre-LN transformer block (multi-head attention + MLP) on sequences, AdamW-style
Adam with warm-up."""
from common import *

SPEC = dict(name="healthy_transformer", kind="healthy", expected=[], step=None, location=None, cause=None)


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.inp = nn.Linear(8, d)
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, NUM_CLASSES)

    def forward(self, x):
        h = self.inp(x)
        a = self.ln1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        h = h + self.mlp(self.ln2(h))
        return self.head(h.mean(1))


def main(logdir):
    x, y = make_sequences(n=2048 + 256, seed=5)
    return train(logdir, SPEC, Block(), data=(x[:2048], y[:2048]), val=(x[2048:], y[2048:]), optimizer="adam", lr=2e-3,
                 steps=300, scheduler=lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 30)),
                 seed=5)


if __name__ == "__main__":
    cli(main)
