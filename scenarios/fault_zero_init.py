"""Fault: every weight matrix initialised to zero: all units of a layer are identical, their
gradients are zero, nothing but the output bias learns."""
from common import *

SPEC = dict(name="fault_zero_init", kind="faulty", expected=["WEIGHT_SYMMETRY", "GRAD_VANISHING"], step=0,
            location=None, cause="constant_init")


def main(logdir):
    model = mlp()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)
    return train(logdir, SPEC, model, lr=0.05, steps=200, seed=18)


if __name__ == "__main__":
    cli(main)
