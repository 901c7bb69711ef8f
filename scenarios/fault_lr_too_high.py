"""Fault: SGD with a learning rate of 8 on an MLP from the first step: the loss blows up
within a few steps (divergence, then NaN)."""
from common import *

SPEC = dict(name="fault_lr_too_high", kind="faulty", expected=["LOSS_DIVERGENCE", "NONFINITE_LOSS", "NONFINITE_GRAD",
            "NONFINITE_ACTIVATION", "NONFINITE_WEIGHT", "UPDATE_RATIO_HIGH"], step=0, location=None, cause="lr_too_high")


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=8.0, momentum=0.9, steps=150, seed=11)


if __name__ == "__main__":
    cli(main)
