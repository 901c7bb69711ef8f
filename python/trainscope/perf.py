"""Performance helpers: what a run records for MFU and throughput, a measured GEMM peak, and
collective timings through torch.distributed.

    flops = ts.count_flops(model, example_batch)
    ts.perf.record(run, flops, samples_per_step=batch, precision="bf16")   # once, after ts.init
    ts.perf.measure_peak()             # {"flops": ..., "dtype": "float32", "size": 2048, ...}

`trainscope perf run RUN` then gives throughput and MFU per step; `trainscope perf peak` the
peak table and this machine's CPU; `trainscope perf collectives` runs collectives() below on
N local processes. docs/perf.md has the conventions.

Run as a module (the CLI does): python -m trainscope.perf measure-peak|collectives --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time

import torch

from trainscope._tags import family_tag

__all__ = ["record", "measure_peak", "collectives", "precision_name", "COLLECTIVES", "ModuleTimer",
           "profile_modules", "watch_modules"]


def precision_name(dtype):
    """torch.bfloat16 -> "bf16", torch.float32 -> "fp32" (or "tf32" when TF32 matmuls are on
    and the device is CUDA), torch.float16 -> "fp16"."""
    names = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    for attr in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = "fp8"
    if dtype not in names:
        raise ValueError(f"precision_name: no peak-table precision for {dtype} (fp64, fp32, tf32, fp16, bf16, fp8)")
    return names[dtype]


def _device_name(device):
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def record(run, flops_per_step=None, *, samples_per_step=None, tokens_per_step=None, precision="fp32",
           device=None, device_name=None, peak_flops=None, measured_peak_flops=None):
    """Records in the run's meta what `trainscope perf run` needs for MFU and throughput.

    flops_per_step: model FLOPs of one training step on this rank: a number, or a FlopCount of
    one step's batch (its training_flops: forward + backward). samples_per_step, tokens_per_step:
    what this rank processes per step. precision: the precision the matrix products run in
    (fp32, tf32, bf16, fp16, fp8, fp64; a torch dtype is fine). device: a torch device (default:
    the current CUDA device when there is one, else the CPU); its name finds the peak table's
    row. device_name: the name to look up instead (e.g. the GPU the run's numbers are for).
    peak_flops: a peak to use instead of the table's (FLOP/s per device). measured_peak_flops:
    measure_peak()'s result (or its "flops"), shown beside the MFU."""
    if flops_per_step is not None and hasattr(flops_per_step, "training_flops"):
        flops_per_step = flops_per_step.training_flops
    if isinstance(precision, torch.dtype):
        precision = precision_name(precision)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(measured_peak_flops, dict):
        measured_peak_flops = measured_peak_flops["flops"]
    meta = {family_tag("perf", "precision"): str(precision),
            family_tag("perf", "device"): device_name or _device_name(device),
            family_tag("perf", "threads"): str(torch.get_num_threads())}
    for name, value in (("flops_per_step", flops_per_step), ("samples_per_step", samples_per_step),
                        ("tokens_per_step", tokens_per_step), ("peak_flops", peak_flops),
                        ("measured_peak_flops", measured_peak_flops)):
        if value is not None:
            value = float(value)
            if not value >= 0:
                raise ValueError(f"ts.perf.record: {name} must be a non-negative number, got {value!r}")
            meta[family_tag("perf", name)] = repr(value)
    for key, value in meta.items():
        run._recorder.set_meta(key, value)
    return meta


def measure_peak(dtype=torch.float32, size=None, seconds=1.0, device="cpu", threads=None):
    """The best FLOP/s of square matrix products (size x size, through torch.mm) on one device.

    A GEMM is the fastest thing a training does, so this is the peak a training can hope to
    approach here, below the computed one (clock and vector units) by what the BLAS and the
    memory system lose. Takes about `seconds` after a warm-up; the best of the timed rounds
    (another process on a shared machine only ever makes a round slower).

    `threads` sets torch's pool; a BLAS with a pool of its own (OpenBLAS) sizes it from
    OPENBLAS_NUM_THREADS / OMP_NUM_THREADS when it loads, so set those before importing
    torch (`trainscope perf peak --threads N` does)."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = torch.device(device)
    if size is None:
        size = 4096 if dev.type == "cuda" else 1024
    a = torch.randn(size, size, device=dev).to(dtype)
    b = torch.randn(size, size, device=dev).to(dtype)
    out = torch.empty(size, size, device=dev, dtype=dtype)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(2):  # warm-up: BLAS threads, caches
        torch.mm(a, b, out=out)
    sync()
    flops_per_mm = 2.0 * size ** 3
    best, rounds, total_start = 0.0, 0, time.perf_counter()
    repeat = 1
    while True:
        start = time.perf_counter()
        for _ in range(repeat):
            torch.mm(a, b, out=out)
        sync()
        elapsed = time.perf_counter() - start
        if elapsed < 0.05:  # rounds long enough for the clock
            repeat *= 2
            continue
        best = max(best, repeat * flops_per_mm / elapsed)
        rounds += 1
        if time.perf_counter() - total_start >= seconds and rounds >= 3:
            break
    return {"flops": best, "dtype": str(dtype).replace("torch.", ""), "size": size, "rounds": rounds,
            "threads": torch.get_num_threads(), "device": _device_name(dev), "torch": torch.__version__,
            "method": f"best of {rounds} rounds of {repeat} torch.mm({size}x{size}) x ({size}x{size}), 2*n^3 FLOPs each"}


# The collectives and the tensor each rank sends for a message of S bytes, as nccl-tests
# sizes them: S is the all-reduce/broadcast buffer, the all-gather's whole output, the
# reduce-scatter's whole input, the all-to-all's whole buffer per rank.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def _collective_calls(dist, name, numel, world, dtype):
    """The ways to run a collective, fastest first: the tensor forms, then the list forms
    (torch 1.13's gloo has no _allgather_base, for one)."""
    if name == "all_reduce":
        t = torch.ones(numel, dtype=dtype)
        return [lambda: dist.all_reduce(t)]
    if name == "broadcast":
        t = torch.ones(numel, dtype=dtype)
        return [lambda: dist.broadcast(t, src=0)]
    chunk = max(1, numel // world)
    calls = []
    if name == "all_gather":
        mine = torch.ones(chunk, dtype=dtype)
        if hasattr(dist, "all_gather_into_tensor"):
            out = torch.empty(chunk * world, dtype=dtype)
            calls.append(lambda: dist.all_gather_into_tensor(out, mine))
        outs = [torch.empty(chunk, dtype=dtype) for _ in range(world)]
        calls.append(lambda: dist.all_gather(outs, mine))
        return calls
    if name == "reduce_scatter":
        out = torch.empty(chunk, dtype=dtype)
        if hasattr(dist, "reduce_scatter_tensor"):
            full = torch.ones(chunk * world, dtype=dtype)
            calls.append(lambda: dist.reduce_scatter_tensor(out, full))
        ins = [torch.ones(chunk, dtype=dtype) for _ in range(world)]
        calls.append(lambda: dist.reduce_scatter(out, ins))
        return calls
    if name == "all_to_all":
        send = torch.ones(chunk * world, dtype=dtype)
        recv = torch.empty(chunk * world, dtype=dtype)
        return [lambda: dist.all_to_all_single(recv, send)]
    raise ValueError(f"unknown collective {name!r} (one of {', '.join(COLLECTIVES)})")


def collectives(sizes=None, ops=COLLECTIVES, min_seconds=0.2, max_iters=200, dtype=torch.float32):
    """Times each collective over the sizes (bytes) in the current process group; every rank
    calls it. Returns, on every rank, [{op, bytes, seconds, iters, supported, error}]: seconds
    per call, the slowest rank's mean (a collective ends when its last rank does). algbw and
    busbw are computed from these by the CLI (src/perf/perf_metrics.h, nccl-tests' factors)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    element = torch.tensor([], dtype=dtype).element_size()
    sizes = sizes or [1 << k for k in range(12, 23, 2)]  # 4 KB .. 4 MB
    results = []
    for name in ops:
        for size in sizes:
            numel = max(world, size // element)
            entry = {"op": name, "bytes": (numel // world) * world * element if name in ("all_gather",
                     "reduce_scatter", "all_to_all") else numel * element, "ranks": world}
            try:
                call, errors = None, []
                for candidate in _collective_calls(dist, name, numel, world, dtype):
                    try:
                        candidate()  # warm-up; an unsupported form raises here, on every rank alike
                        call = candidate
                        break
                    except (RuntimeError, NotImplementedError) as error:
                        errors.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
                if call is None:
                    raise RuntimeError("; ".join(errors))
                dist.barrier()
                # iterations: as many as fit in min_seconds, agreed by all ranks (the max)
                start = time.perf_counter()
                call()
                once = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
                dist.all_reduce(once, op=dist.ReduceOp.MAX)
                iters = int(max(1, min(max_iters, min_seconds / max(once.item(), 1e-6))))
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    call()
                elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                entry.update({"seconds": elapsed.item(), "iters": iters, "supported": True})
            except (RuntimeError, ValueError, NotImplementedError, AttributeError) as error:
                entry.update({"supported": False, "error": str(error).splitlines()[0]})
                results.append(entry)
                break  # the other sizes fail the same way
            results.append(entry)
    return results


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collectives_worker(rank, world, port, backend, sizes, ops, queue):
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        results = collectives(sizes, ops)
        if rank == 0:
            queue.put(results)
    finally:
        dist.destroy_process_group()


def run_collectives(nproc=2, backend=None, sizes=None, ops=COLLECTIVES):
    """collectives() on nproc local processes (torch.multiprocessing, loopback). Backend: nccl
    when there are nproc CUDA devices, else gloo."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if backend is None:
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc and \
            dist.is_nccl_available() else "gloo"
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    port = _free_port()
    processes = [context.Process(target=_collectives_worker, args=(r, nproc, port, backend, sizes, ops, queue))
                 for r in range(nproc)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    if failed or queue.empty():
        raise RuntimeError(f"collectives on {nproc} {backend} processes failed (exit codes {failed})")
    return {"backend": backend, "ranks": nproc, "torch": torch.__version__, "results": queue.get()}


# --- time per module and PERF_HOTSPOT ------------------------------------------------------

class ModuleTimer:
    """Forward and backward wall time of each leaf module (a module without children), from
    hooks, on CPU (where autograd runs the backward on the calling thread).

    forward: a pre-hook and a post-hook around the module's forward. backward: from the moment
    the gradient of the module's output arrives (a hook on the output tensor) to the last of
    the gradients of its inputs and parameters (hooks on those tensors). An in-place module
    (ReLU(inplace=True)) shares its input and output tensor: its backward reads as ~0.
    Times are summed over calls until reset(); no tensor is synchronised."""

    def __init__(self, model):
        self.model = model
        self.leaves = {name: module for name, module in model.named_modules() if not list(module.children())}
        self.handles = []
        self.reset()

    def reset(self):
        self.forward = {name: 0.0 for name in self.leaves}
        self.backward = {name: 0.0 for name in self.leaves}
        self.calls = {name: 0 for name in self.leaves}
        self.non_contiguous = set()
        self._started = {}
        self._pending = {}  # name -> [backward start, latest end]

    def attach(self):
        devices = {p.device.type for p in self.model.parameters()}
        if devices - {"cpu"}:
            # Host clocks around asynchronous kernels measure their launch, not their run:
            # numbers that look right and are not. Per-kernel device time: trainscope trace.
            raise RuntimeError(f"ModuleTimer times modules on the CPU; this model has parameters on "
                               f"{sorted(devices - {'cpu'})}: profile a few steps with torch.profiler and read the "
                               f"trace with `trainscope trace`")
        # Hooks that pickle as inert (torch.save(model) of a timed model works) and that are
        # on the parameters once: a hook registered on a parameter in each forward stays on it.
        from trainscope._watch.hooks import Hook
        for name, module in self.leaves.items():
            self.handles.append(module.register_forward_pre_hook(Hook(self._pre(name))))
            self.handles.append(module.register_forward_hook(Hook(self._post(name))))
            for p in module.parameters(recurse=False):
                if p.requires_grad:
                    self.handles.append(p.register_hook(Hook(self._backward_end(name))))
        return self

    def detach(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __enter__(self):
        return self.attach()

    def __exit__(self, *exc):
        self.detach()

    def _pre(self, name):
        def hook(module, inputs):
            for x in inputs:
                if isinstance(x, torch.Tensor) and x.dim() > 1 and not x.is_contiguous():
                    self.non_contiguous.add(name)
            self._started.setdefault(name, []).append(time.perf_counter())
        return hook

    def _post(self, name):
        def hook(module, inputs, output):
            self.forward[name] += time.perf_counter() - self._started[name].pop()
            self.calls[name] += 1
            if not torch.is_grad_enabled():
                return
            out = output if isinstance(output, torch.Tensor) else None
            if out is None or not out.requires_grad:
                return
            # Inputs made in this forward (not leaves): their hooks go with the graph.
            ends = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad and x is not out
                    and x.grad_fn is not None]
            has_params = any(p.requires_grad for p in module.parameters(recurse=False))
            if not ends and not has_params:
                return
            out.register_hook(self._backward_start(name))
            for tensor in ends:
                tensor.register_hook(self._backward_end(name))
        return hook

    def _backward_start(self, name):
        def hook(grad):
            self._pending[name] = [time.perf_counter(), None]
        return hook

    def _backward_end(self, name):
        def hook(grad):
            pending = self._pending.get(name)
            if pending is not None:
                now = time.perf_counter()
                if pending[1] is not None:
                    self.backward[name] -= pending[1] - pending[0]
                pending[1] = now
                self.backward[name] += now - pending[0]
        return hook

    def log(self, run, step, flops=None):
        """Logs perf/module/<name>/forward_s, .../backward_s and, with a FlopCount of one call,
        .../flops_per_second for this step, then resets."""
        items = {}
        for name in self.leaves:
            if not self.calls[name]:
                continue
            items[family_tag("perf", f"module/{name}/forward_s")] = self.forward[name]
            items[family_tag("perf", f"module/{name}/backward_s")] = self.backward[name]
            if flops is not None:
                seconds = self.forward[name] + self.backward[name]
                entry = _module_entry(flops, name)
                if entry is not None and seconds > 0:
                    items[family_tag("perf", f"module/{name}/flops_per_second")] = entry["training_flops"] * self.calls[name] / seconds
        run.log(items, step=step)
        self.reset()


def watch_modules(run, model, flops=None):
    """Times every leaf module of model each step and logs perf/module/<name>/forward_s,
    backward_s (and flops_per_second with a FlopCount of one forward) at the step they belong
    to. The step is the run's: when the model's forward starts in a new step, the previous
    step's times are logged. The seam for run.watch(..., perf=True): watch.py needs one line,
    `if perf: trainscope.perf.watch_modules(self, model)`. Returns the ModuleTimer (detach()
    stops it; flush() logs the last step)."""
    timer = ModuleTimer(model).attach()
    timer.run, timer.flops, timer.step = run, flops, None

    def on_forward(module, inputs):
        step = run._step
        if timer.step is not None and step != timer.step:
            timer.log(run, timer.step, timer.flops)
        timer.step = step

    def flush():
        if timer.step is not None and any(timer.calls.values()):
            timer.log(run, timer.step, timer.flops)

    from trainscope._watch.hooks import Hook
    timer.handles.append(model.register_forward_pre_hook(Hook(on_forward)))
    timer.flush = flush
    return timer


def _module_entry(flops, name):
    try:
        return flops.module(name)
    except KeyError:
        return None


# PERF_HOTSPOT: a module whose share of the step's module time is >= 10 % and at least twice
# its share of the model's FLOPs (it runs at half the model's FLOP/s or less).
HOTSPOT_MIN_TIME_SHARE = 0.10
HOTSPOT_TIME_OVER_FLOPS = 2.0


def _shape_hints(module, entry, name, non_contiguous):
    hints = []
    dims = []
    if isinstance(module, torch.nn.Linear):
        dims = [module.in_features, module.out_features]
    elif isinstance(module, torch.nn.modules.conv._ConvNd):
        depthwise = module.groups > 1 and module.groups == module.in_channels
        dims = [module.in_channels, module.out_channels] if depthwise else \
            [module.in_channels // module.groups, module.out_channels]
        if depthwise:
            hints.append(("memory_bound", "depthwise convolution (one input channel per filter): little arithmetic "
                                          "per byte read, memory-bound on CPUs and GPUs alike; try channels_last "
                                          "memory format or a fused depthwise-separable kernel"))
    odd = [d for d in dims if d % 8]
    if odd:
        hints.append(("odd_shape", f"dimension(s) {odd} not a multiple of 8: tensor cores and vector units work "
                                   f"in tiles of 8 (64 is better); pad them"))
    if entry["macs"] and entry["calls"] and entry["macs"] / entry["calls"] < (1 << 20):
        hints.append(("small_matmul", f"small matrix product ({entry['macs'] / entry['calls']:.3g} MACs per call): "
                                      f"fixed costs dominate; batch several, fuse, or grow the batch"))
    if not entry["macs"] and not any(h[0] == "memory_bound" for h in hints):
        hints.append(("memory_bound", "no matrix product: the op moves memory more than it computes; fuse it "
                                      "with its neighbours (torch.compile), run it in place, or drop it"))
    if name in non_contiguous:
        hints.append(("non_contiguous_input", "its input is not contiguous: a copy happens inside; make the "
                                              "producer's output contiguous (or permute once, earlier)"))
    return hints


def profile_modules(model, example_inputs, loss_fn=None, steps=5, warmup=2):
    """Times each leaf module's forward and backward over `steps` forward+backward passes on
    example_inputs (after `warmup`), with its FLOPs from count_flops, and ranks the modules
    that waste time. loss_fn(output) -> scalar (default: output.float().sum()). Returns
    {"modules": [...], "findings": [PERF_HOTSPOT dicts, DESIGN.md's finding shape]}; the
    model's gradients are left as the passes made them (zero them before training)."""
    from trainscope.flops import count_flops

    args = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    loss_fn = loss_fn or (lambda out: (out if isinstance(out, torch.Tensor) else out[0]).float().sum())
    flops = count_flops(model, tuple(args))
    timer = ModuleTimer(model)
    with timer:
        for i in range(warmup + steps):
            if i == warmup:
                timer.reset()
            loss_fn(model(*args)).backward()
    rows = []
    for name, module in timer.leaves.items():
        entry = _module_entry(flops, name)
        if entry is None or not timer.calls[name]:
            continue
        seconds = (timer.forward[name] + timer.backward[name]) / steps
        rows.append({"name": name, "type": type(module).__name__, "forward_s": timer.forward[name] / steps,
                     "backward_s": timer.backward[name] / steps, "seconds": seconds,
                     "training_flops": entry["training_flops"], "macs": entry["macs"],
                     "flops_per_second": entry["training_flops"] / seconds if seconds > 0 else math.nan,
                     "calls": entry["calls"], "non_contiguous_input": name in timer.non_contiguous})
    total_s = sum(r["seconds"] for r in rows) or math.nan
    total_f = sum(r["training_flops"] for r in rows) or math.nan
    for r in rows:
        r["time_share"] = r["seconds"] / total_s
        r["flops_share"] = r["training_flops"] / total_f
    rows.sort(key=lambda r: -r["seconds"])
    findings = []
    for r in rows:
        if r["time_share"] < HOTSPOT_MIN_TIME_SHARE or r["time_share"] < HOTSPOT_TIME_OVER_FLOPS * r["flops_share"]:
            continue
        module = timer.leaves[r["name"]]
        hints = _shape_hints(module, {**flops.module(r["name"]), "calls": flops.module(r["name"])["calls"]},
                             r["name"], timer.non_contiguous)
        rate = r["flops_per_second"]
        findings.append({
            "code": "PERF_HOTSPOT", "severity": "info", "step": 0, "last_step": 0, "location": r["name"],
            "summary": (f"{r['name']} ({r['type']}) takes {100 * r['time_share']:.1f} % of the modules' time for "
                        f"{100 * r['flops_share']:.1f} % of the FLOPs ({rate / 1e9:.3g} GFLOP/s against the model's "
                        f"{total_f / total_s / 1e9:.3g})" + (f": {hints[0][1]}" if hints else "")),
            "evidence": {"time_share": r["time_share"], "flops_share": r["flops_share"], "seconds": r["seconds"],
                         "flops_per_second": rate, "model_flops_per_second": total_f / total_s,
                         "hints": [h[0] for h in hints]},
            "causes": [{"id": h[0], "confidence": 0.5} for h in hints],
            "actions": [h[1] for h in hints] or ["Profile the module (trainscope trace) to see its kernels"]})
    findings.sort(key=lambda f: -(f["evidence"]["time_share"] - f["evidence"]["flops_share"]))
    return {"modules": rows, "findings": findings, "steps": steps}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m trainscope.perf")
    sub = parser.add_subparsers(dest="command", required=True)
    peak = sub.add_parser("measure-peak", help="GEMM micro-benchmark through torch")
    peak.add_argument("--dtype", default="float32")
    peak.add_argument("--size", type=int, default=None)
    peak.add_argument("--seconds", type=float, default=1.0)
    peak.add_argument("--threads", type=int, default=None)
    peak.add_argument("--device", default="cpu")
    coll = sub.add_parser("collectives", help="collectives over a size sweep on N local processes")
    coll.add_argument("--nproc", type=int, default=2)
    coll.add_argument("--backend", default=None)
    coll.add_argument("--sizes", default=None, help="bytes, comma-separated")
    coll.add_argument("--ops", default=",".join(COLLECTIVES))
    args = parser.parse_args(argv)
    if args.command == "measure-peak":
        dtype = getattr(torch, args.dtype, None)
        if not isinstance(dtype, torch.dtype):
            parser.error(f"--dtype {args.dtype}: not a torch dtype")
        result = measure_peak(dtype, args.size, args.seconds, args.device, args.threads)
    else:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
        result = run_collectives(args.nproc, args.backend, sizes, tuple(args.ops.split(",")))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
