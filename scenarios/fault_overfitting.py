"""Fault: a wide MLP trained on 128 samples with noisy labels and evaluated on fresh data:
the validation loss turns up while the training loss keeps falling."""
from common import *

SPEC = dict(name="fault_overfitting", kind="faulty", expected=["OVERFITTING"], step=None, location=None,
            cause="overfitting")


def main(logdir):
    x, y = make_classification(n=128 + 1024, seed=26, noise=2.5)
    model = mlp(hidden=256)
    return train(logdir, SPEC, model, data=(x[:128], y[:128]), val=(x[128:], y[128:]), val_every=10, optimizer="adam",
                 lr=3e-3, steps=400, seed=26)


if __name__ == "__main__":
    cli(main)
