"""Fault: SGD with a learning rate of 1e-5: the weights barely move, the loss stays at its
initial value."""
from common import *

SPEC = dict(name="fault_lr_too_low", kind="faulty", expected=["LOSS_PLATEAU", "UPDATE_RATIO_LOW"], step=0,
            location=None, cause="lr_too_low")


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=1e-5, steps=250, seed=25)


if __name__ == "__main__":
    cli(main)
