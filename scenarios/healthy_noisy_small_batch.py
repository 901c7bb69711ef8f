"""Healthy: batch size 4 with label noise: a very noisy loss curve that must not raise alarms."""
from common import *

SPEC = dict(name="healthy_noisy_small_batch", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    x, y = make_classification(n=4096 + 512, seed=6, noise=2.5)
    g = torch.Generator().manual_seed(60)
    flip = torch.rand(len(y), generator=g) < 0.1
    y = torch.where(flip, torch.randint(0, NUM_CLASSES, (len(y),), generator=g), y)
    return train(logdir, SPEC, mlp(), data=(x[:4096], y[:4096]), val=(x[4096:], y[4096:]), batch=4, lr=0.02,
                 steps=600, seed=6)


if __name__ == "__main__":
    cli(main)
