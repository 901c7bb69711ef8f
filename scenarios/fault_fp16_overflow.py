"""Fault: an intermediate is cast to float16 (to save memory); at step 100 a batch with large
features pushes fc1's output past 65504 and the cast makes it inf: the first non-finite output
is the cast module's."""
from common import *

SPEC = dict(name="fault_fp16_overflow", kind="faulty", expected=["NONFINITE_ACTIVATION"], step=100,
            location="to_half", cause="precision_overflow")


class ToHalf(nn.Module):
    def forward(self, h):
        return h.half().float()


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("to_half", ToHalf()), ("act1", nn.ReLU()),
                                   ("head", nn.Linear(64, NUM_CLASSES))]))

    def fault(step, x, y, model, opt):
        if step == 100:
            x = x * 3e4
        return x, y

    return train(logdir, SPEC, model, lr=0.05, steps=130, fault=fault, seed=29)


if __name__ == "__main__":
    cli(main)
