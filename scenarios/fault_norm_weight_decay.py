"""Fault: a parameter-group mix-up puts the LayerNorm scales in the group with strong weight
decay: their learned scale shrinks toward zero while the rest of the model trains."""
from common import *

SPEC = dict(name="fault_norm_weight_decay", kind="faulty", expected=["NORM_SCALE_COLLAPSE"], step=None, location=None,
            cause="weight_decay_on_norm")


def main(logdir):
    model = nn.Sequential(dict_of([("fc1", nn.Linear(FEATURES, 64)), ("ln1", nn.LayerNorm(64)), ("act1", nn.ReLU()),
                                   ("fc2", nn.Linear(64, 64)), ("ln2", nn.LayerNorm(64)), ("act2", nn.ReLU()),
                                   ("head", nn.Linear(64, NUM_CLASSES))]))
    def groups(m):
        norm = [p for n, p in m.named_parameters() if n.startswith("ln")]
        rest = [p for n, p in m.named_parameters() if not n.startswith("ln")]
        return [{"params": rest, "weight_decay": 0.0}, {"params": norm, "weight_decay": 0.5}]

    return train(logdir, SPEC, model, lr=0.1, steps=400, param_groups=groups, seed=35)


if __name__ == "__main__":
    cli(main)
