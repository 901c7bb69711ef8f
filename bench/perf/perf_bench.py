"""The perf part's numbers on this machine, for docs/benchmarks.md:

    PYTHONPATH=build/python /usr/bin/python3 bench/perf/perf_bench.py [--out DIR]

1. MFU of a real CPU training (an MLP, float32, 1 thread) against this CPU's computed peak
   and the measured GEMM peak (`trainscope perf run`).
2. Data-parallel scaling on gloo: tests/python/ddp_train.py under torchrun on 1, 2 and 4
   processes, `trainscope perf scaling` of each against 1; a 2-rank run with rank 1 slowed
   on purpose (`trainscope diagnose` names the STRAGGLER, `perf scaling` POOR_SCALING).
3. `trainscope perf collectives` on 2 and 4 processes.
Prints the JSON of each step and a Markdown summary at the end.
"""

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("TRAINSCOPE_CLI", str(REPO / "build" / "trainscope"))
DDP_TRAIN = REPO / "tests" / "python" / "ddp_train.py"

MLP = """
import sys, torch, trainscope as ts
torch.set_num_threads(1)
torch.manual_seed(0)
batch, steps, width = 256, int(sys.argv[3]), 1024
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                            torch.nn.ReLU(), torch.nn.Linear(width, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
run = ts.init(logdir=sys.argv[1], name=sys.argv[2], config={"batch_size": batch})
run.watch(model, optimizer)
x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
measured = ts.perf.measure_peak(threads=1)
ts.perf.record(run, ts.count_flops(model, x), samples_per_step=batch, precision="fp32", measured_peak_flops=measured)
for xb, yb in run.data([(x, y)] * steps):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    optimizer.step()
run.finish()
"""


def cli(*args):
    out = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=600)
    if out.returncode not in (0, 1):  # diagnose: 1 = findings at --fail-on
        raise SystemExit(f"trainscope {' '.join(map(str, args))} failed:\n{out.stderr}")
    return out.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc, logdir, name, *args, steps=80):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), "--redirects", "2", "--tee", "2", str(DDP_TRAIN),
               "--logdir", str(logdir), "--name", name, "--steps", str(steps), *map(str, args)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"torchrun failed:\n{out.stderr[-3000:]}")
    return pathlib.Path(logdir) / name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=4096, help="per rank (weak scaling)")
    args = parser.parse_args()
    logdir = pathlib.Path(args.out or tempfile.mkdtemp(prefix="perf-bench-"))
    logdir.mkdir(parents=True, exist_ok=True)
    report = {}

    script = logdir / "mlp.py"
    script.write_text(MLP)
    subprocess.run([sys.executable, str(script), str(logdir), "mlp", str(args.steps)], check=True,
                   capture_output=True, text=True)
    report["mlp"] = json.loads(cli("perf", "run", logdir / "mlp", "--json"))
    report["peak"] = json.loads(cli("perf", "peak", "--json", "--threads", "1"))["cpu"]
    print(json.dumps({k: report["mlp"][k] for k in ("step_seconds", "samples_per_second", "flops_per_second",
                                                     "peak_flops", "mfu", "measured_peak_flops",
                                                     "mfu_of_measured_peak")}, indent=1), flush=True)

    runs = {n: torchrun(n, logdir, f"ddp{n}", "--batch", args.batch, steps=args.steps) for n in (1, 2, 4)}
    runs["slow"] = torchrun(2, logdir, "ddp2-slow", "--batch", args.batch, "--slow-rank", "1", "--slow-seconds", "0.05",
                            steps=args.steps)
    report["scaling"] = {}
    for key in (2, 4, "slow"):
        report["scaling"][str(key)] = json.loads(cli("perf", "scaling", runs[1], runs[key], "--json"))
        s = report["scaling"][str(key)]
        print(f"scaling {key}: {s['throughput_1']:.0f} -> {s['throughput_n']:.0f} samples/s, "
              f"efficiency {s['efficiency']:.3f}, findings {[f['code'] for f in s['findings']]}", flush=True)
    diagnosis = json.loads(cli("diagnose", runs["slow"], "--json"))
    report["straggler"] = [f for f in diagnosis["findings"] if f["code"] == "STRAGGLER"]
    print("STRAGGLER:", [(f["rank"], f["summary"]) for f in report["straggler"]], flush=True)

    report["collectives"] = {}
    for n in (2, 4):
        report["collectives"][str(n)] = json.loads(cli("perf", "collectives", "--nproc", n, "--json",
                                                       "--sizes", "4096,65536,1048576,4194304"))
    (logdir / "perf_bench.json").write_text(json.dumps(report, indent=1))

    mlp, peak = report["mlp"], report["peak"]
    print("\n## Markdown\n")
    print(f"| MLP 1024-wide, batch 256, fp32, 1 thread | step {mlp['step_seconds'] * 1e3:.1f} ms | "
          f"{mlp['flops_per_second'] / 1e9:.1f} GFLOP/s | MFU {100 * mlp['mfu']:.1f} % of computed "
          f"{mlp['peak_flops'] / 1e9:.1f} GFLOP/s | {100 * mlp['mfu_of_measured_peak']:.1f} % of measured "
          f"{mlp['measured_peak_flops'] / 1e9:.1f} GFLOP/s |")
    for key, s in report["scaling"].items():
        ranks = ", ".join(f"rank {r['rank']} {r['median_step_seconds'] * 1e3:.1f} ms" for r in s["run_n"]["ranks"])
        print(f"| {key} | {s['throughput_1']:.0f} | {s['throughput_n']:.0f} | {100 * s['efficiency']:.1f} % | "
              f"{ranks} | {', '.join(f['code'] for f in s['findings']) or '-'} |")
    for n, c in report["collectives"].items():
        for r in c["results"]:
            if r["supported"]:
                print(f"| {n} | {r['op']} | {r['bytes']} | {r['seconds'] * 1e6:.0f} | {r['algbw_gbps']:.3f} | "
                      f"{r['busbw_gbps']:.3f} |")
            else:
                print(f"| {n} | {r['op']} | - | not supported: {r['error']} | | |")
    print(f"\nrun files: {logdir}")


if __name__ == "__main__":
    main()
