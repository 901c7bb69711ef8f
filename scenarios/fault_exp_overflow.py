"""Fault: a hand-written softmax exp(z) / sum(exp(z)) without subtracting the max. At step 150
one sample's features are scaled up 100x; its logits pass 88 and exp overflows to inf:
inf / inf = NaN in the output of that module."""
from common import *

SPEC = dict(name="fault_exp_overflow", kind="faulty", expected=["NONFINITE_ACTIVATION"], step=150,
            location="naive_softmax", cause="exp_overflow")


class NaiveSoftmax(nn.Module):
    def forward(self, z):
        e = torch.exp(z)
        return e / e.sum(1, keepdim=True)


def loss_fn(probs, y):
    return F.nll_loss(torch.log(probs + 1e-9), y)


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("act1", nn.ReLU()),
                                   ("head", nn.Linear(64, NUM_CLASSES)), ("naive_softmax", NaiveSoftmax())]))

    def fault(step, x, y, model, opt):
        if step == 150:
            x = x.clone()
            x[3] *= 100
        return x, y

    return train(logdir, SPEC, model, lr=0.05, steps=180, loss_fn=loss_fn, fault=fault, seed=15)


if __name__ == "__main__":
    cli(main)
