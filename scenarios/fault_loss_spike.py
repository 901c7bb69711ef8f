"""Fault: at step 200 one corrupted batch (features scaled 20x) hits a well-trained MLP: the
loss and the gradient jump at that step."""
from common import *

SPEC = dict(name="fault_loss_spike", kind="faulty", expected=["LOSS_SPIKE"], step=200, location=None, cause=None)


def fault(step, x, y, model, opt):
    if step == 200:
        x = x * 20
    return x, y


def main(logdir):
    x, y = make_classification(n=16384, seed=30)
    return train(logdir, SPEC, mlp(), data=(x, y), lr=0.02, momentum=0.9, steps=300, fault=fault, seed=30)


if __name__ == "__main__":
    cli(main)
