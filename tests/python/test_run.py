"""The Python client's foundation: ts.init, run.log, run.finish, reading back."""

import json
import math
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import trainscope as ts
from conftest import child_env, run_cli


def read(run_dir, tag):
    data = ts.open_run(run_dir).scalars(tag)
    return data["step"].tolist(), data["value"].tolist()


def test_log_accepts_python_numpy_and_torch_scalars(logdir):
    run = ts.init(logdir=logdir, name="types", config={"lr": 0.1, "model": object()})
    loss = torch.nn.functional.mse_loss(torch.ones(3), torch.zeros(3))  # 0-d tensor with a graph
    run.log({"f": 1.5, "i": 7, "b": True, "np32": np.float32(0.25), "np64": np.float64(2.5),
             "npint": np.int64(9), "t0d": torch.tensor(3.0), "loss": loss, "t1": torch.tensor([4.0]),
             "big": 2 ** 70})
    run.finish()
    expected = {"f": 1.5, "i": 7, "b": 1.0, "np32": 0.25, "np64": 2.5, "npint": 9.0, "t0d": 3.0,
                "loss": 1.0, "t1": 4.0, "big": float(2 ** 70)}
    for tag, value in expected.items():
        steps, values = read(run.dir, tag)
        assert steps == [0] and values == [value], tag
    meta = ts.open_run(run.dir).meta
    assert meta["status"] == "finished"
    assert meta["config"]["lr"] == 0.1
    assert meta["config"]["model"].startswith("<object")  # not JSON-able: stored as str()
    assert meta["name"] == "types"


def test_steps_advance_per_call_unless_given(logdir):
    run = ts.init(logdir=logdir, name="steps")
    run.log({"a": 1.0})
    run.log({"a": 2.0})
    run.log({"a": 3.0}, step=10)
    run.log({"a": 4.0})
    run.finish()
    assert read(run.dir, "a") == ([0, 1, 10, 11], [1.0, 2.0, 3.0, 4.0])


def test_nonfinite_values_are_stored_and_backward_steps_kept(logdir):
    run = ts.init(logdir=logdir, name="nan")
    for step, value in [(5, 1.0), (6, math.nan), (7, math.inf), (3, -math.inf)]:
        run.log({"train/loss": value}, step=step)
    run.finish()
    steps, values = read(run.dir, "train/loss")
    assert steps == [5, 6, 7, 3]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == math.inf and values[3] == -math.inf
    assert ts.open_run(run.dir).meta["backward_steps"] == 1


def test_bad_tags_and_values_warn_once_and_are_skipped(logdir):
    run = ts.init(logdir=logdir, name="bad")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            run.log({"": 1.0, "x" * 2000: 2.0, "ok": 3.0, "text": "hello", 5: 1.0, "vec": torch.ones(3),
                     "ctl\n": 1.0})
    messages = [str(w.message) for w in caught]
    assert sum("empty" in m for m in messages) == 1
    assert sum("at most 1024" in m for m in messages) == 1
    assert sum("str is not a number" in m for m in messages) == 1
    assert sum("is not a str" in m for m in messages) == 1
    assert sum("3 elements" in m for m in messages) == 1
    assert sum("control character" in m for m in messages) == 1
    run.finish()
    tags = [s["tag"] for s in ts.open_run(run.dir).series()]
    assert tags == ["ok"]
    assert read(run.dir, "ok")[1] == [3.0, 3.0, 3.0]


def test_existing_run_name_is_refused_then_resumed(logdir):
    first = ts.init(logdir=logdir, name="same")
    first.log({"a": 1.0}, step=0)
    first.finish()
    with pytest.raises(ValueError, match="already exists"):
        ts.init(logdir=logdir, name="same")
    again = ts.init(logdir=logdir, name="same", resume=True)
    again.log({"a": 2.0}, step=1)
    again.finish()
    assert read(again.dir, "a") == ([0, 1], [1.0, 2.0])
    with pytest.raises(ValueError, match="invalid run name"):
        ts.init(logdir=logdir, name="../outside")


def test_flush_makes_points_visible_while_running(logdir):
    run = ts.init(logdir=logdir, name="live", flush_interval=60)
    run.log({"a": 1.0})
    run.flush()
    view = ts.open_run(run.dir)
    assert view.meta["status"] == "running"
    assert read(run.dir, "a") == ([0], [1.0])
    run.finish()


def test_context_manager_marks_exception_as_crash(logdir):
    with pytest.raises(RuntimeError):
        with ts.init(logdir=logdir, name="ctx") as run:
            run.log({"a": 1.0})
            raise RuntimeError("boom")
    meta = ts.open_run(logdir / "ctx").meta
    assert meta["status"] == "crashed" and meta["exit_reason"] == "RuntimeError"


def child(code, logdir, **kwargs):
    script = textwrap.dedent(code).format(logdir=str(logdir))
    return subprocess.Popen([sys.executable, "-c", script], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_uncaught_exception_and_keyboard_interrupt_mark_the_run_crashed(logdir):
    for name, error in [("exc", "ValueError('bad')"), ("kbd", "KeyboardInterrupt()")]:
        proc = child(f"""
            import trainscope as ts
            run = ts.init(logdir={{logdir!r}}, name="{name}")
            for step in range(100):
                run.log({{{{"train/loss": 1.0 / (step + 1)}}}})
            raise {error}
            """, logdir)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        meta = ts.open_run(logdir / name).meta
        assert meta["status"] == "crashed"
        assert meta["exit_reason"] == error.split("(")[0]
        assert len(read(logdir / name, "train/loss")[0]) == 100


def test_normal_exit_without_finish_is_finished(logdir):
    proc = child("""
        import trainscope as ts
        run = ts.init(logdir={logdir!r}, name="noclose")
        run.log({{"a": 1.0}})
        """, logdir)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert ts.open_run(logdir / "noclose").meta["status"] == "finished"


def terminate_and_read(proc, run_dir, tag):
    """SIGTERM to proc; checks that it died of it and closed its run as crashed by SIGTERM;
    returns the run's (steps, values) of tag."""
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    meta = ts.open_run(run_dir).meta
    assert meta["status"] == "crashed" and meta["exit_reason"] == "SIGTERM"
    return read(run_dir, tag)


def test_sigterm_closes_the_run_and_still_kills_the_process(logdir):
    proc = child("""
        import sys, trainscope as ts
        run = ts.init(logdir={logdir!r}, name="term")
        step = 0
        while True:
            run.log({{"a": float(step)}})
            step += 1
            if step == 1000:
                print("ready", flush=True)
        """, logdir)
    assert proc.stdout.readline().strip() == "ready"
    steps, values = terminate_and_read(proc, logdir / "term", "a")
    assert len(steps) >= 1000 and steps == list(range(len(steps)))


def test_sigterm_during_finish_still_writes_the_run(logdir):
    # SIGTERM while finish() runs (a torchrun rank terminated as it closes after its peer
    # died): the handler used to find the run "finished" already and kill the process before
    # its store was written. Its watch's close is slowed here so that the signal comes then.
    proc = child("""
        import time, torch, trainscope as ts
        run = ts.init(logdir={logdir!r}, name="term_in_finish", flush_interval=60)
        model = torch.nn.Linear(4, 2)
        run.watch(model)
        for step in range(5):
            model(torch.randn(3, 4)).sum().backward()
            run.log({{"train/loss": float(step)}})
        close_watch = run._close_watch
        def slow_close_watch():
            print("closing", flush=True)
            time.sleep(30)  # the test's SIGTERM comes meanwhile
            close_watch()
        run._close_watch = slow_close_watch
        run.finish()
        """, logdir)
    assert proc.stdout.readline().strip() == "closing"
    steps, values = terminate_and_read(proc, logdir / "term_in_finish", "train/loss")
    assert steps == [0, 1, 2, 3, 4] and values == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_not_a_store_and_empty_logdir_give_clear_messages(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "trainscope.db").write_text("just text, not SQLite" * 100)
    with pytest.raises(ValueError, match="not a trainscope store"):
        ts.open_run(tmp_path / "fake")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("runs", empty)
    assert result.returncode == 0 and "no runs here" in result.stderr
    result = run_cli("diagnose", empty, "--json")
    assert result.returncode == 2 and "no runs found" in result.stderr
    result = run_cli("show", tmp_path / "fake")
    assert result.returncode == 2 and "not a trainscope store" in result.stderr


def test_cli_lists_shows_and_diagnoses_a_recorded_run(logdir):
    run = ts.init(logdir=logdir, name="cli", config={"lr": 0.5})
    for step in range(50):
        run.log({"train/loss": 2.0 - step * 0.01, "opt/lr": 0.5}, step=step)
    run.finish()
    listing = run_cli("runs", logdir, check=True).stdout
    line = next(l for l in listing.splitlines() if l.startswith("cli "))
    assert line.split()[1:3] == ["finished", "49"]
    shown = run_cli("show", logdir / "cli", check=True).stdout
    loss_line = next(l for l in shown.splitlines() if l.startswith("train/loss"))
    assert loss_line.split()[1:] == ["scalar", "50", "0", "49", "1.51"]
    report = json.loads(run_cli("diagnose", logdir / "cli", "--json", check=True).stdout)
    assert report["source"] == str(logdir / "cli")
    assert report["format"] == "trainscope"
    assert report["steps"] == 49
    assert isinstance(report["findings"], list)
    for command in ["runs", "show", "diagnose", "demo"]:
        result = run_cli(command, "--help")
        assert result.returncode == 0 and "Usage" in result.stdout, command


def test_ts_diagnose_matches_the_cli(logdir):
    run = ts.init(logdir=logdir, name="diag")
    for step in range(120):
        run.log({"train/loss": 1.0 if step < 100 else math.nan}, step=step)
    run.finish()
    from_python = ts.diagnose(logdir / "diag")
    from_cli = json.loads(run_cli("diagnose", logdir / "diag", "--json", check=True).stdout)
    assert from_python == from_cli
    first = from_python["findings"][0]
    assert first["code"] == "NONFINITE_LOSS" and first["step"] == 100 and first["severity"] == "critical"
    with pytest.raises(ValueError, match="no such file"):
        ts.diagnose(logdir / "missing")


def test_host_tensors_of_one_element_are_read_by_the_recorder_itself(tmp_path):
    # After the first torch tensor run.log meets, log_dict reads host tensors of one element
    # in C++ with the other numbers (no Python frame per value); the values are item()'s.
    run = ts.init(tmp_path, "tensors")
    run.log({"loss": torch.tensor(0.5)}, step=0)
    slow = []
    original = run._log_slow
    run._log_slow = lambda items, step: (slow.append([k for k, _ in items]), original(items, step))
    loss = (torch.ones(3, requires_grad=True) * 2).mean()
    run.log({"loss": loss, "correct": torch.tensor(7), "nan": torch.tensor(float("nan")), "lr": 0.1}, step=1)
    assert slow == []
    with pytest.warns(UserWarning, match="2 elements"):
        run.log({"loss": torch.tensor([1.0, 2.0])}, step=2)  # not a scalar: Python warns and skips it
    assert slow == [["loss"]]
    run.finish()
    view = ts.open_run(tmp_path / "tensors")
    assert view.scalars("loss")["value"].tolist() == [0.5, 2.0]
    assert view.scalars("correct")["value"].tolist() == [7.0]
    assert math.isnan(view.scalars("nan")["value"][0])
