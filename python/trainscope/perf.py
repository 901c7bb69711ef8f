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
import os
import socket
import sys
import time

import torch

__all__ = ["record", "measure_peak", "collectives", "precision_name", "COLLECTIVES"]


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
    meta = {"perf/precision": str(precision), "perf/device": device_name or _device_name(device),
            "perf/threads": str(torch.get_num_threads())}
    for key, value in (("perf/flops_per_step", flops_per_step), ("perf/samples_per_step", samples_per_step),
                       ("perf/tokens_per_step", tokens_per_step), ("perf/peak_flops", peak_flops),
                       ("perf/measured_peak_flops", measured_peak_flops)):
        if value is not None:
            value = float(value)
            if not value >= 0:
                raise ValueError(f"ts.perf.record: {key.split('/')[1]} must be a non-negative number, got {value!r}")
            meta[key] = repr(value)
    for key, value in meta.items():
        run._recorder.set_meta(key, value)
    return meta


def measure_peak(dtype=torch.float32, size=None, seconds=1.0, device="cpu", threads=None):
    """The best FLOP/s of square matrix products (size x size, through torch.mm) on one device.

    A GEMM is the fastest thing a training does, so this is the peak a training can hope to
    approach here, below the computed one (clock and vector units) by what the BLAS and the
    memory system lose. Takes about `seconds` after a warm-up; the best of the timed rounds
    (another process on a shared machine only ever makes a round slower)."""
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
