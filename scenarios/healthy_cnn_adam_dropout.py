"""Healthy: CNN without normalisation, dropout, Adam, classification metrics every 25 steps."""
from common import *

SPEC = dict(name="healthy_cnn_adam_dropout", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    model = nn.Sequential(dict_of([
        ("conv1", nn.Conv2d(1, 16, 3, padding=1)), ("relu1", nn.ReLU()), ("pool", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)), ("relu2", nn.ReLU()), ("flat", nn.Flatten()),
        ("drop", nn.Dropout(0.3)), ("head", nn.Linear(32 * 16, NUM_CLASSES))]))
    x, y = make_images(n=2048 + 256, seed=9)
    return train(logdir, SPEC, model, data=(x[:2048], y[:2048]), val=(x[2048:], y[2048:]), optimizer="adam", lr=1e-3,
                 steps=300, seed=9, log_classification=True)


if __name__ == "__main__":
    cli(main)
