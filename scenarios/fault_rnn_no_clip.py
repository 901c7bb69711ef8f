"""Fault: a ReLU RNN (identity-like recurrent init) trained without gradient clipping: its
gradient norm bursts by an order of magnitude on its own (around step 95 here), and at step
150 a batch of large-valued sequences (inputs 20x) makes it jump 1000x; nothing clips it and
the run ends in NaN. The fault is there from the start, so no single injected step."""
from common import *

SPEC = dict(name="fault_rnn_no_clip", kind="faulty", expected=["GRAD_EXPLOSION", "NONFINITE_GRAD", "LOSS_SPIKE"],
            step=None, location=None, cause="gradient_explosion")


class Rnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 64, batch_first=True, nonlinearity="relu")
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(0.95 * torch.eye(64) + 0.02 * torch.randn(64, 64))
        self.head = nn.Linear(64, NUM_CLASSES)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def fault(step, x, y, model, opt):
    if step == 150:
        x = x * 20
    return x, y


def main(logdir):
    x, y = make_sequences(n=2048, length=30, seed=12)
    return train(logdir, SPEC, Rnn(), data=(x, y), lr=0.01, steps=250, fault=fault, seed=12)


if __name__ == "__main__":
    cli(main)
