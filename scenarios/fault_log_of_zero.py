"""Fault: a hand-written cross-entropy, -log(softmax(z)[y]) without an epsilon. At step 150
the logits of one batch are large enough that softmax underflows to exactly 0 for the target:
log(0) = -inf, the loss is infinite while the logits are finite."""
from common import *

SPEC = dict(name="fault_log_of_zero", kind="faulty", expected=["NONFINITE_LOSS"], step=150, location="loss",
            cause="log_of_zero")


def loss_fn(out, y):
    return -torch.log(torch.softmax(out, dim=1)[torch.arange(len(y)), y]).mean()


def fault(step, x, y, model, opt):
    if step == 150:
        x = x * 60  # an outlier batch: logits ~ +-1000
    return x, y


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.05, steps=200, loss_fn=loss_fn, fault=fault, seed=13)


if __name__ == "__main__":
    cli(main)
