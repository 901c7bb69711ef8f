"""Fault: nn.NLLLoss fed softmax probabilities instead of log-probabilities: the "loss" is
-p[y], negative from the first step."""
from common import *

SPEC = dict(name="fault_negative_loss", kind="faulty", expected=["NEGATIVE_LOSS"], step=0, location=None,
            cause="wrong_loss_inputs")


def loss_fn(out, y):
    return F.nll_loss(torch.softmax(out, dim=1), y)


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.05, steps=100, loss_fn=loss_fn, seed=32)


if __name__ == "__main__":
    cli(main)
