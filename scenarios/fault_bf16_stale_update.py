"""Fault: the model is cast to bfloat16 (weights included) and trained with Adam at lr 1e-4.
Adam's step is about lr per weight (1e-4), below half a bfloat16 ulp of most weights it is
added to (2^-8 of the weight's magnitude: 2.4e-4 for a weight of 0.06): the addition rounds
back to the old weight, most weights never move and the loss stalls, while the same
training in float32 learns (tests/python/test_numerics_scenarios.py runs the twins). The
doctor should say BF16_STALE_UPDATE, with the layer and the share of updates lost."""
from common import *

SPEC = dict(name="fault_bf16_stale_update", kind="faulty", expected=["BF16_STALE_UPDATE"], step=None,
            location="fc2.weight", cause="precision_overflow")

LR = 1e-4
STEPS = 300


def model_for(dtype):
    torch.manual_seed(0)
    m = mlp(hidden=128)
    return m.to(dtype)


def as_dtype(dtype):
    def fault(step, x, y, model, opt):
        return x.to(dtype), y
    return fault


def main(logdir, dtype=torch.bfloat16, name=None):
    spec = dict(SPEC, name=name or SPEC["name"])
    return train(logdir, spec, model_for(dtype), lr=LR, steps=STEPS, optimizer="adam", fault=as_dtype(dtype), seed=3,
                 loss_fn=lambda out, y: F.cross_entropy(out.float(), y))


if __name__ == "__main__":
    cli(main)
