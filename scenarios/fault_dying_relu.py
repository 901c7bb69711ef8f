"""Fault: at step 100 one huge update pushes fc1's biases to -30 (what an LR spike does): most
ReLU units of act1 are off for every input from then on."""
from common import *

SPEC = dict(name="fault_dying_relu", kind="faulty", expected=["DEAD_UNITS"], step=100, location="act1",
            cause="dying_relu")


def fault(step, x, y, model, opt):
    if step == 100:
        with torch.no_grad():
            model.fc1.bias.sub_(30.0)
    return x, y


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.05, steps=200, fault=fault, seed=21)


if __name__ == "__main__":
    cli(main)
