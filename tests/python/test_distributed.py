"""Distributed data parallel for real: torchrun, gloo, 2 and 4 processes on this machine.

Each rank records into <logdir>/<run>/rank-<r>/ (python/trainscope/distributed.py);
`trainscope runs` and `trainscope diagnose RUN_DIR` show the ranks together, and a rank whose
loss or gradient norm leaves the others' is named by RANK_DIVERGENCE (src/doctor/ranks.h).
The training is tests/python/ddp_train.py: a small MLP on generated data, one shard per rank.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

import trainscope as ts
from conftest import child_env, run_cli

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

TRAIN = pathlib.Path(__file__).with_name("ddp_train.py")
STEPS = 80


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_command(nproc, logdir, name, *args):
    # --redirects 2 --tee 2 (stderr into torchrun's log files, and to the console): torch
    # 1.13's launcher fails under Python 3.11 with the default "0" (its Std flag parsing
    # returns None for 0), Debian's python3-torch among them. Loopback only.
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "--redirects", "2", "--tee", "2",
            str(TRAIN), "--logdir", str(logdir), "--name", name, "--steps", str(STEPS), *map(str, args)]


def _env():
    env = child_env()
    env["OMP_NUM_THREADS"] = "1"  # 2 to 4 ranks share 2 cores with other tests
    return env


def torchrun(nproc, logdir, name, *args):
    """Runs the training under torchrun; returns the run directory (holding rank-*/)."""
    for attempt in range(2):  # the free port may be taken between the probe and torchrun
        result = subprocess.run(_torchrun_command(nproc, logdir, name, *args), env=_env(), capture_output=True,
                                text=True, timeout=300)
        if result.returncode == 0:
            return pathlib.Path(logdir) / name
        if "address already in use" not in (result.stdout + result.stderr).lower():
            break
    raise AssertionError(f"torchrun failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")


def diagnose(run_dir):
    result = run_cli("diagnose", run_dir, "--json", check=True)
    return json.loads(result.stdout)


def rank_findings(report, code="RANK_DIVERGENCE"):
    return [f for f in report["findings"] if f["code"] == code]


def check_report_shape(report, run_dir, nproc):
    """The DESIGN.md object, with the ranks: every finding says which rank it is about."""
    assert report["source"] == str(run_dir)
    assert report["format"] == "trainscope"
    assert report["steps"] == STEPS - 1
    assert report["world_size"] == nproc
    assert [r["rank"] for r in report["ranks"]] == list(range(nproc))
    for finding in report["findings"]:
        assert "rank" in finding, finding
        assert finding["rank"] is None or 0 <= finding["rank"] < nproc, finding
        assert {"code", "severity", "step", "last_step", "location", "summary", "evidence", "causes",
                "actions"} <= finding.keys()


@pytest.mark.parametrize("nproc,batches", [(2, "8,64"), (4, "8,16,32,64")])
def test_healthy_ranks_with_different_batch_sizes_are_not_told_apart(logdir, nproc, batches):
    # Same data distribution, own shards, batch sizes 8x apart: each rank's loss has its own
    # noise (and skew), the all-reduced gradient norm is shared. No rank is named.
    run_dir = torchrun(nproc, logdir, f"healthy{nproc}", "--batch", batches)
    report = diagnose(run_dir)
    check_report_shape(report, run_dir, nproc)
    assert [(r["status"], r["steps"]) for r in report["ranks"]] == [("finished", STEPS - 1)] * nproc
    assert rank_findings(report) == [], json.dumps(rank_findings(report), indent=1)

    listing = run_cli("runs", logdir, check=True).stdout.splitlines()
    group = next(i for i, line in enumerate(listing) if line.startswith(f"healthy{nproc} ({nproc} ranks)"))
    assert "finished" in listing[group]
    for r in range(nproc):
        assert listing[group + 1 + r].split()[:3] == [f"rank-{r}", "finished", str(STEPS - 1)]

    human = run_cli("diagnose", run_dir, check=True).stdout
    assert f"(trainscope, {nproc} ranks" in human and "rank 0: finished" in human


def test_a_rank_with_unnormalised_inputs_is_named_among_four(logdir):
    run_dir = torchrun(4, logdir, "inputs4", "--perturb", "inputs", "--perturb-rank", 1)
    report = diagnose(run_dir)
    check_report_shape(report, run_dir, 4)
    named = rank_findings(report)
    assert [(f["rank"], f["ranks"], f["location"]) for f in named] == [(1, [1], "train/loss")], named
    finding = named[0]
    assert finding["severity"] == "warning"
    # From the start to the end, give or take the last 8-step window: the shared model learns
    # rank 1's inputs slowly, and how far it has got by then is the CPU's rounding (its loss
    # was 3.5x the others' there, noisy, on one machine; the job blew up unclipped on it).
    assert finding["step"] <= 10 and finding["last_step"] >= STEPS - 1 - 8
    assert finding["evidence"]["ratio_to_others"] > 2
    levels = finding["evidence"]["rank_levels"]
    assert levels["1"] > 2 * max(levels[r] for r in ("0", "2", "3"))
    assert finding["causes"][0]["id"] == "rank_data_shard"  # the gradient norm stayed shared
    assert finding["actions"]
    # The rank's own doctor sees its inputs, and says whose they are.
    assert any(f["code"] == "UNNORMALIZED_INPUT" and f["rank"] == 1 for f in report["findings"])
    assert ts.diagnose(run_dir) == report  # the same answer from Python


def test_of_two_ranks_the_one_whose_inputs_go_wrong_is_named_by_its_own_history(logdir):
    # With 2 ranks neither is the majority; rank 1 is named because at step 40 its loss left
    # what its own earlier steps predicted by far more than rank 0's did (rank 0's loss rises
    # too: the shared model takes rank 1's gradients).
    run_dir = torchrun(2, logdir, "inputs2", "--perturb", "inputs", "--perturb-rank", 1, "--perturb-from", 40)
    report = diagnose(run_dir)
    check_report_shape(report, run_dir, 2)
    named = rank_findings(report)
    assert [(f["rank"], f["ranks"], f["location"]) for f in named] == [(1, [1], "train/loss")], named
    assert 32 <= named[0]["step"] <= 48 and named[0]["last_step"] == STEPS - 1
    assert named[0]["evidence"]["reference"] == "own history"
    moved = named[0]["evidence"]["moved_at_onset"]
    assert moved["1"] > moved["0"] + 0.69  # ln 2


def test_a_rank_whose_gradients_leave_the_all_reduce_is_named_by_its_gradient_norm(logdir):
    # Gradients changed after the all-reduce on rank 3 from step 30: its grad/global_norm is
    # no longer the value every rank shares. And rank 0's forward waits 10 ms: a straggler.
    run_dir = torchrun(4, logdir, "grads4", "--perturb", "grads", "--perturb-rank", 3, "--perturb-from", 30,
                       "--slow-rank", 0)
    report = diagnose(run_dir)
    check_report_shape(report, run_dir, 4)
    on_grads = [f for f in rank_findings(report) if f["location"] == "grad/global_norm"]
    assert [(f["rank"], f["step"], f["last_step"]) for f in on_grads] == [(3, 30, STEPS - 1)], on_grads
    assert on_grads[0]["causes"][0]["id"] == "rank_desync"
    assert on_grads[0]["evidence"]["rank_levels"]["3"] > 5 * on_grads[0]["evidence"]["rank_levels"]["0"]
    assert all(f["rank"] == 3 for f in rank_findings(report)), rank_findings(report)
    stragglers = rank_findings(report, "STRAGGLER")
    assert [(f["rank"], f["location"]) for f in stragglers] == [(0, "time/forward")], stragglers
    levels = stragglers[0]["evidence"]["rank_levels"]
    assert levels["0"] >= 0.01 and levels["0"] > 1.5 * max(levels[r] for r in ("1", "2", "3"))


def test_a_killed_rank_keeps_its_data_and_the_others_stay_readable(logdir):
    logdir.mkdir(parents=True)
    kill_step = 25
    command = _torchrun_command(2, logdir, "killed2", "--kill-rank", 1, "--kill-step", kill_step)
    launcher = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pid_file = logdir / "victim.pid"
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert launcher.poll() is None, launcher.stdout.read()
            assert time.monotonic() < deadline, "the victim rank never reached its step"
            time.sleep(0.1)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        output, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode != 0, output  # torchrun reports the dead rank
    run_dir = logdir / "killed2"

    shown = run_cli("show", run_dir / "rank-1", check=True).stdout
    assert "status crashed" in shown
    loss_line = next(line for line in shown.splitlines() if line.startswith("train/loss"))
    assert loss_line.split()[2:5] == [str(kill_step + 1), "0", str(kill_step)]  # points, first, last
    shown = run_cli("show", run_dir / "rank-0", check=True).stdout
    loss_line = next(line for line in shown.splitlines() if line.startswith("train/loss"))
    assert int(loss_line.split()[4]) >= kill_step

    report = diagnose(run_dir)
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[1]["status"] == "crashed" and ranks[1]["steps"] == kill_step
    assert ranks[0]["status"] in ("crashed", "finished") and ranks[0]["steps"] >= kill_step
    assert report["world_size"] == 2
    listing = run_cli("runs", logdir, check=True).stdout
    assert "killed2 (2 ranks)" in listing and "crashed" in listing
