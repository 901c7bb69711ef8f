"""Fault: fc2's output is kept in float16 (a cast module after it, to save activation
memory); fc2 was initialised 6x too large. From step 150 the data pipeline delivers the
features in other units (x6000): fc1's outputs stay below 65504, fc2's go past it, and the
cast turns them into Inf. The doctor should name fc2 (the layer whose values leave float16's
range) at step 150, with the share of its values that overflow and its largest value."""
from common import *

SPEC = dict(name="fault_fp16_activation_overflow", kind="faulty", expected=["FP16_OVERFLOW"], step=150,
            location="fc2", cause="precision_overflow")


class ToHalf(nn.Module):
    def forward(self, h):
        return h.half().float()


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("act1", nn.ReLU()), ("fc2", nn.Linear(64, 64)),
                                   ("fc2_half", ToHalf()), ("act2", nn.ReLU()), ("head", nn.Linear(64, NUM_CLASSES))]))
    with torch.no_grad():
        model.fc2.weight.mul_(6.0)

    def fault(step, x, y, model, opt):
        return (x * 6000.0 if step >= 150 else x), y

    return train(logdir, SPEC, model, lr=0.02, steps=180, fault=fault, seed=31, watch={"histograms_every": 10})


if __name__ == "__main__":
    cli(main)
