"""Fault: the loop keeps every step's output tensor (with its autograd graph) in a list: host
memory grows every step and so does the count of torch.Tensor objects."""
from common import *

SPEC = dict(name="fault_leaked_tensors", kind="faulty", expected=["MEMORY_LEAK"], step=0, location=None,
            cause="retained_graph")

history = []


def fault(step, x, y, model, opt):
    # Keeps a big intermediate with its graph: what `history.append(loss)` does in real code,
    # made larger so a short run shows it.
    h = model.fc1(torch.cat([x] * 32))
    history.append(h)
    return x, y


def main(logdir):
    return train(logdir, SPEC, mlp(), lr=0.05, steps=400, fault=fault, batch=64, seed=28,
                 watch={"census_every": 5})


if __name__ == "__main__":
    cli(main)
