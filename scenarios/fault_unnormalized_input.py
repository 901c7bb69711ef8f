"""Fault: raw features on a 0..1000 scale fed to the network (no standardisation)."""
from common import *

SPEC = dict(name="fault_unnormalized_input", kind="faulty", expected=["UNNORMALIZED_INPUT"], step=0, location=None,
            cause="unnormalized_input")


def main(logdir):
    x, y = make_classification(seed=22)
    x = (x - x.min()) * 100  # pixel-like raw scale
    return train(logdir, SPEC, mlp(), data=(x, y), lr=1e-4, steps=200, seed=22)


if __name__ == "__main__":
    cli(main)
