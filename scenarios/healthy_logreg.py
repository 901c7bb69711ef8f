"""Healthy: multinomial logistic regression (one linear layer), full SGD."""
from common import *

SPEC = dict(name="healthy_logreg", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    model = nn.Sequential(dict_of([("linear", nn.Linear(FEATURES, NUM_CLASSES))]))
    x, y = make_classification(n=4096 + 512, seed=8)
    return train(logdir, SPEC, model, data=(x[:4096], y[:4096]), val=(x[4096:], y[4096:]), lr=0.1, batch=64,
                 steps=300, seed=8)


if __name__ == "__main__":
    cli(main)
