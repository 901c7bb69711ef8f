"""Step boundaries and step times in the loops of public training scripts (issue 15)."""

import math
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)


def manual_sgd(model, lr=0.1):
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)


@pytest.mark.parametrize("zero_first", [False, True])
def test_steps_advance_without_an_optimizer(tmp_path, zero_first):
    """The word language model: watch(model), no optimizer, a hand-written update."""
    model = mlp()
    run = ts.init(tmp_path, name="lm", doctor=False)
    run.watch(model, system_interval=0, checks=False)
    for i in range(6):
        x, y = batch(i)
        if zero_first:
            model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        manual_sgd(model)
        if not zero_first:
            model.zero_grad()
        run.log({"train/loss": loss.item()})
    run.finish()
    view = ts.open_run(tmp_path / "lm")
    assert list(view.scalars("train/loss")["step"]) == list(range(6))
    norms = view.scalars("grad/global_norm")
    assert list(norms["step"]) == list(range(6))
    assert all(v > 0 for v in norms["value"])


class Sleepy(torch.nn.Module):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.inner = mlp()

    def forward(self, x):
        time.sleep(self.seconds)
        return self.inner(x)


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(0.02)
        return super().step(closure)


def slow_batches(n, seconds):
    for i in range(n):
        time.sleep(seconds)
        yield batch(i)


def test_step_time_is_the_sum_of_its_phases(tmp_path):
    """time/step = data + forward + backward + optimizer + other, and the data wait is
    counted once (it was also in the previous step's time)."""
    model = Sleepy(0.03)
    optimizer = SlowSGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, name="t", doctor=False)
    run.watch(model, optimizer, system_interval=0, checks=False)
    started = time.perf_counter()
    for x, y in run.data(slow_batches(8, 0.04)):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        run.log({"train/loss": 1.0})
    wall = time.perf_counter() - started
    run.finish()
    view = ts.open_run(tmp_path / "t")
    times = {p: view.scalars("time/" + p) for p in ("step", "data", "forward", "backward", "optimizer", "other")}
    assert list(times["step"]["step"]) == list(range(8))
    for p, points in times.items():
        assert list(points["step"]) == list(range(8)), p
    total = sum(times[p]["value"] for p in ("data", "forward", "backward", "optimizer", "other"))
    np.testing.assert_allclose(times["step"]["value"], total, rtol=1e-6, atol=1e-6)
    assert all(v >= 0.035 for v in times["data"]["value"])
    # The steps fill the loop's time once: their sum is not more than its wall time.
    assert times["step"]["value"].sum() <= wall + 0.005
    # Each step's data wait is its own: what the phases leave over is small.
    assert np.median(times["other"]["value"]) < 0.02


def test_a_user_logged_lr_replaces_watchs(tmp_path):
    """The README's pattern: run.log({"opt/lr": ...}) after optimizer.step() with watch()."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, name="lr", doctor=False)
    run.watch(model, optimizer, system_interval=0, checks=False)
    for x, y in run.data([batch(i) for i in range(5)]):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        run.log({"train/loss": 1.0, "opt/lr": 0.25})
    run.finish()
    lr = ts.open_run(tmp_path / "lr").scalars("opt/lr")
    assert list(lr["step"]) == list(range(5))
    assert list(lr["value"]) == [0.25] * 5

