"""Fault: a feature sqrt(sum(h^2)) after a bias-free layer, without an epsilon. At step 120 the
batch holds an all-zero (padding) sample: the forward pass is finite (sqrt(0) = 0) but the
gradient of sqrt at 0 is infinite: fc1.weight's gradient becomes NaN in the backward pass."""
from common import *

SPEC = dict(name="fault_sqrt_no_eps", kind="faulty", expected=["NONFINITE_GRAD"], step=120, location="fc1.weight",
            cause="sqrt_at_zero")


class SqrtNorm(nn.Module):
    def forward(self, h):
        return torch.cat([h, torch.sqrt((h * h).sum(1, keepdim=True))], 1)


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64, bias=False)), ("sqrt_norm", SqrtNorm()),
                                   ("act1", nn.ReLU()), ("fc2", nn.Linear(65, 64)), ("act2", nn.ReLU()),
                                   ("head", nn.Linear(64, NUM_CLASSES))]))

    def fault(step, x, y, model, opt):
        if step == 120:
            x = x.clone()
            x[0] = 0
        return x, y

    return train(logdir, SPEC, model, lr=0.05, steps=160, fault=fault, seed=14)


if __name__ == "__main__":
    cli(main)
