"""A store that cannot be written (a full disk, its directory deleted, a read-only file
system) never stops the training: the process ends normally with its last step done, what
was stored before the fault reads back exactly, and the user is told once what was lost and
why (stderr, finish()'s summary, the store's meta, `trainscope show` and `runs`).

A small disk is a tmpfs of a few MB where the tests may mount one (root); elsewhere the child
runs under a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored), which SQLite meets as a full
disk for its files. Freeing space needs the tmpfs."""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

import trainscope as ts
from conftest import child_env, run_cli

# The child trains a small model for real, logs `extra` scalars a step beside the loss and
# an echo of the step (its value is its step: what was stored reads back as step == value),
# and prints each step, then finish()'s summary as JSON.
CHILD = textwrap.dedent("""
    import json, os, shutil, sys, time
    import torch, torch.nn as nn
    import trainscope as ts
    logdir, watch, steps, extra, action = sys.argv[1], sys.argv[2] == "watch", int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.manual_seed(0); torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = ts.init(logdir=logdir, name="victim", flush_interval=0.1)
    if watch:
        run.watch(model, opt)
    x = torch.randn(64, 32); y = torch.randint(0, 10, (64,))
    values = {f"extra/v{i}": float(i) for i in range(extra)}
    freed_at = None
    for step in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        run.log({"train/loss": loss.item(), "train/step_echo": float(step), **values}, step=step)
        if action == "delete" and step == steps // 3:
            run.flush()
            shutil.rmtree(run.dir)
        if action.startswith("free:") and freed_at is None and run._recorder.writer_error():
            os.remove(action[5:])  # the disk filled: give the space back, recording resumes
            freed_at = step
            values = {}  # and log little from now on, so that it does not fill again
        if action.startswith("free:") or action == "slow":
            time.sleep(0.01)  # long enough after the fault for the writer's retry
        if step < 5:
            run.flush()  # the first steps are stored whatever the machine's speed: the fault comes after them
        print("STEP", step, flush=True)
    if action.startswith("fill:"):  # the disk fills after the last step, before finish()
        run.flush()
        try:
            with open(action[5:], "wb", buffering=0) as filler:
                while True:
                    filler.write(bytes(4096))
        except OSError:
            pass
    summary = run.finish()
    summary.pop("findings")
    print("SUMMARY", json.dumps(summary), flush=True)
    print("FREED", freed_at, flush=True)
""")


def _can_mount_tmpfs(where):
    where.mkdir(parents=True, exist_ok=True)
    # TRAINSCOPE_TEST_NO_MOUNT=1 takes the file-size-limit path, as a machine without root does.
    if os.geteuid() != 0 or shutil.which("mount") is None or os.environ.get("TRAINSCOPE_TEST_NO_MOUNT") == "1":
        return False
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    if result.returncode != 0:
        return False
    subprocess.run(["umount", str(where)], check=True)
    return True


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(megabytes) -> (directory, preexec_fn for the child): a tmpfs of that size,
    or a directory with a file size limit of that size in the child."""
    mounts = []

    def make(megabytes):
        where = tmp_path / f"disk{len(mounts)}"
        if _can_mount_tmpfs(where):
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(megabytes * 1024)}k", "tmpfs", str(where)],
                           check=True)
            mounts.append(where)
            return where, None
        limit = int(megabytes * 1024 * 1024)

        def limit_file_size():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return where, limit_file_size

    make.is_tmpfs = lambda: bool(mounts)
    yield make
    for where in mounts:
        subprocess.run(["umount", "-l", str(where)], check=False)


def run_child(logdir, watch, steps, extra, action="none", preexec=None, timeout=240):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(logdir), "watch" if watch else "plain", str(steps),
                           str(extra), action],
                          env=child_env(), capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)
    lines = proc.stdout.splitlines()
    steps_done = [int(line.split()[1]) for line in lines if line.startswith("STEP ")]
    summary = next((json.loads(line[len("SUMMARY "):]) for line in lines if line.startswith("SUMMARY ")), None)
    freed = next((line.split()[1] for line in lines if line.startswith("FREED ")), None)
    return proc, steps_done, summary, freed


def stored_echo(run_dir):
    return ts.open_run(run_dir).scalars("train/step_echo")


@pytest.mark.parametrize("watch", [False, True], ids=["log", "watch"])
def test_a_disk_filling_mid_run_never_stops_the_training(small_disk, watch):
    disk, preexec = small_disk(4)
    proc, steps_done, summary, _ = run_child(disk / "logs", watch, 1500, 300, preexec=preexec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(1500))  # every step ran, the last one included
    assert summary is not None, proc.stderr[-3000:]
    # One count, with its true cause, and the steps it cost.
    assert summary["dropped"] > 0
    assert summary["drops"] == {"disk full": summary["dropped"]}
    assert len(summary["gaps"]) == 1
    first_lost, last_lost, cause = summary["gaps"][0]
    assert cause == "disk full"
    assert last_lost == 1499
    assert proc.stderr.count("cannot write to the run store") == 1, proc.stderr[-3000:]
    assert "disk full" in proc.stderr
    assert f"{summary['dropped']} points dropped: disk full" in proc.stderr
    assert "the queue was full" not in proc.stderr
    # What was stored before the fault reads back exactly: steps 0..k-1, no holes.
    run_dir = disk / "logs" / "victim"
    echo = stored_echo(run_dir)
    stored = len(echo["step"])
    assert 5 <= stored < 1500
    assert list(echo["step"]) == list(range(stored))
    assert list(echo["value"]) == [float(s) for s in range(stored)]
    assert first_lost <= stored <= last_lost
    # The store says the same, and the run reads as finished, not crashed.
    meta = ts.open_run(run_dir).meta
    assert meta["status"] == "finished"
    assert json.loads(meta["extra"]["gaps"]) == summary["gaps"]
    assert json.loads(meta["extra"]["drops"]) == summary["drops"]
    shown = run_cli("show", run_dir)
    assert shown.returncode == 0, shown.stderr
    assert f"steps {first_lost}-{last_lost} (disk full) lost points" in shown.stdout
    listed = run_cli("runs", disk / "logs")
    assert "finished" in listed.stdout and "(disk full) lost points" in listed.stdout, listed.stdout


def test_a_disk_full_before_the_start_leaves_the_training_unmonitored(small_disk):
    disk, preexec = small_disk(0.25)
    if small_disk.is_tmpfs():  # fill it: nothing more can be written
        with open(disk / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
    else:
        preexec_limit = preexec

        def preexec():  # no file may grow at all
            preexec_limit()
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    proc, steps_done, summary, _ = run_child(disk / "logs", False, 200, 10, preexec=preexec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(200))
    assert proc.stderr.count("cannot create the run store") == 1, proc.stderr[-3000:]
    assert "training goes on unmonitored" in proc.stderr
    assert summary["drops"] == {"disk full": summary["dropped"]} and summary["dropped"] == 200 * 12
    # No empty store is left for `runs` to misread.
    assert not (disk / "logs" / "victim" / "trainscope.db").exists()
    listed = run_cli("runs", disk / "logs")
    assert "schema version" not in listed.stdout + listed.stderr


def test_space_freed_mid_run_resumes_recording_and_the_gap_is_exact(small_disk, tmp_path):
    disk, preexec = small_disk(3)
    if not small_disk.is_tmpfs():
        pytest.skip("freeing space needs a tmpfs this test can mount (root); a file size limit cannot be lifted")
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (1536 * 1024))  # half the disk: the run fills the rest
    proc, steps_done, summary, freed = run_child(disk / "logs", False, 1200, 300, action=f"free:{filler}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(1200))
    assert freed != "None", "the disk never filled"
    assert "the run store is writable again" in proc.stderr, proc.stderr[-3000:]
    # The WAL may fill the small disk again later (it grows up to 1000 pages between
    # checkpoints): each fault is told once and is its own gap.
    gaps = summary["gaps"]
    assert proc.stderr.count("cannot write to the run store") == len(gaps), proc.stderr[-3000:]
    assert [cause for _, _, cause in gaps] == ["disk full"] * len(gaps)
    assert gaps[0][0] <= int(freed) < gaps[0][1] < 1199
    lost = {s for first, last, _ in gaps for s in range(first, last + 1)}
    # Everything outside the gaps is stored, each step once with its own value.
    echo = stored_echo(disk / "logs" / "victim")
    steps = list(echo["step"])
    assert steps == [s for s in range(1200) if s not in lost]
    assert list(echo["value"]) == [float(s) for s in steps]
    meta = ts.open_run(disk / "logs" / "victim").meta
    assert meta["status"] == "finished"
    assert json.loads(meta["extra"]["gaps"]) == summary["gaps"]


def test_a_disk_full_at_the_end_still_marks_the_run_finished(small_disk):
    # The space held back beside the store is what the run's end is written with: the
    # disk filled right before finish(), the run is still marked finished (was "crashed":
    # the reserve was let go only after the end failed to be written).
    disk, _ = small_disk(3)
    if not small_disk.is_tmpfs():
        pytest.skip("filling the disk after the last step needs a tmpfs this test can mount (root)")
    proc, steps_done, summary, _ = run_child(disk / "logs", False, 50, 10, action=f"fill:{disk / 'filler'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(50))
    assert "could not mark the run" not in proc.stderr, proc.stderr[-3000:]
    assert list(stored_echo(disk / "logs" / "victim")["step"]) == list(range(50))
    assert ts.open_run(disk / "logs" / "victim").meta["status"] == "finished"


def test_the_store_directory_deleted_mid_run(tmp_path):
    proc, steps_done, summary, _ = run_child(tmp_path / "logs", True, 300, 10, action="delete")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(300))
    assert proc.stderr.count("cannot write to the run store") == 1, proc.stderr[-3000:]
    assert summary["dropped"] > 0
    assert summary["drops"] == {"store deleted": summary["dropped"]}
    assert [gap[2] for gap in summary["gaps"]] == ["store deleted"]


def test_a_read_only_file_system_from_the_start(tmp_path):
    # A read-only remount under an open store is refused by Linux while a file is open for
    # writing ("mount point is busy"), so the read-only case is tested from the start.
    where = tmp_path / "ro"
    if not _can_mount_tmpfs(where):
        pytest.skip("needs a tmpfs this test can mount (root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)], check=True)
    try:
        proc, steps_done, summary, _ = run_child(where / "logs", False, 50, 0)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done == list(range(50))
    assert proc.stderr.count("cannot create the run store") == 1, proc.stderr[-3000:]
    assert summary["drops"] == {"read-only": 100}


def test_a_lock_held_by_another_process(tmp_path):
    # Another process holds the store's write lock for 8 s: the writer waits its busy
    # timeout (5 s), drops and counts, and writes again once the lock is gone; the
    # training never waits for it.
    import sqlite3
    import time
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "logs"), "plain", "1500", "10", "slow"],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        lines.append(line)
        if line == "STEP 50\n":
            break
    holder = sqlite3.connect(tmp_path / "logs" / "victim" / "trainscope.db", timeout=30, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    time.sleep(8)
    holder.execute("ROLLBACK")
    holder.close()
    out, err = proc.communicate(timeout=240)
    lines += out.splitlines(keepends=True)
    assert proc.returncode == 0, err[-3000:]
    assert [int(line.split()[1]) for line in lines if line.startswith("STEP ")] == list(range(1500))
    summary = json.loads(next(line for line in lines if line.startswith("SUMMARY "))[len("SUMMARY "):])
    assert summary["drops"] == {"locked by another process": summary["dropped"]} and summary["dropped"] > 0
    assert err.count("cannot write to the run store") == 1, err[-3000:]
    assert "the run store is writable again" in err
    lost = {s for first, last, _ in summary["gaps"] for s in range(first, last + 1)}
    steps = list(stored_echo(tmp_path / "logs" / "victim")["step"])
    assert steps == [s for s in range(1500) if s not in lost] and len(steps) > 50
