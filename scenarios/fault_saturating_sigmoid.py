"""Fault: eight sigmoid layers with a large init (std 1): the units saturate and the
gradient vanishes toward the input."""
from common import *

SPEC = dict(name="fault_saturating_sigmoid", kind="faulty", expected=["ACTIVATION_SATURATION", "GRAD_VANISHING"],
            step=0, location=None, cause="saturating_activation")


def main(logdir):
    model = mlp(depth=8, act=nn.Sigmoid)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0)
    return train(logdir, SPEC, model, lr=0.1, steps=200, seed=20)


if __name__ == "__main__":
    cli(main)
