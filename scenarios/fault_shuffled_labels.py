"""Fault: labels shuffled independently of the inputs (a broken data pipeline): nothing can be
learned, the loss sits at chance level ln(10)."""
from common import *

SPEC = dict(name="fault_shuffled_labels", kind="faulty", expected=["LOSS_PLATEAU"], step=0, location=None,
            cause=None)


def main(logdir):
    x, y = make_classification(seed=33)
    y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(1))]
    return train(logdir, SPEC, mlp(), data=(x, y), optimizer="adam", lr=1e-3, steps=250, batch=64, seed=33)


if __name__ == "__main__":
    cli(main)
