"""Fault: from step 50 on the loop no longer calls optimizer.zero_grad(): every step applies
the sum of all gradients so far."""
from common import *

SPEC = dict(name="fault_missing_zero_grad", kind="faulty", expected=["GRAD_NOT_ZEROED"], step=50, location=None,
            cause="missing_zero_grad")


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.01, steps=150, zero_grad=lambda step: step < 50, seed=23)


if __name__ == "__main__":
    cli(main)
