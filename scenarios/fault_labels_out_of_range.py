"""Fault: at step 40 the batch's labels come numbered 1..10 for 10 classes (an off-by-one in a
label mapping). The 10 makes cross_entropy raise on the CPU; the run ends crashed, and the
label range recorded for that batch names the problem."""
from common import *

SPEC = dict(name="fault_labels_out_of_range", kind="faulty", expected=["LABEL_OUT_OF_RANGE"], step=40,
            location="input", cause="label_out_of_range")


def main(logdir):
    x, y = make_classification(seed=17)

    def fault(step, xb, yb):
        if step == 40:
            yb = yb + 1  # the mapping bug shows in the batch at step 40
        return xb, yb

    return train(logdir, SPEC, mlp(), data=(x, y), lr=0.05, steps=80, source_fault=fault, seed=17)


if __name__ == "__main__":
    cli(main)
