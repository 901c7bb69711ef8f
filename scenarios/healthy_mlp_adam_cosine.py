"""Healthy: MLP with dropout, Adam and a cosine schedule with warm-up."""
from common import *

SPEC = dict(name="healthy_mlp_adam_cosine", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 128)), ("act1", nn.ReLU()), ("drop", nn.Dropout(0.2)),
                                   ("fc2", nn.Linear(128, 64)), ("act2", nn.GELU()), ("head", nn.Linear(64, NUM_CLASSES))]))
    steps = 400

    def schedule(opt):
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / 40) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))

    data = make_classification(n=4096 + 512, seed=2)
    return train(logdir, SPEC, model, data=(data[0][:4096], data[1][:4096]), val=(data[0][4096:], data[1][4096:]),
                 optimizer="adam", lr=3e-3, steps=steps, scheduler=schedule, seed=2)


if __name__ == "__main__":
    cli(main)
