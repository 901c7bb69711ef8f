"""trainscope's own time on the training thread per step: the deterministic measure of
run.watch()'s fixed cost, beside the wall-clock ratios of overhead.py.

Per step, the wall time the training thread spends inside trainscope's entry points:
its hooks and wrappers (time/watch, which the watcher records itself: outermost calls,
the optimizer's own step excluded), plus run.log() and run.data()'s next() as the loop
calls them. next() is counted inside time/watch (the loop enters the run's own-time
counter around it), so the hooks it calls (the batch's label range) count once; run.log()
is timed here around the call. What torch spends dispatching to the hooks is not in it;
overhead.py's wall-clock ratios see that.

Each model and mode trains in a fresh process: warm-up steps, then --steps measured steps;
reported: median and p99 of the per-step own time, its parts' medians (watch: time/watch
with next() in it; log; data: next() as the loop sees it, already in watch), and the plain
step time of an unwatched process of the same model for scale.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 bench/watch/own_time.py
    ... own_time.py --models mlp --modes defaults --steps 1000 --code before=/old/python --code now=build/python
    ... own_time.py --cpu-clock ...   # CPU time of the training thread: a host other work loads
    ... own_time.py --models mlp --modes defaults,defaults/inputs=False   # a feature's price
"""

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EVERYTHING = dict(every=1, histograms_every=1, activations_every=1, weights_every=1, units_every=1)


def mlp_setup():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(8)]
    return model, opt, batches, torch.nn.functional.cross_entropy


def setups():
    sys.path.insert(0, HERE)
    from overhead import cnn_setup, lm_setup
    return {"mlp": mlp_setup, "cnn": cnn_setup, "lm": lm_setup}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def worker(model_name, mode, warmup, steps, cpu_clock=False):
    """One model and mode in this process; prints one JSON line. cpu_clock: every time in it
    is the training thread's CPU time (time/watch too), which other processes on the host do
    not inflate by preempting it (they still share its caches)."""
    import torch
    torch.set_num_threads(1)
    import trainscope as ts
    if cpu_clock:
        import trainscope._watch.hooks as clock_owner
        clock_owner.self_clock = time.thread_time  # read when the run's step clock is made
    model, opt, batches, loss_fn = setups()[model_name]()
    total = warmup + steps
    loader = (batches * (total // len(batches) + 1))[:total]
    run = None
    if mode != "plain":
        run = ts.init(tempfile.mkdtemp(prefix="own_time-"), name=mode.replace("/", "-"))
        base, *overrides = mode.split("/")
        options = dict(EVERYTHING if base == "everything" else {})
        for item in overrides:  # defaults/inputs=False: one feature off, to price it
            key, value = item.split("=")
            options[key] = ast.literal_eval(value)
        run.watch(model, opt, **options)
    source = iter(run.data(loader) if run is not None else loader)
    # next() as one outermost entry point of the run's own-time counter (time/watch): the
    # hooks it calls are inside it and are not counted a second time.
    own_counter = run._step_clock().core if run is not None else None
    step_wall, log_wall, data_wall = [], [], []
    clock = time.thread_time if cpu_clock else time.perf_counter
    for _ in range(total):
        started = clock()
        if own_counter is not None:
            own_counter.enter()
            try:
                x, y = next(source)
            finally:
                own_counter.leave()
        else:
            x, y = next(source)
        fetched = clock()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        logging = clock()
        if run is not None:
            run.log({"train/loss": loss})
        else:
            loss.item()  # what run.log's host tensor read costs the plain loop too
        ended = clock()
        step_wall.append(ended - started)
        data_wall.append(fetched - started)
        log_wall.append(ended - logging)
    result = {"model": model_name, "mode": mode, "step_median_us": 1e6 * statistics.median(step_wall[warmup:])}
    if run is not None:
        run.finish()
        watch = ts.open_run(run.dir).scalars("time/watch")
        hooks = dict(zip(watch["step"].tolist(), watch["value"].tolist()))
        # The loop's iteration i is the run's step i (run.data() begins each step); its
        # next() is in time/watch.
        own, hook_part = [], []
        for i in range(warmup, total):
            inside = hooks.get(i, 0.0)
            hook_part.append(inside)
            own.append(inside + log_wall[i])
        result.update({
            "own_median_us": 1e6 * statistics.median(own), "own_p99_us": 1e6 * percentile(own, 0.99),
            "own_mean_us": 1e6 * statistics.fmean(own),
            "watch_median_us": 1e6 * statistics.median(hook_part),
            "log_median_us": 1e6 * statistics.median(log_wall[warmup:]),
            "data_median_us": 1e6 * statistics.median(data_wall[warmup:]),
        })
    print(json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,cnn,lm")
    parser.add_argument("--modes", default="plain,defaults,everything")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--code", action="append", default=[], metavar="NAME=PYTHONPATH",
                        help="measure each trainscope version (default: the one on PYTHONPATH)")
    parser.add_argument("--json", help="write the results to this file too")
    parser.add_argument("--cpu-clock", action="store_true",
                        help="the training thread's CPU time instead of wall time (a host shared with other work)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        model, mode, warmup, steps, cpu_clock = args.worker
        worker(model, mode, int(warmup), int(steps), cpu_clock == "cpu")
        return
    codes = [c.split("=", 1) for c in args.code] or [("current", os.environ.get("PYTHONPATH", ""))]
    results = []
    print(f"{'model':5} {'mode':10} {'code':8} {'step us':>8} {'own med':>8} {'own p99':>8} {'own mean':>8} "
          f"{'watch':>7} {'log':>6} {'data':>6}")
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for name, path in (codes if mode != "plain" else codes[:1]):
                env = dict(os.environ, PYTHONPATH=path, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
                out = subprocess.run([sys.executable, __file__, "--worker", model, mode, str(args.warmup),
                                      str(args.steps), "cpu" if args.cpu_clock else "wall"], env=env,
                                     capture_output=True, text=True, check=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                r["code"] = name if mode != "plain" else "-"
                results.append(r)
                if mode == "plain":
                    print(f"{model:5} {mode:10} {'-':8} {r['step_median_us']:8.0f}", flush=True)
                else:
                    print(f"{model:5} {mode:10} {name:8} {r['step_median_us']:8.0f} {r['own_median_us']:8.1f} "
                          f"{r['own_p99_us']:8.1f} {r['own_mean_us']:8.1f} {r['watch_median_us']:7.1f} "
                          f"{r['log_median_us']:6.1f} {r['data_median_us']:6.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
