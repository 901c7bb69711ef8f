"""Alert rules through the Python client (docs/doctor.md "Alert rules"): real PyTorch
trainings with injected faults, the rules judged on the recorder's writer thread, and the
actions done at step boundaries. Expected steps are computed here, independently, from the
values the training logged."""

import math
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import child_env

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402

if not hasattr(ts, "StopTraining"):
    pytest.skip("this build's trainscope has no alert rules", allow_module_level=True)


class Regression:
    """A small MLP fitting a fixed linear target: deterministic for a given seed."""

    def __init__(self, seed=0, lr=0.05, full_batch=False):
        torch.manual_seed(seed)
        self.x = torch.randn(512, 8)
        self.y = self.x @ torch.randn(8, 1) / 8 ** 0.5 + 0.1 * torch.randn(512, 1)  # loss ~1 at the start
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.full_batch = full_batch
        self.generator = torch.Generator().manual_seed(seed)

    def set_lr(self, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self, scale_input=1.0):
        if self.full_batch:
            xb, yb = self.x, self.y
        else:
            index = torch.randint(0, len(self.x), (64,), generator=self.generator)
            xb, yb = self.x[index], self.y[index]
        loss = torch.nn.functional.mse_loss(self.model(xb * scale_input), yb)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def logged_losses(run_dir, tag="train/loss"):
    points = ts.open_run(run_dir).scalars(tag)
    return [int(s) for s in points["step"]], [float(v) for v in points["value"]]


def first_streak(steps, values, holds, length):
    """Steps where `holds` was true for `length` consecutive points (cooldown ignored)."""
    streak, out = 0, []
    for step, value in zip(steps, values):
        streak = streak + 1 if holds(value) else 0
        if streak >= length:
            out.append(step)
    return out


def user_alert_findings(run_dir):
    return [f for f in ts.open_run(run_dir).findings() if f["code"] == "USER_ALERT"]


def write_rules(tmp_path, text):
    path = tmp_path / "alerts.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_absolute_threshold_for_consecutive_steps(tmp_path, capfd):
    rules = write_rules(tmp_path, """
        [[rule]]
        name = "loss above 5 for 3 steps"
        series = "train/loss"
        above = 5.0
        for = 3
        cooldown = 1000
        severity = "critical"
    """)
    run = ts.init(logdir=tmp_path, name="absolute", alerts=rules)
    training = Regression()
    for step in range(120):
        if step == 60:
            training.set_lr(0.9)  # too high for this model: the loss climbs
        run.log({"train/loss": training.step()}, step=step)
    run.finish()
    steps, values = logged_losses(run.dir)
    expected = first_streak(steps, values, lambda v: math.isfinite(v) and v > 5.0, 3)
    assert expected and expected[0] > 60, "the injected fault must push the loss above 5 after step 60"
    assert [a["step"] for a in run.alerts] == expected[:1]  # cooldown 1000: fires once
    alert = run.alerts[0]
    assert alert["rule"] == "loss above 5 for 3 steps" and alert["series"] == "train/loss"
    assert alert["severity"] == "critical"
    assert alert["value"] == values[steps.index(alert["step"])]
    err = capfd.readouterr().err
    assert f"[critical] alert rule 'loss above 5 for 3 steps': train/loss = " in err
    assert f"at step {expected[0]}" in err
    findings = user_alert_findings(run.dir)
    assert [(f["step"], f["location"], f["severity"]) for f in findings] == [(expected[0], "train/loss", "critical")]
    assert findings[0]["evidence"]["rule"] == "loss above 5 for 3 steps"


def test_above_rolling_median_fires_on_the_injected_spike(tmp_path):
    rules = [{"name": "loss spike", "series": "train/loss", "above_median": 5.0, "window": 20}]
    run = ts.init(logdir=tmp_path, name="median", alerts=rules)
    training = Regression(seed=1)
    for step in range(100):
        run.log({"train/loss": training.step(scale_input=30.0 if step == 70 else 1.0)}, step=step)
    run.finish()
    steps, values = logged_losses(run.dir)
    expected = []
    for i, value in enumerate(values):
        window = values[max(0, i - 20):i]
        cooled = not expected or steps[i] - expected[-1] >= 100  # the default cooldown
        if len(window) >= 5 and value > 5.0 * statistics.median(window) and cooled:
            expected.append(steps[i])
    assert expected == [70], "only the injected spike is 5x the rolling median"
    assert [a["step"] for a in run.alerts] == expected
    assert [f["step"] for f in user_alert_findings(run.dir)] == expected


def test_no_improvement_fires_after_n_steps_without_a_new_best(tmp_path):
    rules = write_rules(tmp_path, """
        [[rule]]
        name = "loss stalled"
        series = "train/loss"
        no_improvement = 20
        mode = "min"
    """)
    run = ts.init(logdir=tmp_path, name="stall", alerts=rules)
    training = Regression(seed=2, full_batch=True)
    for step in range(80):
        if step == 30:
            training.set_lr(0.0)  # training stops learning: the same loss every step
        run.log({"train/loss": training.step()}, step=step)
    run.finish()
    steps, values = logged_losses(run.dir)
    best, best_step, expected = math.inf, None, []
    for step, value in zip(steps, values):
        if value < best:
            best, best_step = value, step
        elif step - best_step >= 20 and (not expected or step - expected[-1] >= 100):
            expected.append(step)
    assert expected == [50], "the last new best is at step 30 (lr 0 from then on)"
    assert [a["step"] for a in run.alerts] == expected


STOP_ON_NONFINITE = """
    [[rule]]
    name = "loss not finite"
    series = "train/loss"
    nonfinite = true
    severity = "critical"
    actions = ["print", "stop"]
"""


def test_nonfinite_loss_stops_at_the_next_step_boundary(tmp_path):
    # flush_interval 30 s: only the writer's 50 ms rule tick can see the NaN in time.
    run = ts.init(logdir=tmp_path, name="nan", alerts=write_rules(tmp_path, STOP_ON_NONFINITE), flush_interval=30)
    training = Regression(seed=3)
    logged_at = {}
    stopped = None
    try:
        for step in range(20000):
            if step == 100:
                training.set_lr(1e6)  # explodes to inf, then NaN
            loss = training.step()
            logged_at[step] = time.perf_counter()
            run.log({"train/loss": loss}, step=step)
    except ts.StopTraining as stop:
        stopped = stop
        raised_at, last_step = time.perf_counter(), step
    assert stopped is not None, "the stop rule never stopped the training"
    summary = run.finish()
    steps, values = logged_losses(run.dir)
    first_bad = next(s for s, v in zip(steps, values) if not math.isfinite(v))
    assert first_bad > 100
    assert stopped.alert["step"] == first_bad and stopped.alert["rule"] == "loss not finite"
    # Raised from the log of a later step, within the rule tick plus scheduling (not 30 s).
    assert last_step > first_bad
    delay = raised_at - logged_at[first_bad]
    assert delay < 2.0, f"stopped {delay:.3f} s after the NaN was logged"
    print(f"\nstop delay: {last_step - first_bad} steps, {delay * 1e3:.1f} ms "
          f"(mean step {(logged_at[last_step - 1] - logged_at[0]) / (last_step - 1) * 1e3:.3f} ms)")
    assert summary["status"] == "stopped"
    meta = ts.open_run(run.dir).meta
    assert meta["status"] == "stopped"
    assert "loss not finite" in meta["exit_reason"] and f"step {first_bad}" in meta["exit_reason"]


def run_script(tmp_path, body, rules_text, stdin=subprocess.DEVNULL):
    (tmp_path / "alerts.toml").write_text(textwrap.dedent(rules_text))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import torch
        import trainscope as ts
        torch.manual_seed(0)
        x = torch.randn(512, 8)
        y = x @ torch.randn(8, 1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        run = ts.init(logdir=sys.argv[1], name="script", alerts=sys.argv[2])
    """) + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script), str(tmp_path / "runs"), str(tmp_path / "alerts.toml")],
                          capture_output=True, text=True, timeout=300, env=child_env(), stdin=stdin)


def test_uncaught_stop_ends_the_script_cleanly_from_the_watched_optimizer_step(tmp_path):
    # run.watch(): the step boundary is the watched optimizer.step(); StopTraining is not
    # caught by the script, so it ends it with status 0 and the run says why.
    result = run_script(tmp_path, """
        run.watch(model, optimizer)
        for step in range(20000):
            index = torch.randint(0, 512, (64,))
            if step == 50:
                x[:] = x * 1e20  # corrupted inputs: the loss overflows
            loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.log({"train/loss": loss.item()})
        print("not stopped")
    """, STOP_ON_NONFINITE)
    assert result.returncode == 0, result.stderr
    assert "not stopped" not in result.stdout
    assert "Traceback" not in result.stderr
    meta = ts.open_run(tmp_path / "runs" / "script").meta
    assert meta["status"] == "stopped"
    assert meta["exit_reason"].startswith("alert rule 'loss not finite': train/loss = ")
    assert "run script stopped at step" in result.stderr


def test_callback_receives_the_alert_and_a_broken_one_never_reaches_training(tmp_path, capfd):
    received = []

    @ts.on_alert("collect")
    def collect(alert):
        received.append(alert)

    def broken(alert):
        raise RuntimeError("callback bug")

    ts.on_alert("broken", broken)
    rules = [
        {"name": "loss high", "series": "train/loss", "above": 1e-9, "cooldown": 10, "callback": "collect"},
        {"name": "always", "series": "train/loss", "above": -1.0, "cooldown": 5, "actions": ["callback"],
         "callback": "broken"},
    ]
    run = ts.init(logdir=tmp_path, name="callbacks", alerts=rules)
    training = Regression(seed=4)
    for step in range(200):
        run.log({"train/loss": training.step()}, step=step)
        time.sleep(0.001)  # ~a real step: alerts arrive during the training, not only at finish
    run.finish()
    steps, values = logged_losses(run.dir)
    assert [a["step"] for a in received] == list(range(0, 200, 10))
    for alert in received:
        assert alert["rule"] == "loss high" and alert["series"] == "train/loss"
        assert alert["value"] == values[steps.index(alert["step"])]
        assert alert["actions"] == ["callback"]  # a callback alone does not print
    broken_alerts = [a for a in run.alerts if a["rule"] == "always"]
    assert [a["step"] for a in broken_alerts] == list(range(0, 200, 5))
    err = capfd.readouterr().err
    assert err.count("alert callback 'broken' raised RuntimeError: callback bug") == 1
    assert "alert rule 'loss high'" not in err  # no "print" action asked for


def test_shell_action_runs_with_the_alert_in_its_environment(tmp_path):
    out = tmp_path / "written-by-the-command"
    out.mkdir()
    rules = [{"name": "spike", "series": "train/loss", "above_median": 5.0,
              "shell": f"printf '%s|%s|%s|%s|%s' \"$TRAINSCOPE_ALERT_RULE\" \"$TRAINSCOPE_ALERT_SERIES\" "
                       f"\"$TRAINSCOPE_ALERT_STEP\" \"$TRAINSCOPE_ALERT_VALUE\" \"$TRAINSCOPE_ALERT_SEVERITY\" "
                       f"> {out}/alert-{{step}}.txt"}]
    run = ts.init(logdir=tmp_path, name="shell", alerts=rules)
    training = Regression(seed=1)
    for step in range(100):
        run.log({"train/loss": training.step(scale_input=30.0 if step == 70 else 1.0)}, step=step)
    run.finish()
    value = run.alerts[0]["value"]
    deadline = time.time() + 20
    while not (out / "alert-70.txt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    assert (out / "alert-70.txt").read_text() == f"spike|train/loss|70|{value:.6g}|warning"
    assert sorted(p.name for p in out.iterdir()) == ["alert-70.txt"]


def test_pdb_is_skipped_without_a_terminal_and_says_so(tmp_path):
    result = run_script(tmp_path, """
        for step in range(20000):
            index = torch.randint(0, 512, (64,))
            loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.log({"train/loss": loss.item()}, step=step)
            if run.alerts:
                break
        run.finish()
        print("alerts", [a["step"] for a in run.alerts])
    """, """
        [[rule]]
        name = "break here"
        series = "train/loss"
        above = -1.0
        cooldown = 1000000
        actions = ["pdb"]
    """)
    assert result.returncode == 0, result.stderr
    assert "trainscope: alert rule 'break here' at step 0 asked for pdb; skipped: stdin is not a terminal" \
        in result.stderr
    assert result.stdout.strip() == "alerts [0]"
    assert ts.open_run(tmp_path / "runs" / "script").meta["status"] == "finished"


def test_bad_rules_file_names_the_file_and_line(tmp_path):
    rules = write_rules(tmp_path, """\
        [[rule]]
        series = "train/loss"
        above = "high"
    """)
    with pytest.raises(ValueError) as error:
        ts.init(logdir=tmp_path / "runs", name="bad", alerts=rules)
    message = str(error.value)
    assert str(rules) in message and "expected a number" in message
    assert '3 | above = "high"' in message  # the line, numbered
    assert not (tmp_path / "runs" / "bad").exists(), "a bad rules file must not leave a run behind"

    with pytest.raises(ValueError, match=r"unknown action 'email'"):
        ts.init(logdir=tmp_path / "runs", name="bad", alerts=[{"series": "a", "above": 1, "actions": ["email"]}])
    with pytest.raises(ValueError, match=r"alerts\[1\]"):
        ts.init(logdir=tmp_path / "runs", name="bad", alerts=[{"series": "a", "above": 1}, {"series": "b"}])
    with pytest.raises(ValueError, match=r"no such rules file"):
        ts.init(logdir=tmp_path / "runs", name="bad", alerts=tmp_path / "missing.toml")


def test_without_rules_nothing_is_judged(tmp_path):
    run = ts.init(logdir=tmp_path, name="plain")
    for step in range(50):
        run.log({"train/loss": float("nan")}, step=step)
    run.finish()
    assert run.alerts == [] and user_alert_findings(run.dir) == []


def test_pdb_stops_in_the_users_frame_on_a_terminal(tmp_path):
    import pty
    import select
    (tmp_path / "alerts.toml").write_text('[[rule]]\nname = "nan"\nseries = "train/loss"\nnonfinite = true\n'
                                          'actions = ["pdb"]\n')
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        import trainscope as ts
        run = ts.init(logdir=sys.argv[1], name="pdb", alerts=sys.argv[2])
        for step in range(100000):
            run.log({"train/loss": float("nan") if step == 10 else 1.0}, step=step)
            time.sleep(0.001)
            if run.alerts:
                break
        run.finish()
        print("finished at", step)
    """))
    master, slave = pty.openpty()
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), str(tmp_path / "alerts.toml")],
                             stdin=slave, stdout=slave, stderr=slave, env=child_env(), close_fds=True)
    os.close(slave)
    output = b""

    def read_until(marker, timeout=60, start=0):
        nonlocal output
        deadline = time.time() + timeout
        while marker not in output[start:] and time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    output += os.read(master, 4096)
                except OSError:
                    break
        return marker in output[start:]

    try:
        assert read_until(b"(Pdb) "), output.decode(errors="replace")
        # The next line of the training loop, in the user's own frame, not in trainscope.
        assert b"train.py" in output and b"-> time.sleep(0.001)" in output, output.decode(errors="replace")
        before = len(output)
        os.write(master, b"p step, run.alerts[0]['step']\n")
        assert read_until(b"(Pdb) ", 30, start=before)
        # Stopped at a step boundary after the alert's step (10), in the loop's variables.
        seen = re.search(rb"\((\d+), 10\)", output[before:])
        assert seen and int(seen.group(1)) > 10, output.decode(errors="replace")
        os.write(master, b"c\n")
        assert read_until(b"finished at"), output.decode(errors="replace")
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
        os.close(master)
    assert b"alert rule 'nan' at step 10: " in output

