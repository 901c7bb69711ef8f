"""Cost of ts.check_model (the checks run.watch() makes before the first step).

    PYTHONPATH=build/python /usr/bin/python3 bench/checks_bench.py

Per model, 51 calls, side by side in one run: the median and minimum wall time, and the
median CPU time of the process (time.process_time: on a shared machine a 3 ms call that is
preempted waits ~20 ms for the CPU, which is not its cost). Models: a 1,001-module
Sequential (250 x Linear/ReLU/Dropout/LayerNorm), a 12-layer TransformerEncoder (d=256), 40
conv/BatchNorm/ReLU blocks. No forward pass is run.
"""

import statistics
import time

import torch
from torch import nn

from trainscope.checks import check_model


def timed(fn, repeats=51):
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return statistics.median(wall) * 1e3, min(wall) * 1e3, statistics.median(cpu) * 1e3


def main():
    torch.manual_seed(0)
    models = {
        "sequential_1001": nn.Sequential(*[m for _ in range(250) for m in (nn.Linear(64, 64), nn.ReLU(),
                                                                           nn.Dropout(0.1), nn.LayerNorm(64))]),
        "transformer_12": nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024), 12),
        "cnn_blocks_40": nn.Sequential(*[m for _ in range(40) for m in (nn.Conv2d(32, 32, 3, padding=1),
                                                                        nn.BatchNorm2d(32), nn.ReLU())]),
    }
    loss = nn.CrossEntropyLoss()
    print(f"{'model':18s} {'modules':>8s} {'weights':>8s} {'wall median ms':>15s} {'wall min ms':>12s} "
          f"{'cpu median ms':>14s}")
    for name, model in models.items():
        modules = sum(1 for _ in model.modules())
        weights = sum(1 for p in model.parameters() if p.dim() >= 2)
        median, best, cpu = timed(lambda: check_model(model, loss, batch_size=32))
        print(f"{name:18s} {modules:8d} {weights:8d} {median:15.2f} {best:12.2f} {cpu:14.2f}")


if __name__ == "__main__":
    main()
