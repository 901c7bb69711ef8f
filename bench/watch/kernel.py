"""The statistics pass alone, on the gradients of the benchmark transformer (1.26 M values).

  torch basic  torch's own reductions per tensor: norm, abs max, NaN count, Inf count, zero
               count, min, max, mean, std (what a Python implementation calls)
  torch hist   an exponent histogram in torch: frexp + bincount per tensor
  C++ pass     trainscope's one pass over each tensor's memory (all statistics), without and
               with the exponent histogram; the portable scalar kernel is measured by
               re-running with TRAINSCOPE_NO_SIMD=1

    PYTHONPATH=build/python /usr/bin/python3 bench/watch/kernel.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import trainscope as ts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import lm_setup  # noqa: E402


def gradients():
    model, opt, batches, loss_fn = lm_setup()
    x, y = batches[0]
    loss_fn(model(x), y).backward()
    return [p.grad for p in model.parameters() if p.grad is not None]


def best_ms(fn, repeat=15):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3, statistics.median(times) * 1e3


def main():
    grads = gradients()
    n = sum(g.numel() for g in grads)
    run = ts.init(tempfile.mkdtemp(prefix="ts-kernel-"), "k")
    rec = run._recorder
    ids = [rec.series(f"grad/{i}", "tensor_stats") for i in range(len(grads))]
    ptrs = [g.data_ptr() for g in grads]
    numels = [g.numel() for g in grads]
    codes = [0] * len(grads)
    simd = "off (TRAINSCOPE_NO_SIMD)" if os.environ.get("TRAINSCOPE_NO_SIMD") else "on where the CPU has AVX2"
    if os.environ.get("TRAINSCOPE_KERNEL_CHILD"):
        for hist in (False, True):
            b, m = best_ms(lambda: rec.log_tensor_stats_many(0, ids, ptrs, numels, codes, [], [], hist))
            print(f"C++ pass, SIMD {simd}, histogram={hist}: best {b:.2f} ms, median {m:.2f} ms")
        run.finish()
        return

    def torch_basic():
        for g in grads:
            g.norm(); g.abs().max(); torch.isnan(g).sum(); torch.isinf(g).sum(); (g == 0).sum()
            g.min(); g.max(); g.mean(); g.std()

    def torch_hist():
        for g in grads:
            _, e = torch.frexp(g)
            torch.bincount((e.reshape(-1).long() + 63).clamp(0, 127), minlength=128)

    print(f"{len(grads)} gradient tensors, {n / 1e6:.2f} M float32 values, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    for name, fn in (("torch basic", torch_basic), ("torch hist", torch_hist)):
        b, m = best_ms(fn)
        print(f"{name}: best {b:.2f} ms, median {m:.2f} ms")
    run.finish()
    for extra in ({}, {"TRAINSCOPE_NO_SIMD": "1"}):
        env = dict(os.environ, TRAINSCOPE_KERNEL_CHILD="1", **extra)
        out = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
        print(out.stdout.strip())


if __name__ == "__main__":
    main()
