"""Healthy: a small CNN with BatchNorm on generated 8x8 images, SGD with a step schedule."""
from common import *

SPEC = dict(name="healthy_cnn_batchnorm", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    model = nn.Sequential(dict_of([
        ("conv1", nn.Conv2d(1, 16, 3, padding=1)), ("bn1", nn.BatchNorm2d(16)), ("relu1", nn.ReLU()),
        ("pool", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)), ("bn2", nn.BatchNorm2d(32)), ("relu2", nn.ReLU()),
        ("gap", nn.AdaptiveAvgPool2d(1)), ("flat", nn.Flatten()), ("head", nn.Linear(32, NUM_CLASSES))]))
    x, y = make_images(n=2048 + 256, seed=3)
    return train(logdir, SPEC, model, data=(x[:2048], y[:2048]), val=(x[2048:], y[2048:]), lr=0.05, momentum=0.9,
                 steps=300, scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 150, 0.3), seed=3)


if __name__ == "__main__":
    cli(main)
