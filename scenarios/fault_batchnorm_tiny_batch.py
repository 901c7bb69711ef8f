"""Fault: BatchNorm trained on batches of 2: every normalised value is +-1, the batch statistics
are noise and the running statistics used at evaluation do not match what training saw; the
network does not learn."""
from common import *

SPEC = dict(name="fault_batchnorm_tiny_batch", kind="faulty", expected=["ARCHITECTURE_WARNING", "LOSS_PLATEAU"], step=0,
            location=None, cause="batchnorm_stats")


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("bn1", nn.BatchNorm1d(64)), ("act1", nn.ReLU()),
                                   ("fc2", nn.Linear(64, 64)), ("bn2", nn.BatchNorm1d(64)), ("act2", nn.ReLU()),
                                   ("head", nn.Linear(64, NUM_CLASSES))]))
    x, y = make_classification(n=4096 + 512, seed=24)
    return train(logdir, SPEC, model, data=(x[:4096], y[:4096]), val=(x[4096:], y[4096:]), batch=2, lr=0.05,
                 momentum=0.9, steps=400, seed=24)


if __name__ == "__main__":
    cli(main)
