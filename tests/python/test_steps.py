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



def test_run_data_keeps_what_a_loop_reads_from_its_loader(tmp_path):
    """pytorch/examples' siamese loop prints len(train_loader) and train_loader.dataset: the
    object run.data() returns passes both through, and a second `for` is a second epoch."""
    dataset = torch.utils.data.TensorDataset(torch.randn(40, 8), torch.randint(0, 4, (40,)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    run = ts.init(tmp_path, name="loader", doctor=False)
    batches = run.data(loader)
    assert len(batches) == 5
    assert batches.dataset is dataset and batches.batch_size == 8
    assert len(run.data(loader, steps=3)) == 3
    epochs = [sum(1 for _ in batches) for _ in range(2)]
    assert epochs == [5, 5]
    first = next(run.data(lambda: batch(0)))  # a batch function: next() takes one batch
    assert first[0].shape == (8, 8)
    with pytest.raises(TypeError, match="run.data"):
        run.data(3)
    with pytest.raises(ValueError, match="steps"):
        run.data(loader, steps=-1)
    run.finish()
    assert list(ts.open_run(tmp_path / "loader").scalars("time/data")["step"])[:10] == list(range(10))


def test_many_forwards_a_step_log_the_inputs_once_and_the_work_each_step(tmp_path):
    """An actor-critic loop runs the model once per environment step and steps the optimizer
    once per episode: the inputs are measured on the step's first forward only, and
    data/input_elements (the elements the step's forwards took) is logged when it changes,
    what THROUGHPUT_DROP divides the step time by."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    run = ts.init(tmp_path, name="rl", doctor=False)
    run.watch(model, optimizer, system_interval=0, checks=False)
    episode_lengths = [3, 3, 7, 7, 7, 12]
    for length in episode_lengths:
        losses = [model(torch.randn(4)).sum() for _ in range(length)]
        optimizer.zero_grad()
        torch.stack(losses).sum().backward()
        optimizer.step()
    run.finish()
    view = ts.open_run(tmp_path / "rl")
    assert [s["step"] for s in view.tensor_stats("input/0")] == list(range(len(episode_lengths)))
    work = view.scalars("data/input_elements")
    assert list(work["step"]) == [0, 2, 5]
    assert list(work["value"]) == [12.0, 28.0, 48.0]


def test_a_jump_of_the_gradient_norm_measures_the_next_forward(tmp_path):
    """Denser when a statistic moves: activations are measured every 20 steps, and also on
    the step after the gradient norm jumps 10x its recent level (here a loss scaled 1000x
    at step 33), so the layers are seen at the jump."""
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    run = ts.init(tmp_path, name="jump", doctor=False)
    run.watch(model, optimizer, system_interval=0, checks=False)
    for i in range(45):
        x, y = batch(i)
        loss = torch.nn.functional.cross_entropy(model(x), y) * (1000 if i == 33 else 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    run.finish()
    steps = sorted({s["step"] for s in ts.open_run(tmp_path / "jump").tensor_stats("act/0")})
    assert steps == [0, 20, 34, 40], steps
