"""The CUDA paths of run.watch(), checked on a real GPU: run it whenever a machine has one.

    pip install .            # or: make build && export PYTHONPATH=build/python
    python bench/gpu_check.py [--out DIR] [--steps 60]

Three parts, each printed and written to DIR/gpu_check.json:

1. Statistics against torch. A small MLP + conv model trains on the GPU for a few steps
   with every statistic on each step; torch's own numbers (gradients before the step,
   weights before and after, the model's activations) are kept beside it and compared with
   what the store holds: norms, min/max, zero and non-finite counts, exponent histograms.
2. Overhead of watch() on GPT-2 small (124 M parameters, built from a config, no download)
   under bfloat16 autocast: plain, defaults, everything, one step of each mode in turn
   (a fresh random order each round), each step timed with CUDA events around the whole
   step and a synchronize after it. Medians and the ratio to plain.
3. MFU of GPT-2 small in bf16 (batch 8 x 1024 tokens) against the peak table's figure for
   the GPU (H100 SXM / H200: 989.5 dense TFLOP/s): FLOPs counted by ts.count_flops and by
   6N + 12LHQT side by side, read back through `trainscope perf run`.

Exits 2 without a CUDA device, 1 when a statistic disagrees with torch. CI never runs it
(no GPU there); docs/benchmarks.md keeps its numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time

import torch

import trainscope as ts


def stats_against_torch(logdir, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept = {"grads": [], "before": [], "after": []}
    inner = optimizer.step

    def spy_step(*args, **kwargs):  # installed before watch(): trainscope's wrapper goes around it
        kept["grads"].append({n: p.grad.detach().double().cpu() for n, p in model.named_parameters()})
        kept["before"].append({n: p.detach().double().cpu() for n, p in model.named_parameters()})
        result = inner(*args, **kwargs)
        kept["after"].append({n: p.detach().double().cpu() for n, p in model.named_parameters()})
        return result

    optimizer.step = spy_step
    run = ts.init(logdir=logdir, name="stats")
    run.watch(model, optimizer, every=1, histograms_every=1, activations_every=1, weights_every=1)
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 3, 8, 8, device="cuda", generator=g)
        y = torch.randint(0, 10, (16,), device="cuda", generator=g)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        run.log({"train/loss": loss})
    run.finish()

    view = ts.open_run(os.path.join(logdir, "stats"))
    failures = []

    def close(what, got, want, rel):
        if not math.isclose(got, want, rel_tol=rel, abs_tol=1e-12):
            failures.append(f"{what}: stored {got!r}, torch {want!r}")

    def exponent_bins(t):
        t = t.reshape(-1)
        t = t[torch.isfinite(t) & (t != 0)]
        _, e = torch.frexp(t)
        return torch.bincount((e - 1 + 64).clamp(0, 127), minlength=128).tolist()

    checked = 0
    for name, _ in model.named_parameters():
        for family, tensors in (("grad", kept["grads"]), ("weight", kept["after"])):
            stored = view.tensor_stats(f"{family}/{name}")
            if [s["step"] for s in stored] != list(range(steps)):
                failures.append(f"{family}/{name}: steps {[s['step'] for s in stored]}")
                continue
            for s, by_name in zip(stored, tensors):
                t = by_name[name]
                close(f"{family}/{name} step {s['step']} l2_norm", s["l2_norm"], float(t.norm()), 1e-5)
                close(f"{family}/{name} step {s['step']} min", s["min"], float(t.min()), 1e-6)
                close(f"{family}/{name} step {s['step']} max", s["max"], float(t.max()), 1e-6)
                if s["zeros"] != int((t == 0).sum()) or s["nan"] or s["inf"]:
                    failures.append(f"{family}/{name} step {s['step']}: counts {s['zeros']}, {s['nan']}, {s['inf']}")
                if "exponent_counts" in s and s["exponent_counts"] != exponent_bins(t):
                    failures.append(f"{family}/{name} step {s['step']}: exponent histogram differs")
                checked += 1
        updates = view.tensor_stats(f"update/{name}")
        for s in updates:
            i = s["step"]
            if 0 <= i < steps:
                du = kept["after"][i][name] - kept["before"][i][name]
                close(f"update/{name} step {i} l2_norm", s["l2_norm"], float(du.norm()), 1e-4)
                checked += 1
    norms = view.scalars("grad/global_norm")["value"]
    for i, grads in enumerate(kept["grads"]):
        close(f"grad/global_norm step {i}", float(norms[i]),
              math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values())), 1e-5)
        checked += 1
    return {"checked": checked, "failures": failures,
            "cuda_series": sorted(s["tag"] for s in view.series() if s["tag"].startswith("mem/cuda"))}


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257))


def overhead(logdir, steps, batch=8, seq=512):
    modes = {"plain": None, "defaults": {},
             "everything": {"histograms_every": 1, "activations_every": 1, "weights_every": 1}}
    models, optimizers, runs = {}, {}, {}
    for mode, options in modes.items():
        model = gpt2_small().cuda()
        models[mode] = model
        optimizers[mode] = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        if options is not None:
            runs[mode] = ts.init(logdir=logdir, name=f"gpt2-{mode}")
            runs[mode].watch(model, optimizers[mode], **options)
    g = torch.Generator(device="cuda").manual_seed(2)
    tokens = torch.randint(0, 50257, (batch, seq + 1), device="cuda", generator=g)
    times = {mode: [] for mode in modes}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    order = list(modes)
    for step in range(steps + 5):
        random.shuffle(order)
        for mode in order:
            model, optimizer = models[mode], optimizers[mode]
            start.record()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens[:, :-1]).logits
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                         tokens[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if mode in runs:
                runs[mode].log({"train/loss": loss})
            end.record()
            torch.cuda.synchronize()
            if step >= 5:  # warm-up: allocator, cuBLAS heuristics, first statistics plans
                times[mode].append(start.elapsed_time(end))
    for run in runs.values():
        run.finish()
    plain = statistics.median(times["plain"])
    return {mode: {"median_ms": statistics.median(t), "vs_plain_pct": 100 * (statistics.median(t) / plain - 1),
                   "steps": len(t)} for mode, t in times.items()}


def mfu_gpt2(logdir, steps, batch=8, seq=1024):
    """MFU of GPT-2 small under bfloat16 autocast against the peak table's figure for this GPU
    (H100 SXM / H200: 989.5 dense bf16 TFLOP/s): FLOPs per step counted by ts.count_flops and by
    PaLM's 6N + 12LHQT, step time from CUDA events around the whole step, recorded into a run
    and read back by `trainscope perf run` (docs/perf.md)."""
    import shutil
    import subprocess
    from trainscope.flops import transformer_flops_per_token

    model = gpt2_small().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator(device="cuda").manual_seed(3)
    tokens = torch.randint(0, 50257, (batch, seq + 1), device="cuda", generator=g)
    counted = ts.count_flops(model, (tokens[:, :-1],))
    config = model.config
    n_params = sum(p.numel() for p in model.parameters())  # the tied wte/lm_head once
    formula = transformer_flops_per_token(n_params, config.n_layer, config.n_head, config.n_embd // config.n_head,
                                          seq) * batch * seq
    run = ts.init(logdir=logdir, name="gpt2-mfu")
    ts.perf.record(run, counted, tokens_per_step=batch * seq, samples_per_step=batch, precision="bf16")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for step in range(steps + 5):
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                     tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3
        if step >= 5:
            times.append(seconds)
            run.log({"time/step": seconds, "train/loss": loss.item()}, step=step - 5)
    run.finish()
    median = statistics.median(times)
    result = {"device": torch.cuda.get_device_name(), "batch": batch, "seq": seq, "steps": len(times),
              "median_step_s": median, "counted_training_flops_per_step": counted.training_flops,
              "formula_flops_per_step": formula, "counted_over_formula": counted.training_flops / formula,
              "counted_tokens_per_s": batch * seq / median,
              "counted_flops_per_s": counted.training_flops / median, "formula_flops_per_s": formula / median,
              "uncounted_ops": counted.uncounted}
    cli = shutil.which("trainscope") or os.path.join(os.path.dirname(ts.__file__), "..", "..", "trainscope")
    try:
        out = subprocess.run([cli, "perf", "run", os.path.join(logdir, "gpt2-mfu"), "--json"], capture_output=True,
                             text=True, timeout=120)
        perf = json.loads(out.stdout)
        result.update({"peak_flops": perf["peak_flops"], "peak_source": perf["peak_source"], "mfu_counted": perf["mfu"],
                       "mfu_formula": formula / median / perf["peak_flops"] if perf["peak_flops"] else None,
                       "perf_run_step_s": perf["step_seconds"]})
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as error:
        result["perf_run_error"] = f"{type(error).__name__}: {error}"
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    with tempfile.TemporaryDirectory() as logdir:
        report["statistics"] = stats_against_torch(logdir)
        print(json.dumps(report["statistics"], indent=1), flush=True)
        try:
            report["overhead"] = overhead(logdir, args.steps)
        except ImportError as error:  # transformers missing: the statistics still count
            report["overhead"] = {"skipped": str(error)}
        print(json.dumps(report["overhead"], indent=1), flush=True)
        try:
            report["mfu"] = mfu_gpt2(logdir, args.steps)
        except ImportError as error:
            report["mfu"] = {"skipped": str(error)}
        print(json.dumps(report["mfu"], indent=1), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 1 if report["statistics"]["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
