"""Healthy: deeper tanh MLP with Xavier init, dropout and StepLR."""
from common import *

SPEC = dict(name="healthy_mlp_steplr_dropout", kind="healthy", expected=[], step=None, location=None, cause=None)


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("act1", nn.Tanh()), ("drop1", nn.Dropout(0.1)),
                                   ("fc2", nn.Linear(64, 64)), ("act2", nn.Tanh()), ("fc3", nn.Linear(64, 64)),
                                   ("act3", nn.Tanh()), ("head", nn.Linear(64, NUM_CLASSES))]))
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    x, y = make_classification(n=4096 + 512, seed=7)
    return train(logdir, SPEC, model, data=(x[:4096], y[:4096]), val=(x[4096:], y[4096:]), lr=0.05, momentum=0.9,
                 steps=400, scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, 100, 0.5), seed=7)


if __name__ == "__main__":
    cli(main)
