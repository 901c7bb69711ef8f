"""Healthy: a 2-layer ReLU MLP with SGD + momentum on generated blobs, validation every 25 steps."""
from common import *

SPEC = dict(name="healthy_mlp_sgd", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    x, y = make_classification(n=16384 + 512, seed=1)  # one set of class centres; the last 512 validate
    return train(logdir, SPEC, mlp(), data=(x[:16384], y[:16384]), val=(x[16384:], y[16384:]), lr=0.05, momentum=0.9,
                 steps=400, seed=1)


if __name__ == "__main__":
    cli(main)
