"""Fault: every weight initialised to the same constant (0.05): the hidden units stay copies
of each other for the whole run."""
from common import *

SPEC = dict(name="fault_constant_init", kind="faulty", expected=["WEIGHT_SYMMETRY"], step=0, location=None,
            cause="constant_init")


def main(logdir):
    model = mlp()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.weight, 0.05)
            nn.init.zeros_(m.bias)
    return train(logdir, SPEC, model, lr=0.05, steps=200, seed=19)


if __name__ == "__main__":
    cli(main)
