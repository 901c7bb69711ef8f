"""Fault: 90 % of the samples belong to class 0 and the classes overlap: the model predicts
class 0 almost always; accuracy looks fine, macro-F1 does not."""
from common import *

SPEC = dict(name="fault_class_imbalance", kind="faulty", expected=["METRIC_IMBALANCE"], step=None, location=None,
            cause="class_imbalance")


def main(logdir):
    x, y = make_classification(n=8192, seed=34, noise=4.0)
    g = torch.Generator().manual_seed(2)
    keep = (y == 0) | (torch.rand(len(y), generator=g) < 0.012)
    x, y = x[keep], y[keep]
    n = len(y) - 512
    return train(logdir, SPEC, mlp(), data=(x[:n], y[:n]), val=(x[n:], y[n:]), lr=0.05, steps=300, seed=34,
                 log_classification=True)


if __name__ == "__main__":
    cli(main)
