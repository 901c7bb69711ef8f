"""Fault: a scheduler bug multiplies the learning rate by 100 at step 200: the loss climbs away
from its minimum."""
from common import *

SPEC = dict(name="fault_lr_schedule_bug", kind="faulty", expected=["LR_ANOMALY", "LOSS_DIVERGENCE"], step=200,
            location=None, cause="lr_too_high")


def main(logdir):
    x, y = make_classification(n=16384, seed=31)
    sched = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 if s < 200 else 100.0)
    return train(logdir, SPEC, mlp(), data=(x, y), lr=0.02, momentum=0.9, steps=300, scheduler=sched, seed=31)


if __name__ == "__main__":
    cli(main)
