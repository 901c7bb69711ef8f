"""Healthy: a GRU sequence classifier with gradient clipping and Adam."""
from common import *

SPEC = dict(name="healthy_gru_clipped", kind="healthy", expected=[], step=None, location=None, cause=None)


class GruClassifier(nn.Module):
    def __init__(self, d=8, hidden=48):
        super().__init__()
        self.gru = nn.GRU(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def main(logdir):
    x, y = make_sequences(n=2048 + 256, seed=4)
    return train(logdir, SPEC, GruClassifier(), data=(x[:2048], y[:2048]), val=(x[2048:], y[2048:]), optimizer="adam",
                 lr=3e-3, clip=1.0, steps=300, seed=4)


if __name__ == "__main__":
    cli(main)
