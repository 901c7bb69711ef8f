"""Overhead of run.watch() on real CPU trainings, side by side.

Modes, each in its own process with its own model (and, when watched, its own run), trained
in turn block by block (A B C D E A B C D E ...), so machine noise hits them alike; one
process per mode so that each mode's CPU time holds its own threads (trainscope's writer,
online doctor and sampler) and nothing of the others':
  plain      the training loop alone
  control    the training loop alone again, in its own process: an A/A comparison whose
             distance from plain is what the benchmark cannot tell from nothing
  defaults   run.watch(model, opt) + run.data(loader)
  everything every statistic every step: every=1, histograms_every=1, activations_every=1,
             weights_every=1, units_every=1
  naive      per-parameter Python stats, what popular trackers do: norm, max, NaN count, mean,
             std and a 64-bin histc, each with .item()
  anomaly    torch.autograd.detect_anomaly()
  wandb      W&B's wandb.watch(model) (gradient histograms every 1,000 steps) and wandb.log of the
             loss, offline, in a venv of its own (--wandb-python)
  wandb_all  wandb.watch(model, log="all", log_freq=1): gradients and parameters every step
Reported per mode: the median over blocks of the mean step time of a block, as process CPU
time (the training thread plus trainscope's threads; robust to other processes sharing the
cores) and as wall time, and the median over rounds of the per-round ratio to plain
(neighbouring blocks share the machine's state); and the training thread's minor page
faults per step.

    PYTHONPATH=build/python /usr/bin/python3 bench/watch/overhead.py [--rounds 10] [--block 10] [--threads 1]
    ... overhead.py --only cnn --threads 1 --modes plain,control,defaults,everything --processes 24 \
        --randomize-layout --code before=/path/to/old/python --code now=build/python

--threads N sets torch's and OpenBLAS's threads (OpenBLAS's idle threads spin, which on a
shared 2-core machine turns other processes' load into this one's CPU time).
--processes P repeats the whole set of processes P times and reports medians over the
processes, paired set by set: each process's heap is its own draw (see bench()).
--code NAME=PYTHONPATH (repeated) runs each watched mode once per trainscope version.
With several processes each paired ratio comes with a bootstrap 95 % interval of its median
over processes; --json FILE keeps every process's numbers. --randomize-layout gives each
process a random memory layout, without which an A/A pair (plain, control) differs by a few
per cent on the CNN under glibc's heap (see bench()).
--alternate measures plain and watched blocks in the same process instead, the watcher
attached and removed in between, so that both sides of each ratio share one heap (see
bench_alternating()); it also reports each side's floor, a low percentile of its step times,
which on a VM whose neighbours slow some steps resolves what the median cannot (see floor()):

    ... overhead.py --alternate --only cnn --threads 1 --modes plain,defaults --rounds 4 --block 5 \
        --warmup-steps 55 --processes 12 --randomize-layout --code before=... --code now=build/python
"""

import argparse
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__" and "--threads" in sys.argv:  # before torch loads OpenBLAS
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import torch

import trainscope as ts


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(torch.nn.Module):
    """6 blocks of LayerNorm + multi-head attention + MLP, d=128: 78 parameter tensors."""

    def __init__(self, vocab=256, d=128, layers=6, heads=4, context=64):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(context, d))
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


def lm_setup():
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 256, (16, 65), generator=g) for _ in range(8)]
    batches = [(d[:, :-1], d[:, 1:]) for d in data]

    def loss_fn(out, y):
        return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return model, opt, batches, loss_fn


def cnn_setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128 * 8 * 8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)) for _ in range(8)]
    return model, opt, batches, torch.nn.functional.cross_entropy


def naive_stats(model):
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        if g is None:
            continue
        out[f"grad/{name}/norm"] = g.norm().item()
        out[f"grad/{name}/max"] = g.abs().max().item()
        out[f"grad/{name}/nan"] = torch.isnan(g).sum().item()
        out[f"grad/{name}/mean"] = g.mean().item()
        out[f"grad/{name}/std"] = g.std().item()
        out[f"grad/{name}/hist"] = torch.histc(g.float(), bins=64).tolist()
    return out


TRAINSCOPE_MODES = ("defaults", "everything")  # the modes that run trainscope
# W&B's wandb.watch() as its docs show it, offline (a run directory, no server): "wandb" is its
# default (gradient histograms every 1,000 steps) and wandb.log of the loss each step;
# "wandb_all" logs gradients and parameters every step, as "everything" does.
WANDB_MODES = {"wandb": dict(log="gradients", log_freq=1000), "wandb_all": dict(log="all", log_freq=1)}
WATCHED = TRAINSCOPE_MODES + tuple(WANDB_MODES)
# pip install wandb into a venv over Debian's Python and torch (docs/benchmarks.md "Watch overhead"):
#   /usr/bin/python3 -m venv --system-site-packages /root/.cache/trainscope/wandb-venv
#   /root/.cache/trainscope/wandb-venv/bin/pip install wandb
WANDB_VENV_PYTHON = "/root/.cache/trainscope/wandb-venv/bin/python"
WANDB_PYTHON = WANDB_VENV_PYTHON  # --wandb-python

# watch() options of the "everything" mode: every statistic every step
EVERYTHING = dict(every=1, histograms_every=1, activations_every=1, weights_every=1, units_every=1)


def train_step(mode, model, opt, loss_fn, x, y, run=None):
    """One training step as the mode trains it (naive statistics, detect_anomaly); a
    watched mode logs its loss to its run (trainscope's, or W&B's wandb module)."""
    with torch.autograd.detect_anomaly() if mode == "anomaly" else contextlib.nullcontext():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if mode == "naive":
            naive_stats(model)
        opt.step()
    if run is not None:
        run.log({"train/loss": loss if mode in TRAINSCOPE_MODES else loss.item()})


class Mode:
    def __init__(self, name, setup, logdir, alternate=False):
        self.name = name
        self.model, self.opt, self.batches, self.loss_fn = setup()
        self.run = None
        self.watcher = None     # alternate: attached for the watched blocks only
        self.attached = not alternate
        self.block_means = []   # wall seconds per step, per block
        self.block_cpu = []     # process CPU seconds per step, per block
        self.block_faults = []  # minor page faults of the training thread per step, per block
        self.block_steps = []   # wall seconds of each step, per block
        self.step_wall = {}     # run step -> wall seconds of that loop iteration (watched modes)
        self.step_thread = {}   # run step -> CPU seconds of the training thread in that iteration
        self.block_watched = []  # per recorded block: watched (alternate: as asked; the control's are plain)
        self.cursor = 0
        if name in TRAINSCOPE_MODES:
            self.run = ts.init(logdir, f"{name}-{id(self)}", flush_interval=1.0)
        elif name in WANDB_MODES:
            import wandb
            wandb.init(project="overhead", name=f"{name}-{id(self)}", dir=logdir, mode="offline")
            self.run = wandb
        if self.run is not None and not alternate:
            self.attach()

    def attach(self):
        if self.name in WANDB_MODES:
            self.run.watch(self.model, **WANDB_MODES[self.name])
        else:
            self.watcher = self.run.watch(self.model, self.opt, **(EVERYTHING if self.name == "everything" else {}))
        self.attached = True

    def detach(self):
        """The watcher's hooks and wrappers removed; the run (its recorder and threads) stays open."""
        if self.name in WANDB_MODES:
            self.run.unwatch(self.model)
        else:
            self.watcher.close()
            self.run._watchers.remove(self.watcher)
            self.watcher = None
        self.attached = False

    def train_block(self, steps, record):
        loader = self.batches[self.cursor:] + self.batches[:self.cursor]
        loader = (loader * (steps // len(loader) + 1))[:steps]
        self.cursor = (self.cursor + steps) % len(self.batches)
        run = self.run if self.attached else None
        source = run.data(loader) if run is not None and self.name in TRAINSCOPE_MODES else loader
        times = []
        faults_start = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        cpu_start = time.process_time()
        start = time.perf_counter()
        thread_start = time.thread_time()
        for x, y in source:
            train_step(self.name, self.model, self.opt, self.loss_fn, x, y, run)
            now = time.perf_counter()
            times.append(now - start)
            thread_now = time.thread_time()
            if run is not None and record and self.name in TRAINSCOPE_MODES:
                self.step_wall[self.run._step] = now - start
                self.step_thread[self.run._step] = thread_now - thread_start
            start, thread_start = now, thread_now
        cpu = (time.process_time() - cpu_start) / len(times)
        if record:
            self.block_steps.append(times)
            self.block_means.append(sum(times) / len(times))
            self.block_cpu.append(cpu)
            self.block_faults.append((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults_start) / len(times))


SETUPS = {"lm": lm_setup, "cnn": cnn_setup}
LM_LABEL = "Transformer LM (6 blocks, d=128, 16x64 tokens)"
CNN_LABEL = "CNN (3 conv + BN + ReLU, 2 linear; 32x3x32x32)"


def worker(model_name, mode_name, logdir, cpu_clock, alternate=False):
    """One mode in its own process: trains a block per request read from stdin."""
    if cpu_clock:  # time/watch as the training thread's CPU time (see trainscope/_watch/hooks.py)
        import trainscope.watch
        try:
            import trainscope._watch.hooks as clock_owner
        except ImportError:  # the code before the watcher's split (A/B runs against it)
            clock_owner = trainscope.watch
        clock_owner.self_clock = time.thread_time
    mode = Mode(mode_name, SETUPS[model_name], logdir, alternate)
    for line in sys.stdin:
        request = json.loads(line)
        if request["do"] == "block":
            if alternate and mode.run is not None and request["watched"] != mode.attached:
                mode.attach() if request["watched"] else mode.detach()
                mode.train_block(1, record=False)  # the first step after the switch: hooks, plan, snapshots
            mode.train_block(request["steps"], record=request["record"])
            if request["record"]:
                mode.block_watched.append(request.get("watched", mode.run is not None))
            reply = {}
        else:  # finish: the run's own measure of its cost, warm-up steps left out
            reply = {"cpu": mode.block_cpu, "wall": mode.block_means, "faults": mode.block_faults, "own": None,
                     "steps": mode.block_steps,
                     "watched": mode.block_watched,
                     "tensors": len(list(mode.model.parameters())),
                     "values": sum(p.numel() for p in mode.model.parameters())}
            if mode.name in WANDB_MODES:
                mode.run.finish()
            elif mode.run is not None:
                mode.run.finish()
                watch = ts.open_run(mode.run.dir).scalars("time/watch")
                per_step = mode.step_thread if cpu_clock else mode.step_wall
                ratios, spent, rest = [], 0.0, 0.0
                for step, w in zip(watch["step"].tolist(), watch["value"].tolist()):
                    if step in per_step:
                        ratios.append(w / (per_step[step] - w))
                        spent += w
                        rest += per_step[step] - w
                reply["own"] = (statistics.median(ratios), spent / rest, spent / len(ratios))
        print(json.dumps(reply), flush=True)
        if request["do"] == "finish":
            return


def run_workers(model_name, rounds, block, modes, threads, cpu_clock, logdir, codes, warmup=0, layouts=None,
                alternate=False):
    """One process per mode, trained block by block in turn; their finish replies. A mode
    "defaults@before" runs the trainscope found on codes["before"] (a PYTHONPATH).
    layouts: a random.Random; each process then gets an environment variable of a random
    length (0 to 64 KiB), which moves its stack and every later heap allocation (see bench()).
    alternate: each round trains every process twice, a plain block and a watched one (in
    turn first), the watcher attached and removed in between (bench_alternating())."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", model_name, "--logdir", logdir]
    if alternate:
        command.append("--alternate")
    if cpu_clock:
        command.append("--self-cpu")
    if threads:
        command += ["--threads", str(threads)]

    def start(mode):
        name, _, code = mode.partition("@")
        env = dict(os.environ, PYTHONPATH=codes[code]) if code else dict(os.environ)
        if layouts is not None:
            env["TRAINSCOPE_BENCH_LAYOUT"] = "x" * layouts.randrange(0, 65536, 16)
        python = [sys.executable]
        if name in WANDB_MODES:  # its own venv; quiet, and stdout left alone (the workers' replies go there)
            python = [WANDB_PYTHON]
            env.update(WANDB_SILENT="true", WANDB_CONSOLE="off", WANDB_MODE="offline")
        return subprocess.Popen(python + command[1:] + ["--mode", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
    workers = {m: start(m) for m in modes}

    def ask(mode, request):
        w = workers[mode]
        w.stdin.write(json.dumps(request) + "\n")
        w.stdin.flush()
        line = w.stdout.readline()
        if not line:
            raise RuntimeError(f"the {mode} worker died")
        return json.loads(line)

    for r in range(rounds + 1):  # round 0 warms up (allocator, first histograms and census)
        for mode in modes:
            if not alternate:
                ask(mode, {"do": "block", "steps": block if r else max(block, warmup), "record": r > 0})
            elif r == 0:  # watched, so that the dense first steps are behind
                ask(mode, {"do": "block", "steps": max(block, warmup), "record": False, "watched": True})
            else:
                for watched in ((False, True) if r % 2 else (True, False)):
                    ask(mode, {"do": "block", "steps": block, "record": True, "watched": watched})
    results = {mode: ask(mode, {"do": "finish"}) for mode in modes}
    for w in workers.values():
        w.wait()
    return results


def bootstrap_interval(values, draws=2000):
    """Bootstrap 95 % interval of the median of values (paired ratios over processes; fixed seed)."""
    pick = random.Random(0)
    medians = sorted(statistics.median(pick.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def bench(label, model_name, rounds, block, modes, threads, cpu_clock, processes=1, codes=None, warmup=0,
          json_path=None, randomize_layout=False):
    """processes > 1: that many fresh sets of worker processes, one after the other (the
    mode order rotated each time), and the medians over processes. A process's heap is a
    draw of its own: with glibc's malloc the CNN's training thread took ~4,500 page faults a
    step in one process and ~14,000 in the next of the same mode (docs/benchmarks.md), a
    spread larger than the effect measured, so one process per mode measures that draw.
    The draw also follows from the process's memory layout, which changes with anything: a
    mode's name two letters longer on the command line moved the plain CNN by -3.9 %
    (the A/A mode "control"). randomize_layout gives every process a random layout (an
    environment variable of random length), so that each mode's processes sample layouts
    alike and their medians compare the code, not the one layout its name and
    allocations fell on (Mytkowicz et al., "Producing wrong data without doing anything
    obviously wrong!", ASPLOS 2009)."""
    logdir = tempfile.mkdtemp(prefix="ts-bench-watch-")
    sets = []
    layouts = random.Random(f"{model_name} {randomize_layout}") if randomize_layout else None
    for p in range(processes):
        order = modes[p % len(modes):] + modes[:p % len(modes)]
        sets.append(run_workers(model_name, rounds, block, order, threads, cpu_clock, logdir, codes or {}, warmup,
                                layouts))
    plain = sets[0]["plain"]
    print(f"\n{label}: {plain['tensors']} parameter tensors, {plain['values'] / 1e6:.2f} M values; "
          f"{max(block, warmup)} steps of warm-up, then {rounds} blocks of {block} steps per mode, interleaved, "
          f"one process per mode"
          + (f"; {processes} sets of processes" if processes > 1 else "")
          + ("; a random memory layout per process" if randomize_layout else ""))
    width = max(12, max(map(len, modes)) + 2)
    print(f"{'mode':<{width}}{'CPU ms/step':>12}{'vs plain':>10}{'paired':>9}{'wall ms/step':>14}{'vs plain':>10}"
          f"{'paired':>9}{'faults/step':>13}")

    def per_process(mode, key):  # one number per process: the median over its blocks
        return [statistics.median(s[mode][key]) for s in sets]

    def ratios(mode, key):  # to plain: block by block within the one set, else process by process
        if processes == 1:
            return [a / b for a, b in zip(sets[0][mode][key], sets[0]["plain"][key])]
        return [a / b for a, b in zip(per_process(mode, key), per_process("plain", key))]

    def paired(mode, key):
        return statistics.median(ratios(mode, key))

    def interval(mode, key):
        return bootstrap_interval(ratios(mode, key))

    summary = {}
    plain_cpu, plain_wall = statistics.median(per_process("plain", "cpu")), statistics.median(per_process("plain", "wall"))
    for mode in modes:
        cpu, wall = statistics.median(per_process(mode, "cpu")), statistics.median(per_process(mode, "wall"))
        faults = statistics.median(per_process(mode, "faults"))
        cpu_paired, wall_paired = paired(mode, "cpu"), paired(mode, "wall")
        print(f"{mode:<{width}}{cpu * 1e3:>12.2f}{(cpu / plain_cpu - 1) * 100:>+9.1f}%{(cpu_paired - 1) * 100:>+8.1f}%"
              f"{wall * 1e3:>14.2f}{(wall / plain_wall - 1) * 100:>+9.1f}%{(wall_paired - 1) * 100:>+8.1f}%"
              f"{faults:>13.0f}"
              + (" wall paired 95%% [%+.1f%% .. %+.1f%%]" % tuple((v - 1) * 100 for v in interval(mode, "wall"))
                 if processes >= 5 and mode != "plain" else ""))
        summary[mode] = (cpu, cpu_paired, wall)
    print("self-measured (time/watch against the rest of the same step, as "
          f"{'CPU time of the training thread' if cpu_clock else 'wall time'}; median over processes):")
    for mode in modes:
        owns = [s[mode]["own"] for s in sets if s[mode]["own"] is not None]
        if owns:
            median, total, per_step = (statistics.median(o[i] for o in owns) for i in range(3))
            print(f"  {mode:<{width}} median step {median * 100:+.2f}%, all steps {total * 100:+.2f}% "
                  f"({per_step * 1e3:.2f} ms/step inside trainscope)")
    if json_path:
        with open(json_path, "w") as out:
            json.dump({"label": label, "sets": sets}, out)
    return summary


FLOOR_PERCENTILE = 10


def floor(result, watched):
    """The FLOOR_PERCENTILE-th percentile of the step times of one side (plain or watched) of
    an alternating process. On a VM whose neighbours slow some steps (this one's plain CNN
    steps took 134-310 ms, the slow ones in runs of a few steps) contention only ever adds
    time, so the low percentiles are where the training's own cost shows: within one process
    an A/A pair's p10 agreed within ~1 % over 150 steps where its medians differed by 3 %.
    A cost paid on a fraction f of the steps moves the floor by about f times that cost as
    long as the cost is small beside the floor's own spread (a few ms here); a larger one
    (a histogram step's) is under-counted, which is why the median is reported too."""
    steps = sorted(t for block, w in zip(result["steps"], result["watched"]) if w == watched for t in block)
    return statistics.quantiles(steps, n=100)[FLOOR_PERCENTILE - 1]


def bench_alternating(label, model_name, rounds, block, modes, threads, cpu_clock, processes, codes, warmup,
                      json_path=None, randomize_layout=False):
    """Plain and watched blocks in the same process: the watcher attached for a block,
    removed for the next (each switch followed by one unmeasured step), so that both sides
    of a ratio share one heap and its page-fault draw, which between processes moves a CNN
    step by several per cent either way (bench()). What it measures is the cost of
    watching: hooks, wrappers, statistics and run.log; ts.init's run stays open through the
    plain blocks, so whatever the open recorder itself moves in the heap is not in it. The
    A/A pair is "control": a plain process whose blocks are labelled alike."""
    logdir = tempfile.mkdtemp(prefix="ts-bench-watch-")
    layouts = random.Random(f"{model_name} {randomize_layout}") if randomize_layout else None
    modes = ["control"] + [m for m in modes if m.partition("@")[0] in WATCHED]
    sets = []
    for p in range(processes):
        order = modes[p % len(modes):] + modes[:p % len(modes)]
        sets.append(run_workers(model_name, rounds, block, order, threads, cpu_clock, logdir, codes or {}, warmup,
                                layouts, alternate=True))
    print(f"\n{label}: {sets[0]['control']['tensors']} parameter tensors; {warmup} steps of warm-up watched, then "
          f"{rounds} rounds of a plain and a watched block of {block} steps (+1 after each switch) in the same "
          f"process; {processes} sets of processes" + ("; a random memory layout per process" if layouts else ""))
    def median_of(result, key, watched):  # one side's median over its blocks
        return statistics.median(v for v, w in zip(result[key], result["watched"]) if w == watched)

    estimators = ((f"median of the block medians; faults/step plain, watched", lambda r, w: median_of(r, "wall", w)),
                  (f"floor: the {FLOOR_PERCENTILE}th percentile of each side's step times (see floor())", floor))
    for title, side in estimators:
        print(f"{title}\n{'mode':<20}{'plain ms':>10}{'watched ms':>12}{'paired':>9}  95 % interval")
        for mode in modes:
            plain = [side(s[mode], False) for s in sets]
            watched = [side(s[mode], True) for s in sets]
            ratios = [w / p for w, p in zip(watched, plain)]
            low, high = bootstrap_interval(ratios)
            faults = "".join(f"{statistics.median(median_of(s[mode], 'faults', w) for s in sets):>9.0f}"
                             for w in (False, True)) if side is not floor else ""
            print(f"{mode:<20}{statistics.median(plain) * 1e3:>10.2f}{statistics.median(watched) * 1e3:>12.2f}"
                  f"{(statistics.median(ratios) - 1) * 100:>+8.1f}%  [{(low - 1) * 100:+.1f}% .. {(high - 1) * 100:+.1f}%]"
                  f"{faults}")
    for mode in modes:
        owns = [s[mode]["own"] for s in sets if s[mode]["own"] is not None]
        if owns:
            print(f"  {mode:<18} {statistics.median(o[2] for o in owns) * 1e3:.2f} ms/step inside trainscope "
                  f"(time/watch, watched steps)")
    if json_path:
        with open(json_path, "w") as out:
            json.dump({"label": label, "sets": sets, "alternate": True}, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--only", choices=["lm", "cnn"], default=None)
    parser.add_argument("--modes", default="plain,defaults,everything,naive,anomaly",
                        help="comma-separated, plain first")
    parser.add_argument("--code", action="append", default=[], metavar="NAME=PYTHONPATH",
                        help="A/B of trainscope versions: each watched mode runs once per code, side by side")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="steps of the unmeasured first block (at least --block); 55 measures the defaults "
                             "after their 50 dense first steps")
    parser.add_argument("--processes", type=int, default=1,
                        help="fresh sets of worker processes, one after the other; medians over them")
    parser.add_argument("--randomize-layout", nargs="?", const="layouts", default=None, metavar="SEED",
                        help="give every process a random memory layout (see bench()); another SEED draws "
                             "other layouts, so that a second run adds new ones")
    parser.add_argument("--alternate", action="store_true",
                        help="plain and watched blocks in the same process (bench_alternating()); modes: the watched "
                             "ones, with an A/A control")
    parser.add_argument("--json", help="write every process's numbers to this file (the model's name is added)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads and OPENBLAS_NUM_THREADS (0: their defaults)")
    parser.add_argument("--worker", choices=sorted(SETUPS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--logdir", help=argparse.SUPPRESS)
    parser.add_argument("--wandb-python", default=WANDB_VENV_PYTHON,
                        help="the Python of a venv with wandb, for the W&B modes (default: %(default)s)")
    parser.add_argument("--self-cpu", action="store_true",
                        help="self-measure the training thread's CPU time inside trainscope (default: wall time)")
    args = parser.parse_args()
    global WANDB_PYTHON
    WANDB_PYTHON = args.wandb_python
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return worker(args.worker, args.mode, args.logdir, args.self_cpu, args.alternate)
    blas = "?"
    try:
        with open("/proc/self/maps") as maps:
            blas = "OpenBLAS" if "openblas" in maps.read().lower() else "not OpenBLAS"
    except OSError:
        pass
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, BLAS loaded: {blas}; "
          f"load average {open('/proc/loadavg').read().split()[:3]}")
    codes = dict(item.split("=", 1) for item in args.code)
    modes = args.modes.split(",")
    if modes[0] != "plain":
        parser.error("--modes: plain first")
    if codes:  # every watched mode once per code
        modes = [m2 for m in modes for m2 in ([f"{m}@{c}" for c in codes] if m in TRAINSCOPE_MODES else [m])]
    if args.alternate:
        for name, label in (("lm", LM_LABEL), ("cnn", CNN_LABEL)):
            if args.only in (None, name):
                bench_alternating(label, name, args.rounds, args.block, modes, args.threads, args.self_cpu,
                                  args.processes, codes, args.warmup_steps, args.json and f"{args.json}.{name}.json",
                                  args.randomize_layout)
        return
    if args.only in (None, "lm"):
        bench(LM_LABEL, "lm", args.rounds, args.block, modes, args.threads,
              args.self_cpu, args.processes, codes, args.warmup_steps, args.json and f"{args.json}.lm.json",
              args.randomize_layout)
    if args.only in (None, "cnn"):
        bench(CNN_LABEL, "cnn", args.rounds, args.block, modes, args.threads,
              args.self_cpu, args.processes, codes, args.warmup_steps, args.json and f"{args.json}.cnn.json",
              args.randomize_layout)


if __name__ == "__main__":
    sys.exit(main())
