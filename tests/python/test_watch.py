"""run.watch() against direct torch computations, on real (small) CPU trainings.

Each test trains a real model for a few steps while trainscope watches, keeps what torch
itself says at the same moments (gradients before the step, weights before and after),
and compares the stored statistics with it.
"""

import json
import math
import sys
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from trainscope import watch as ts_watch  # noqa: E402


def mlp(activation=torch.nn.ReLU):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), activation(), torch.nn.Linear(32, 4))


def batches(n, seed=1, batch=16):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 8, generator=g), torch.randint(0, 4, (batch,), generator=g)) for _ in range(n)]


class Spy:
    """Wraps optimizer.step (inside trainscope's wrapper) to keep torch's own view."""

    def __init__(self, model, optimizer):
        self.grads, self.before, self.after = [], [], []
        inner = optimizer.step

        def step(*a, **k):
            self.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
            self.before.append({n: p.detach().clone() for n, p in model.named_parameters()})
            r = inner(*a, **k)
            self.after.append({n: p.detach().clone() for n, p in model.named_parameters()})
            return r

        optimizer.step = step


def train(run, model, optimizer, data, zero_grad=True, **watch_options):
    spy = Spy(model, optimizer)  # installed first: trainscope's wrapper goes around it
    spy.watcher = run.watch(model, optimizer, **watch_options)
    losses = []
    for x, y in run.data(data):
        if zero_grad:
            optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        run.log({"train/loss": loss})
        losses.append(loss.item())
    run.finish()
    return spy, losses


def steps_on_sum(model, optimizer, xs):
    """One optimizer step per input, on the sum of the model's outputs (no targets)."""
    for x in xs:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def exponent_bins(t):
    t = t.detach().double().reshape(-1)
    t = t[torch.isfinite(t) & (t != 0)]
    _, e = torch.frexp(t)
    bins = (e - 1 + 64).clamp(0, 127)
    return torch.bincount(bins, minlength=128).tolist()


class OwnSGD(torch.optim.SGD):
    """An optimizer from outside torch.optim: its gradient pass is not overlapped."""


@pytest.mark.parametrize("path", ["in_backward", "overlapped", "synchronous"])
def test_gradient_statistics_match_torch(tmp_path, path):
    model = mlp()
    opt = (OwnSGD if path == "synchronous" else torch.optim.SGD)(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "g")
    spy, _ = train(run, model, opt, batches(4), histograms_every=2, units_every=2,
                   hot_gradients=path == "in_backward")
    # Each path is the one asked for, and is checked here against torch.
    assert spy.watcher.hot_steps == (4 if path == "in_backward" else 0)
    assert spy.watcher._overlap == (path != "synchronous")
    view = ts.open_run(tmp_path / "g")
    for name in ("0.weight", "0.bias", "2.weight"):
        stats = view.tensor_stats("grad/" + name)
        assert [s["step"] for s in stats] == [0, 1, 2, 3]
        for s, grads in zip(stats, spy.grads):
            g = grads[name].double()
            assert s["numel"] == g.numel()
            assert s["nan"] == 0 and s["inf"] == 0
            assert s["zeros"] == int((g == 0).sum())
            assert s["l2_norm"] == pytest.approx(float(g.norm()), rel=1e-6)
            assert s["min"] == pytest.approx(float(g.min()), rel=1e-7)
            assert s["max"] == pytest.approx(float(g.max()), rel=1e-7)
            # float partial sums (core/tensor_stats.cc): within ~1e-7 of the magnitudes summed
            assert s["mean"] == pytest.approx(float(g.mean()), rel=1e-6, abs=1e-6 * float(g.abs().mean()))
            assert s["std"] == pytest.approx(float(g.std(unbiased=False)), rel=1e-5)
        # Histograms on steps 0 and 2 only, bucket by bucket.
        assert "exponent_counts" not in stats[1]
        assert stats[2]["exponent_counts"] == exponent_bins(spy.grads[2][name])
    norms = view.scalars("grad/global_norm")["value"]
    for value, grads in zip(norms, spy.grads):
        direct = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
        assert value == pytest.approx(direct, rel=1e-6)
    # Per-unit gradient norms: one per output row of each weight matrix, steps 0 and 2.
    units = view.vectors("grad_units/0.weight")
    assert [step for step, _ in units] == [0, 2]
    np.testing.assert_allclose(units[1][1], spy.grads[2]["0.weight"].norm(dim=1).numpy(), rtol=1e-5)
    assert "grad_units/0.bias" not in {s["tag"] for s in view.series()}  # a bias has no rows


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_label_range_of_every_integer_dtype(tmp_path, dtype):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "labels")
    run.watch(model, opt)
    data = [(x, (y * 30 + 5).to(dtype)) for x, y in batches(3)]  # 5..95: fits every dtype
    for x, y in run.data(data):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y.long() % 4).backward()
        opt.step()
    run.finish()
    view = ts.open_run(tmp_path / "labels")
    assert list(view.scalars("input/label_min")["value"]) == [int(y.min()) for _, y in data]
    assert list(view.scalars("input/label_max")["value"]) == [int(y.max()) for _, y in data]


@pytest.mark.parametrize("layout", ["shifted_slice", "transposed", "expanded"])
def test_label_range_of_strided_targets(tmp_path, layout):
    """Targets that are views (a language model's `tokens[:, 1:]`) are read in place."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "strided")
    run.watch(model, opt)
    g = torch.Generator().manual_seed(3)
    data = []
    for x, _ in batches(3):
        tokens = torch.randint(-50, 900, (4, 5), generator=g)
        y = {"shifted_slice": tokens[:, 1:], "transposed": tokens.t()[1:],
             "expanded": tokens[2, 1:3].expand(4, 2)}[layout]
        assert not y.is_contiguous()
        data.append((x, y))
    for x, y in run.data(data):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), torch.zeros(16, dtype=torch.long)).backward()
        opt.step()
    run.finish()
    view = ts.open_run(tmp_path / "strided")
    assert list(view.scalars("input/label_min")["value"]) == [int(y.min()) for _, y in data]
    assert list(view.scalars("input/label_max")["value"]) == [int(y.max()) for _, y in data]


def test_weights_updates_and_ratio_match_torch(tmp_path):
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    run = ts.init(tmp_path, "w")
    spy, _ = train(run, model, opt, batches(5), weights_every=2, histograms_every=4)
    view = ts.open_run(tmp_path / "w")
    weights = view.tensor_stats("weight/2.weight")
    updates = view.tensor_stats("update/2.weight")
    ratios = view.scalars("update_ratio/2.weight")
    assert [s["step"] for s in weights] == [0, 2, 4]
    assert list(ratios["step"]) == [0, 2, 4]
    for i, step in enumerate([0, 2, 4]):
        w = spy.after[step]["2.weight"].double()
        du = (spy.after[step]["2.weight"] - spy.before[step]["2.weight"]).double()
        assert weights[i]["l2_norm"] == pytest.approx(float(w.norm()), rel=1e-6)
        assert updates[i]["l2_norm"] == pytest.approx(float(du.norm()), rel=1e-5)
        assert updates[i]["abs_max"] == pytest.approx(float(du.abs().max()), rel=1e-6)
        assert ratios["value"][i] == pytest.approx(float(du.norm() / w.norm()), rel=1e-5)
    assert updates[2]["exponent_counts"] == exponent_bins(spy.after[4]["2.weight"] - spy.before[4]["2.weight"])


def test_a_steps_update_counts_the_loops_own_changes_up_to_the_next_training_forward(tmp_path):
    """A step's weights and update are read at the next training forward, on the helper
    thread (held here until the optimizer step has to wait for it, before the weights
    change): a WGAN's clamp after step() is part of the update; weights swapped in for an
    evaluation under no_grad (an EMA's) are not."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    spy = Spy(model, opt)
    run = ts.init(tmp_path, "clamp")
    watcher = run.watch(model, opt, weights_every=1)
    helper = watcher._helper()
    seen = []  # what each training forward sees
    data = batches(4)
    for x, y in run.data(data):
        seen.append(model[2].weight.detach().clone())
        opt.zero_grad()
        helper.pause()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        threading.Timer(0.2, helper.resume).start()
        opt.step()
        with torch.no_grad():
            for p in model.parameters():
                p.clamp_(-0.15, 0.15)
            trained = model[2].weight.clone()
            model[2].weight.fill_(3.0)
            model.eval()
            model(x)
            model.train()
            model[2].weight.copy_(trained)
    run.finish()
    seen.append(model[2].weight.detach().clone())
    assert any(float(after["2.weight"].abs().max()) > 0.15 for after in spy.after)  # the clamp mattered
    view = ts.open_run(tmp_path / "clamp")
    weights, updates = view.tensor_stats("weight/2.weight"), view.tensor_stats("update/2.weight")
    assert [s["step"] for s in weights] == [s["step"] for s in updates] == [0, 1, 2, 3]
    for i in range(4):
        assert weights[i]["l2_norm"] == pytest.approx(float(seen[i + 1].double().norm()), rel=1e-6)
        assert weights[i]["abs_max"] == pytest.approx(float(seen[i + 1].abs().max()))
        assert updates[i]["l2_norm"] == pytest.approx(float((seen[i + 1] - seen[i]).double().norm()), rel=1e-5)


def test_activation_dead_fraction_and_saturation(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 4), torch.nn.Sigmoid())
    with torch.no_grad():
        model[0].bias[:5] = -100.0   # units 0-4 never fire: 5/16 dead
        model[2].weight.mul_(20.0)   # tanh driven into its tails
    captured = {}
    for i in (1, 3, 5):
        model[i].register_forward_hook(lambda m, a, out, i=i: captured.setdefault(i, []).append(out.detach().clone()))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    run = ts.init(tmp_path, "a")
    run.watch(model, opt, activations_every=1)
    for x, y in run.data(batches(2)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), torch.zeros(16, 4)).backward()
        opt.step()
    run.finish()
    view = ts.open_run(tmp_path / "a")
    relu = view.tensor_stats("act/1")
    direct_dead = float(((captured[1][0] != 0).sum(dim=0) == 0).double().mean())
    assert direct_dead >= 5 / 16
    assert relu[0]["dead_fraction"] == pytest.approx(direct_dead)
    tanh = view.tensor_stats("act/3")[1]
    assert tanh["saturated_fraction"] == pytest.approx(float((captured[3][1].abs() > 0.99).double().mean()))
    assert tanh["saturated_fraction"] > 0.3
    sig = view.tensor_stats("act/5")[0]
    out = captured[5][0]
    assert sig["saturated_fraction"] == pytest.approx(float(((out < 0.01) | (out > 0.99)).double().mean()))
    assert "dead_fraction" not in view.tensor_stats("act/0")[0] or \
        view.tensor_stats("act/0")[0]["dead_fraction"] is None
    lin = view.tensor_stats("act/2")[1]
    assert lin["l2_norm"] == pytest.approx(float(model[2](model[1](model[0](batches(2)[1][0]))).norm()), rel=1e-5)
    assert json.loads(view.meta["extra"]["module_order"]) == ["0", "1", "2", "3", "4", "5"]


def test_the_helper_thread_takes_no_reference_per_step(tmp_path):
    """The helper's passes log into the run's recorder: a reference taken per submitted
    pass (pybind11's keep_alive on a method call) would never be dropped, a leak per step."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "refs")
    run.watch(model, opt, weights_every=1)
    counts = []
    for x, y in run.data(batches(40)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        counts.append(sys.getrefcount(run._recorder))
    run.finish()
    assert len(ts.open_run(tmp_path / "refs").tensor_stats("grad/0.weight")) == 40  # the helper's passes ran
    assert counts[-1] == counts[4]


def test_activations_outlive_a_late_helper_pass(tmp_path):
    """The helper thread measures the outputs late (held here until the training thread
    waits for it at the optimizer step, when backward has long freed them): trainscope
    must keep them until its pass is done. Freed, a small tensor's first values hold the
    allocator's free-list pointers by the time the pass reads it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        model[0].bias[:5] = -100.0  # units 0-4 never fire
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the outputs can be recomputed after
    run = ts.init(tmp_path, "late")
    watcher = run.watch(model, opt, activations_every=1)
    helper = watcher._helper()
    data = batches(4)
    for x, y in run.data(data):
        opt.zero_grad()
        helper.pause()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        threading.Timer(0.2, helper.resume).start()  # while the step waits for the pass
        opt.step()
    run.finish()
    relu = ts.open_run(tmp_path / "late").tensor_stats("act/1")
    assert len(relu) == 4
    for s, (x, _) in zip(relu, data):
        with torch.no_grad():
            out = model[1](model[0](x))
        assert s["dead_fraction"] == pytest.approx(float(((out != 0).sum(dim=0) == 0).double().mean()))
        assert s["zeros"] == int((out == 0).sum())
        assert s["l2_norm"] == pytest.approx(float(out.double().norm()), rel=1e-6)


def test_activation_changed_in_place_later_is_not_misread(tmp_path):
    # Activation passes run on a helper thread while the forward goes on. An in-place ReLU
    # then rewrites the Linear's output under it: that statistic is dropped at the first
    # sampled forward, and the module is measured at once from then on, so it shows the
    # Linear's own (pre-ReLU, partly negative) output.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(inplace=True), torch.nn.Linear(64, 4))
    captured = []
    model[0].register_forward_hook(lambda m, a, out: captured.append(out.detach().clone()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "inplace")
    watcher = run.watch(model, opt, activations_every=1)
    for x, y in run.data(batches(4)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run.finish()
    assert watcher._act_in_place == {"0"}
    linear = ts.open_run(tmp_path / "inplace").tensor_stats("act/0")
    assert [s["step"] for s in linear] == [1, 2, 3]
    for s in linear:
        out = captured[s["step"]].double()
        assert s["min"] == pytest.approx(float(out.min())) and s["min"] < 0
        assert s["l2_norm"] == pytest.approx(float(out.norm()), rel=1e-6)
    relu = ts.open_run(tmp_path / "inplace").tensor_stats("act/1")
    assert [s["step"] for s in relu] == [0, 1, 2, 3]  # nothing changes the ReLU's output after it


def test_outputs_of_a_forward_that_raised_keep_their_step(tmp_path):
    # A forward's small outputs wait in one batch for the helper until the forward ends; one
    # that raises never ends, and its batch is submitted at the step's end: its statistics
    # belong to the step whose forward made them, and the next step's are its own.
    class FailsOnce(torch.nn.Module):
        failed = False

        def forward(self, x):
            if not self.failed and torch.is_grad_enabled() and FailsOnce.at_step:
                FailsOnce.at_step -= 1
                if FailsOnce.at_step == 0:
                    self.failed = True
                    raise RuntimeError("a bad batch")
            return x

    FailsOnce.at_step = 2  # the second training forward (step 1) raises
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), FailsOnce(), torch.nn.Linear(32, 4))
    run = ts.init(tmp_path, "raised")
    run.watch(model, activations_every=1)  # no optimizer: run.data()'s batches are the steps
    for x, y in run.data(batches(4)):
        model.zero_grad()
        try:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        except RuntimeError:
            continue  # the loop skips the bad batch
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
    run.finish()
    steps = [s["step"] for s in ts.open_run(tmp_path / "raised").tensor_stats("act/0")]
    assert steps == [0, 1, 2, 3]


def test_lr_grad_zeroed_labels_and_data_wait(tmp_path):
    import time

    model = mlp()
    opt = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.1},
                           {"params": model[2].parameters(), "lr": 0.01}])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    run = ts.init(tmp_path, "l")
    run.watch(model, opt)

    def slow(data):
        for i, b in enumerate(data):
            time.sleep(0.25 if i == 2 else 0.0)
            yield b

    data = batches(4)
    data[1] = (data[1][0], torch.full((16,), 3))
    data[1][1][0] = 7  # out of range for 4 classes: the range shows it
    for step, (x, y) in enumerate(run.data(slow(data))):
        if step != 2:  # step 2 forgets zero_grad
            opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y.clamp(max=3)).backward()
        opt.step()
        sched.step()
    run.finish()
    view = ts.open_run(tmp_path / "l")
    np.testing.assert_allclose(view.scalars("opt/lr/0")["value"], [0.1, 0.05, 0.025, 0.0125])
    np.testing.assert_allclose(view.scalars("opt/lr/1")["value"], [0.01, 0.005, 0.0025, 0.00125])
    assert list(view.scalars("train/grad_zeroed")["value"]) == [1, 1, 0, 1]
    assert list(view.scalars("input/label_max")["value"]) == [int(b[1].max()) for b in data]
    assert list(view.scalars("input/label_min")["value"]) == [int(b[1].min()) for b in data]
    wait = view.scalars("time/data")
    assert list(wait["step"]) == [0, 1, 2, 3]
    assert wait["value"][2] >= 0.24 and max(wait["value"][[0, 1, 3]]) < 0.2  # loaded CI machines
    phases = {s["phase"] for s in view.spans()}
    assert {"data", "forward", "backward", "optimizer"} <= phases
    assert len(view.scalars("time/step")["value"]) == 4


class SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: a backward of known length."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.05)
        return grad


def test_phase_times_split_forward_backward_and_the_data_wait(tmp_path):
    """Two micro-batches per optimizer step: each backward sleeps 0.05 s, each forward
    0.03 s, and the second batch's fetch 0.15 s, which must not count as backward."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, x):
            time.sleep(0.03)
            return SlowBackward.apply(self.net(x))

    def slow(data):
        for i, b in enumerate(data):
            time.sleep(0.15 if i % 2 else 0.0)
            yield b

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "phases")
    run.watch(model, opt, accumulation_steps=2)
    opt.zero_grad()
    for i, (x, y) in enumerate(run.data(slow(batches(4)))):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if i % 2:
            opt.step()
            opt.zero_grad()
    run.finish()
    view = ts.open_run(tmp_path / "phases")
    backward, forward = view.scalars("time/backward"), view.scalars("time/forward")
    data = view.scalars("time/data")
    assert list(backward["step"]) == [0, 1] and list(forward["step"]) == [0, 1]
    assert (backward["value"] >= 0.10).all() and (backward["value"] < 0.22).all()  # 0.25 with the fetch in it
    assert (forward["value"] >= 0.06).all() and (forward["value"] < 0.10 + 0.1).all()
    assert (data["value"] >= 0.15).all()


@pytest.mark.parametrize("scheduler_first", [False, True])
def test_lr_schedulers_wrap_the_watched_optimizer(tmp_path, scheduler_first):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    run = ts.init(tmp_path, "sched")
    if scheduler_first:
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
        run.watch(model, opt)
    else:
        run.watch(model, opt)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()" must not fire
        for x, y in run.data(batches(3)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    run.finish()
    assert list(ts.open_run(tmp_path / "sched").scalars("opt/lr")["value"]) == [1.0, 0.5, 0.25]
    # After finish the optimizer still steps, and nothing more is recorded.
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(batches(1)[0][0]), batches(1)[0][1]).backward()
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    ours = getattr(getattr(opt.step, "__func__", None), "__qualname__", "").startswith("Watcher._wrap")
    # Scheduler first: ours was outermost and is removed. Scheduler after: its wrapper holds
    # ours, which stays in the chain, inert.
    assert ours is False


def test_evaluation_after_the_step_stays_on_that_step(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "eval")
    run.watch(model, opt)
    data = batches(3)
    for x, y in data:  # no run.data(): the optimizer marks the steps
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            val = torch.nn.functional.cross_entropy(model(data[0][0]), data[0][1])
        model.train()
        run.log({"train/loss": loss, "val/loss": val})
    run.finish()
    view = ts.open_run(tmp_path / "eval")
    assert list(view.scalars("val/loss")["step"]) == [0, 1, 2]
    assert list(view.scalars("train/loss")["step"]) == [0, 1, 2]
    assert [s["step"] for s in view.tensor_stats("grad/0.weight")] == [0, 1, 2]
    # The evaluation forward (no_grad) is not measured: one input and one activation
    # point per step, the training batch's.
    inputs = view.tensor_stats("input/0")
    assert [s["step"] for s in inputs] == [0, 1, 2]
    assert inputs[1]["numel"] == data[1][0].numel() and inputs[1]["mean"] == pytest.approx(float(data[1][0].mean()))
    assert [s["step"] for s in view.tensor_stats("act/0")] == [0]  # activations every 20 steps


# An input is measured with the gradient pass on the helper thread (a torch.optim
# optimizer), or without it (guard mode) by a job of its own on the helper beside the forward.
@pytest.mark.parametrize("rows, guard", [(16, False), (16, True), (40000, True)])
def test_input_statistics_count_non_finite_values(tmp_path, rows, guard):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    run = ts.init(tmp_path, "inputs")
    run.watch(model, opt, guard=guard)
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(rows, 8, generator=g) for _ in range(3)]
    xs[1][0, 0] = float("nan")
    xs[1][rows - 1, 3] = float("-inf")
    steps_on_sum(model, opt, xs)
    run.finish()
    inputs = ts.open_run(tmp_path / "inputs").tensor_stats("input/0")
    assert [s["step"] for s in inputs] == [0, 1, 2]
    assert [(s["nan"], s["inf"]) for s in inputs] == [(0, 0), (1, 1), (0, 0)]
    for s, x in zip(inputs, xs):
        finite = x[torch.isfinite(x)].double()
        assert s["numel"] == x.numel()
        assert s["l2_norm"] == pytest.approx(float(finite.norm()), rel=1e-6)
        assert s["abs_max"] == pytest.approx(float(finite.abs().max()))


def test_an_input_the_forward_changes_in_place_is_measured_before_it(tmp_path):
    """An input is measured at the optimizer step with the gradient pass; a forward that
    changed it in place (version moved) has left no trace of its values: that step's
    statistics are dropped, and from then on the input is measured in the pre-hook."""

    class Doubling(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()

        def forward(self, x):
            return self.net(x.mul_(2.0))

    model = Doubling()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "doubling")
    run.watch(model, opt)
    xs = [x for x, _ in batches(3)]
    originals = [x.clone() for x in xs]
    steps_on_sum(model, opt, xs)
    run.finish()
    inputs = ts.open_run(tmp_path / "doubling").tensor_stats("input/0")
    assert [s["step"] for s in inputs] == [1, 2]
    for s, x in zip(inputs, originals[1:]):
        assert s["l2_norm"] == pytest.approx(float(x.double().norm()), rel=1e-6)


def test_watch_does_not_change_the_training(tmp_path):
    plain_model = mlp()
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-2)
    for x, y in batches(6):
        plain_opt.zero_grad()
        torch.nn.functional.cross_entropy(plain_model(x), y).backward()
        plain_opt.step()
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    run = ts.init(tmp_path, "same")
    train(run, model, opt, batches(6), histograms_every=1, weights_every=1, activations_every=1, units_every=1)
    for a, b in zip(plain_model.parameters(), model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device_path", [False, True])
def test_guard_skips_non_finite_steps_and_keeps_weights(tmp_path, device_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "guard")
    watcher = run.watch(model, opt, guard=True, every=2)
    watcher._force_device_path = device_path  # True: the accelerator path's synchronous verdict
    data = batches(4)
    data[1][0][3, 2] = float("nan")  # a poisoned batch at step 1 (not a stats step)
    weights = []
    for x, y in run.data(data):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        weights.append((before, [p.detach().clone() for p in model.parameters()]))
    run.finish()
    before, after = weights[1]
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # step 1 skipped
    assert all(torch.isfinite(p).all() for p in model.parameters())
    view = ts.open_run(tmp_path / "guard")
    assert list(view.scalars("guard/skipped_step")["value"]) == [0, 1, 0, 0]
    grad_steps = [s["step"] for s in view.tensor_stats("grad/0.weight")]
    assert 1 in grad_steps  # the bad step's gradients are recorded for the doctor
    assert view.tensor_stats("grad/0.weight")[grad_steps.index(1)]["nan"] > 0
    # Activations are sampled every 40 steps here, and on the step after the NaN gradients.
    assert [s["step"] for s in view.tensor_stats("act/0")] == [0, 2]


def test_device_packing_matches_the_cpu_pass():
    """The accelerator path's reductions, run on CPU tensors, against the C++ pass."""
    torch.manual_seed(3)
    tensors = [torch.randn(7, 5), torch.randn(13) * 1e-3, torch.randn(3, 2, 2)]
    tensors[1][4] = float("nan")
    tensors[2][0, 0, 0] = float("inf")
    tensors[0][1, 1] = 0.0
    packed, layout = ts_watch.pack_device_stats(tensors, histogram=True, units=True)
    stats, hist, unit_norms, ratios = ts_watch.unpack_device_stats(packed, layout)
    for i, t in enumerate(tensors):
        finite = t[torch.isfinite(t)].double()
        assert stats[i, 0] == t.numel()
        assert stats[i, 1] == int(torch.isnan(t).sum())
        assert stats[i, 2] == int(torch.isinf(t).sum())
        assert stats[i, 3] == int((t == 0).sum())
        assert float(stats[i, 4]) == pytest.approx(float(finite.min()))
        assert float(stats[i, 5]) == pytest.approx(float(finite.max()))
        assert float(stats[i, 6]) == pytest.approx(float(finite.sum()), abs=1e-9)
        assert float(stats[i, 7]) == pytest.approx(float(finite.pow(2).sum()))
        assert hist[i].long().tolist() == exponent_bins(t)
    np.testing.assert_allclose(unit_norms[0].numpy(), tensors[0].double().norm(dim=1).numpy())
    assert unit_norms[1] is None
    assert ratios is None


def test_device_activation_extras_on_cpu_tensors():
    out = torch.relu(torch.randn(6, 10))
    out[:, 3] = 0
    row = ts_watch._device_activation(out, ts_watch._DEAD_UNITS)
    assert float(row[8]) == pytest.approx(float(((out != 0).sum(dim=0) == 0).double().mean()))
    t = torch.tanh(torch.randn(100) * 5)
    row = ts_watch._device_activation(t, ts_watch._TANH)
    assert float(row[9]) == pytest.approx(float((t.abs() > 0.99).double().mean()))
    assert math.isnan(float(row[8]))


def test_classification_metrics_on_imbalanced_classes(tmp_path):
    run = ts.init(tmp_path, "cls")
    targets = torch.tensor([0] * 8 + [1, 2])
    predicted = torch.tensor([0] * 8 + [0, 2])
    logits = torch.nn.functional.one_hot(predicted, 3).float()
    run.log_classification(logits[:5], targets[:5], prefix="val")
    run.log_classification(logits[5:], targets[5:], prefix="val")  # same step: accumulates
    run.finish()
    view = ts.open_run(tmp_path / "cls")
    assert view.scalars("val/acc")["value"][0] == pytest.approx(0.9)
    assert view.scalars("val/recall/1")["value"][0] == 0.0
    assert view.scalars("val/precision/0")["value"][0] == pytest.approx(8 / 9)
    f1_0 = 2 * (8 / 9) * 1.0 / (8 / 9 + 1.0)
    assert view.scalars("val/macro_f1")["value"][0] == pytest.approx((f1_0 + 0.0 + 1.0) / 3)
    (step, confusion), = view.vectors("val/confusion")
    assert confusion.reshape(3, 3).tolist() == [[8, 0, 0], [1, 0, 0], [0, 0, 1]]


def test_explicit_steps_without_optimizer(tmp_path):
    model = mlp()
    run = ts.init(tmp_path, "explicit")
    run.watch(model, activations=False)
    for x, y in batches(3):
        with run.step():
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
            run.log({"train/x": 1.0})
    run.finish()
    view = ts.open_run(tmp_path / "explicit")
    assert list(view.scalars("train/x")["step"]) == [0, 1, 2]
    assert [s["step"] for s in view.tensor_stats("grad/0.weight")] == [0, 1, 2]
    assert len(view.scalars("time/forward")["value"]) == 3


def test_each_rank_records_into_its_own_store(tmp_path):
    """Two gloo ranks, name=None: rank 0 names the run, both record under it."""
    import socket
    import subprocess
    import sys

    from conftest import child_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"""
import sys, torch, torch.distributed as dist, trainscope as ts
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=rank, world_size=2)
run = ts.init({str(tmp_path)!r})
run.log({{"train/loss": float(rank)}})
run.finish()
dist.destroy_process_group()
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], env=child_env(), stderr=subprocess.PIPE,
                              text=True) for r in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    for rank in (0, 1):
        view = ts.open_run(run_dir / f"rank-{rank}")
        assert view.meta["extra"]["rank"] == str(rank)
        assert view.meta["extra"]["world_size"] == "2"
        assert list(view.scalars("train/loss")["value"]) == [float(rank)]


def test_memory_census_and_system_metrics(tmp_path):
    import time

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "mem")
    run.watch(model, opt, census_every=1, census_budget=None, system_interval=0.05)
    leak = []
    for x, y in run.data(batches(5)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        leak.append(torch.zeros(1000))  # one tensor leaked per step
        time.sleep(0.03)
    run.finish()
    view = ts.open_run(tmp_path / "mem")
    tensors = view.scalars("census/torch.Tensor")
    assert list(tensors["step"]) == [0, 1, 2, 3, 4]  # no budget: every census_every steps
    assert tensors["value"][-1] - tensors["value"][0] >= 4  # the four leaked after step 0 show up
    own, step_time = view.scalars("time/watch"), view.scalars("time/step")
    assert list(own["step"]) == [0, 1, 2, 3, 4]
    assert ((own["value"] > 0) & (own["value"] < step_time["value"])).all()
    rss = view.scalars("mem/rss")  # read on the helper thread, beside the optimizer step
    assert list(rss["step"]) == [0, 1, 2, 3, 4] and (rss["value"] > 1e6).all()
    cpu = view.scalars("sys/cpu_percent")["value"]
    assert len(cpu) >= 1 and ((cpu >= 0) & (cpu <= 100)).all()
    assert (view.scalars("sys/rss")["value"] > 1e6).all()


def test_a_step_longer_than_the_rss_age_reads_its_own_rss(tmp_path):
    # mem/rss may hold a reading younger than _core.step_rss_max_age (fast steps share one);
    # a step that takes longer gets a reading of its own, so 64 MiB touched in a step shows
    # at that step: read by the gradient job (a watched optimizer) or at the step's end (none).
    # The memory is a fresh anonymous mapping: an allocation could reuse pages the process
    # still holds from earlier tests, and leave the RSS where it was.
    import mmap

    from trainscope import _core

    for with_optimizer in (True, False):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        name = f"rss-{with_optimizer}"
        run = ts.init(tmp_path, name)
        run.watch(model, opt if with_optimizer else None)
        held = []
        for i, (x, y) in enumerate(run.data(batches(4))):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if i == 2:
                grown = mmap.mmap(-1, 64 << 20)
                for offset in range(0, 64 << 20, mmap.PAGESIZE):
                    grown[offset] = 1  # every page touched: resident
                held.append(grown)
            time.sleep(2 * _core.step_rss_max_age)
            opt.step()
        run.finish()
        held.pop().close()  # the next case's mapping must be new memory, not these pages again
        rss = ts.open_run(tmp_path / name).scalars("mem/rss")
        assert list(rss["step"]) == [0, 1, 2, 3]
        assert rss["value"][2] - rss["value"][1] >= 48 << 20, (with_optimizer, list(rss["value"]))


def test_census_keeps_to_its_share_of_wall_time(tmp_path):
    # A census (gc.collect() and a pass over every object: milliseconds in this process)
    # every step of a sub-millisecond training would take most of its time; with the budget
    # (1 %) the next one waits ~100x the last one's cost.
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "census")
    run.watch(model, opt, census_every=1)
    for x, y in run.data(batches(30)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run.finish()
    steps = list(ts.open_run(tmp_path / "census").scalars("census/torch.Tensor")["step"])
    assert steps[0] == 0 and len(steps) <= 2, steps  # without the budget: all 30


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "accum")
    spy = Spy(model, opt)
    run.watch(model, opt, accumulation_steps=2)
    for i, (x, y) in enumerate(run.data(batches(6))):
        (torch.nn.functional.cross_entropy(model(x), y) / 2).backward()
        if i % 2 == 1:
            opt.step()
            opt.zero_grad()
    run.finish()
    view = ts.open_run(tmp_path / "accum")
    stats = view.tensor_stats("grad/2.weight")
    assert [s["step"] for s in stats] == [0, 1, 2]  # one step per optimizer step
    for s, grads in zip(stats, spy.grads):
        assert s["l2_norm"] == pytest.approx(float(grads["2.weight"].double().norm()), rel=1e-6)
    assert list(view.scalars("train/grad_zeroed")["value"]) == [1, 1, 1]
    assert json.loads(view.meta["extra"]["watch"])["accumulation_steps"] == 2
    assert list(view.scalars("time/data")["step"]) == [0, 1, 2]  # two batches' wait per step


def test_compiled_model_keeps_step_level_statistics(tmp_path, capfd):
    """A torch.compile'd model (an OptimizedModule: `_orig_mod`; torch 2.x) has no
    activation hooks; everything outside the graph is still recorded. torch 1.13 has no
    torch.compile, so a module of that shape stands in for it here."""

    class Compiled(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

        def forward(self, x):
            return self._orig_mod(x)

    model = Compiled(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "compiled")
    run.watch(model, opt, activations_every=1)
    for x, y in run.data(batches(2)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run.finish()
    assert "activation statistics are off" in capfd.readouterr().err
    tags = {s["tag"] for s in ts.open_run(tmp_path / "compiled").series()}
    assert not any(t.startswith("act/") for t in tags)
    assert {"grad/0.weight", "time/forward", "time/backward", "opt/lr"} <= tags  # the model's own names


def test_a_parameter_replaced_by_one_of_another_size_is_read_at_its_new_size(tmp_path):
    """The passes' per-parameter plans are checked each step: `p.data = smaller` (pruning)
    must not make them read the old size past the new tensor's end."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp()
            self.scale = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            return self.net(x) * self.scale

    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "resized")
    run.watch(model, opt, weights_every=1)
    norms = []
    for step, (x, y) in enumerate(run.data(batches(5))):
        if step == 3:
            with torch.no_grad():
                model.scale.data = torch.full((1,), 0.5)
                model.scale.grad = None
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()  # no graph kept past the step
        norms.append(float(model.scale.grad.double().norm()))
        opt.step()
    run.finish()
    view = ts.open_run(tmp_path / "resized")
    grads, weights = view.tensor_stats("grad/scale"), view.tensor_stats("weight/scale")
    assert [s["numel"] for s in grads] == [4, 4, 4, 1, 1]
    # A step's weights are read at the next training forward: step 2's after the replacement.
    assert [s["numel"] for s in weights] == [4, 4, 1, 1, 1]
    assert [s["l2_norm"] for s in grads] == pytest.approx(norms, rel=1e-6)
    assert weights[-1]["mean"] == pytest.approx(float(model.scale))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_conv_channels_dead_fraction_and_activation_histogram(tmp_path, memory_format):
    """Dead conv channels and exponent histograms of activations, in both memory formats: a
    channels_last conv's ReLU output is strided, as is an attention-like transpose; the
    helper thread gathers them and the statistics are those of the logical tensor."""

    class Transpose(torch.nn.Module):
        def forward(self, x):
            return x.transpose(0, 1)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                Transpose(), Transpose(), torch.nn.Linear(8 * 6 * 6, 2))
    model = model.to(memory_format=memory_format)
    with torch.no_grad():
        model[0].bias[:3] = -50.0  # channels 0-2 never fire
    captured = {1: [], 3: []}
    for index in captured:
        model[index].register_forward_hook(lambda m, a, out, i=index: captured[i].append(out.detach()))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    run = ts.init(tmp_path, "strided")
    run.watch(model, opt, activations_every=1, histograms_every=1)
    g = torch.Generator().manual_seed(2)
    for _ in run.data(range(2)):
        opt.zero_grad()
        x = torch.randn(4, 3, 6, 6, generator=g).to(memory_format=memory_format)
        model(x).sum().backward()
        opt.step()
    run.finish()
    view = ts.open_run(tmp_path / "strided")
    assert (memory_format == torch.channels_last) == (not captured[1][0].is_contiguous())
    assert not captured[3][0].is_contiguous()
    for s, out in zip(view.tensor_stats("act/1"), captured[1]):
        dead = float(((out != 0).sum(dim=(0, 2, 3)) == 0).double().mean())
        assert dead >= 3 / 8 and s["dead_fraction"] == pytest.approx(dead)
        assert s["zeros"] == int((out == 0).sum())
        assert s["exponent_counts"] == exponent_bins(out)
    for s, out in zip(view.tensor_stats("act/3"), captured[3]):
        assert s["numel"] == out.numel()
        assert s["l2_norm"] == pytest.approx(float(out.double().norm()), rel=1e-6)
        assert s["max"] == pytest.approx(float(out.max()))
        assert s["exponent_counts"] == exponent_bins(out)


def test_accelerator_path_end_to_end_on_cpu_tensors(tmp_path, monkeypatch):
    """The device path (torch reductions packed into one tensor, copied and logged later)
    driven through a real training on CPU tensors, against the C++ path's records."""
    def trained(name, force):
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4), torch.nn.Tanh())
        torch.manual_seed(0)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.5)
        with torch.no_grad():
            model[0].bias[:4] = -100.0
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        run = ts.init(tmp_path, name)
        watcher = run.watch(model, opt, histograms_every=2, activations_every=1, weights_every=1, units_every=2)
        watcher._force_device_path = force
        for x, y in run.data(batches(4)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        run.finish()
        return ts.open_run(tmp_path / name)

    host, device = trained("host", False), trained("device", True)
    for tag in ("grad/0.weight", "grad/2.bias", "weight/2.weight", "update/0.weight", "act/1", "act/3", "input/0"):
        a, b = host.tensor_stats(tag), device.tensor_stats(tag)
        assert [s["step"] for s in a] == [s["step"] for s in b], tag
        for sa, sb in zip(a, b):
            for key in ("numel", "nan", "inf", "zeros"):
                assert sa[key] == sb[key], (tag, key)
            for key in ("min", "max", "l2_norm", "abs_max"):
                assert sa[key] == pytest.approx(sb[key], rel=1e-6, abs=1e-12), (tag, key)
            assert sa.get("exponent_counts") == sb.get("exponent_counts"), tag
            for key in ("dead_fraction", "saturated_fraction"):
                assert (sa.get(key) is None) == (sb.get(key) is None), (tag, key)
                if sa.get(key) is not None:
                    assert sa[key] == pytest.approx(sb[key]), (tag, key)
    np.testing.assert_allclose(host.scalars("grad/global_norm")["value"], device.scalars("grad/global_norm")["value"],
                               rtol=1e-6)
    np.testing.assert_allclose(host.scalars("update_ratio/2.weight")["value"],
                               device.scalars("update_ratio/2.weight")["value"], rtol=1e-5)
    a, b = host.vectors("grad_units/0.weight"), device.vectors("grad_units/0.weight")
    assert [step for step, _ in a] == [step for step, _ in b] == [0, 2]
    for (_, ua), (_, ub) in zip(a, b):
        np.testing.assert_allclose(ua, ub, rtol=1e-5)


def test_gradients_from_inside_backward_equal_param_grad(tmp_path):
    """In-backward statistics are used only when they are param.grad's; a step without
    zero_grad (accumulated gradients) falls back to reading param.grad. Both runs must
    record the same numbers."""
    def record(name, hot):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        run = ts.init(tmp_path, name)
        watcher = run.watch(model, opt, hot_gradients=hot, histograms_every=1, units_every=1)
        for step, (x, y) in enumerate(run.data(batches(4))):
            if step != 2:
                opt.zero_grad(set_to_none=step % 2 == 1)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        run.finish()
        return ts.open_run(tmp_path / name), watcher.hot_steps

    (hot, used), (cold, unused) = record("hot", True), record("cold", False)
    assert used == 3 and unused == 0  # step 2 accumulated onto step 1's gradients: read at the step
    for tag in ("grad/0.weight", "grad/0.bias", "grad/2.weight"):
        a_all, b_all = hot.tensor_stats(tag), cold.tensor_stats(tag)
        assert [s["step"] for s in a_all] == [s["step"] for s in b_all] == [0, 1, 2, 3]
        for a, b in zip(a_all, b_all):
            a.pop("wall_time"), b.pop("wall_time")
            # pytest 9's approx refuses a list inside a dict: the histograms are compared apart.
            assert a.pop("exponent_counts") == b.pop("exponent_counts"), tag
            assert a == pytest.approx(b, rel=1e-12), tag
    np.testing.assert_array_equal(hot.scalars("grad/global_norm")["value"], cold.scalars("grad/global_norm")["value"])
    for (sa, ua), (sb, ub) in zip(hot.vectors("grad_units/0.weight"), cold.vectors("grad_units/0.weight")):
        assert sa == sb
        np.testing.assert_array_equal(ua, ub)


def test_a_sequentials_batchnorm_scale_is_no_constant_init_but_constant_linears_are(tmp_path):
    """nn.Sequential names its parameters "1.weight": the watcher records the module types
    and parameter shapes, so the doctor (online and offline) knows "1.weight" is a
    BatchNorm's scale, which starts at ones by design, and a vector scale is no symmetry."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4))
    with torch.no_grad():  # constant matrices: the 16 hidden units compute alike and stay alike
        model[4].weight.fill_(0.01)
        model[6].weight.fill_(0.02)
    # A small lr keeps the BatchNorm's scale at ones (to 1e-7) when its weights are first read.
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    run = ts.init(tmp_path, "seq")
    run.watch(model, opt)
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(5)]
    for x, y in run.data(data):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run.finish()
    meta = ts.open_run(tmp_path / "seq").meta["extra"]
    assert json.loads(meta["module_types"])["1"] == "BatchNorm2d"
    assert json.loads(meta["param_shapes"])["4.weight"] == [16, 512]
    for findings in (run.findings, ts.diagnose(tmp_path / "seq")["findings"]):
        assert not [f for f in findings if f["location"] in ("1", "1.weight")], findings
        constant = [f for f in findings if f["code"] in ("WEIGHT_SYMMETRY", "ARCHITECTURE_WARNING")]
        assert [f["location"] for f in constant] in (["4"], ["4.weight"]), findings


class CountingWorker:
    """The host worker with its submits counted per run step (what the helper is handed)."""

    def __init__(self, worker, run):
        self.worker, self.run, self.calls = worker, run, []

    def __getattr__(self, name):
        attr = getattr(self.worker, name)
        if not name.startswith("submit_"):
            return attr

        def submit(*args, **kwargs):
            self.calls.append((self.run._step, name))
            return attr(*args, **kwargs)
        return submit


def test_a_step_of_the_defaults_hands_the_helper_one_job(tmp_path):
    # Gradients, the model's input, lr, grad_zeroed and RSS go in one job; the weight pass and
    # snapshot (every 10th step) and activations (every 20th) add theirs on their steps only.
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "one-job")
    watcher = run.watch(model, opt)
    counting = CountingWorker(watcher._host_executor().worker, run)
    watcher._host_executor().worker = counting
    for x, y in run.data(batches(80)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    run.finish()
    per_step = {}
    for step, name in counting.calls:
        per_step.setdefault(step, []).append(name)
    for step in range(52, 80):  # past the dense first 50 steps (51 starts step 50's weight pass)
        if step % 10 not in (0, 1):  # a weight step copies its snapshot; the next starts its pass
            assert per_step[step] == ["submit_gradients"], (step, per_step[step])
    assert per_step[60].count("submit_copies") == 1 and "submit_activations" in per_step[60]
    assert per_step[61] == ["submit_weights", "submit_gradients"]
    view = ts.open_run(tmp_path / "one-job")
    assert len(view.tensor_stats("input/0")) == 80 and len(view.scalars("grad/global_norm")["step"]) == 80
    assert len(view.scalars("opt/lr")["step"]) == 80 and len(view.scalars("mem/rss")["step"]) == 80


def test_the_step_returns_before_the_gradient_pass_is_done(tmp_path):
    # The pass is waited for where the gradients change next (zero_grad, the next forward), not
    # at the step's end: with the helper paused, optimizer.step() still returns.
    import threading
    import time

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "late-wait")
    watcher = run.watch(model, opt, dense_steps=0)  # step 2 has no weight job to wait for
    data = batches(3)
    for x, y in data[:2]:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    worker = watcher._helper()
    worker.wait_all()  # step 1's pass done: only step 2's is held
    worker.pause()
    opt.zero_grad()
    x, y = data[2]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    threading.Timer(2.0, worker.resume).start()
    started = time.perf_counter()
    opt.step()  # waiting here, it would return only once the helper resumes
    assert time.perf_counter() - started < 1.5
    assert watcher._grad_ticket is not None and not watcher._grad_ticket.done()
    opt.zero_grad()  # waits for the pass, then zeroes
    run.finish()
    last = ts.open_run(tmp_path / "late-wait").tensor_stats("grad/0.weight")[-1]
    assert last["l2_norm"] == pytest.approx(float(grads[0].norm()), rel=1e-5)
