"""Fault: one sample of the batch at step 137 has a NaN feature (a missing value in the data)."""
from common import *

SPEC = dict(name="fault_nan_input", kind="faulty", expected=["NONFINITE_INPUT"], step=137, location="input",
            cause="input_nonfinite")


def fault(step, x, y, model, opt):
    if step == 137:
        x = x.clone()
        x[5, 3] = float("nan")
    return x, y


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.05, steps=180, fault=fault, seed=16)


if __name__ == "__main__":
    cli(main)
