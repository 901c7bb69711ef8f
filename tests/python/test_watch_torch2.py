"""run.watch() with torch 2.x's features: torch.compile, autocast with GradScaler, foreach
and fused optimizers, optimizer step hooks, DDP's no_sync accumulation.

Each test trains a real model and compares what trainscope stored with torch's own
numbers (or with an eager twin's records). What torch 1.13 lacks is skipped there; the
rest runs on both torches.
"""

import json
import math
import os
import pickle
import socket

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from conftest import run_cli  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
needs_torch2 = pytest.mark.skipif(not TORCH2, reason="torch 2.x feature")
CPU_GRAD_SCALER = TORCH2 and hasattr(torch.amp, "GradScaler")
SCALAR_STATS = ("numel", "nan", "inf", "zeros", "min", "max", "mean", "std", "l2_norm", "abs_max")


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def batches(n, seed=1, batch=16):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 8, generator=g), torch.randint(0, 4, (batch,), generator=g)) for _ in range(n)]


def assert_matches(stats, tensor, rel=1e-6):
    """One stored TensorStats against torch's own reductions of the same tensor."""
    t = tensor.detach().double()
    assert stats["numel"] == t.numel()
    assert stats["nan"] == int(torch.isnan(t).sum()) and stats["inf"] == int(torch.isinf(t).sum())
    assert stats["l2_norm"] == pytest.approx(float(t.norm()), rel=rel)
    assert stats["min"] == pytest.approx(float(t.min()), rel=rel, abs=1e-12)
    assert stats["max"] == pytest.approx(float(t.max()), rel=rel, abs=1e-12)
    assert stats["mean"] == pytest.approx(float(t.mean()), rel=rel, abs=rel * float(t.abs().mean()))


def scalars(view, tag):
    got = view.scalars(tag)
    return list(zip(got["step"].tolist(), got["value"].tolist()))


# ---- optimizers: foreach, fused, step hooks ----

OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, foreach=True)),
    ("Adam", dict(lr=1e-2, foreach=True)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.1, foreach=True)),
    pytest.param("Adam", dict(lr=1e-2, fused=True), marks=needs_torch2),
    pytest.param("AdamW", dict(lr=1e-2, weight_decay=0.1, fused=True), marks=needs_torch2),
    pytest.param("SGD", dict(lr=0.1, momentum=0.9, fused=True), marks=needs_torch2),
]


@pytest.mark.parametrize("name, options", OPTIMIZERS)
def test_foreach_and_fused_optimizers_record_torchs_numbers(tmp_path, name, options):
    model = mlp()
    try:
        opt = getattr(torch.optim, name)(model.parameters(), **options)
    except (RuntimeError, TypeError, ValueError) as error:  # this torch lacks the implementation on CPU
        pytest.skip(f"{name}({options}): {error}")
    grads, before, after = [], [], []
    run = ts.init(tmp_path, "opt")
    run.watch(model, opt, weights_every=1, histograms_every=0)
    for x, y in run.data(batches(4)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        before.append({n: p.detach().clone() for n, p in model.named_parameters()})
        opt.step()
        after.append({n: p.detach().clone() for n, p in model.named_parameters()})
    run.finish()
    view = ts.open_run(tmp_path / "opt")
    for param in ("0.weight", "0.bias", "2.weight"):
        g, w, u = view.tensor_stats("grad/" + param), view.tensor_stats("weight/" + param), \
            view.tensor_stats("update/" + param)
        assert [s["step"] for s in g] == [s["step"] for s in w] == [s["step"] for s in u] == [0, 1, 2, 3]
        for step in range(4):
            assert_matches(g[step], grads[step][param])
            assert_matches(w[step], after[step][param])
            # The update: w_t - w_{t-1}, as the optimizer changed it (float32 difference).
            assert_matches(u[step], after[step][param] - before[step][param], rel=1e-5)
    norms = [v for _, v in scalars(view, "grad/global_norm")]
    direct = [math.sqrt(sum(float(g.double().pow(2).sum()) for g in step.values())) for step in grads]
    assert norms == pytest.approx(direct, rel=1e-6)
    assert [v for _, v in scalars(view, "opt/lr")] == [options["lr"]] * 4


@pytest.mark.parametrize("clip", [False, True])
def test_gradients_from_inside_backward_are_not_used_once_changed_in_place(tmp_path, clip):
    """hot_gradients measures each gradient in backward; clip_grad_norm_ then scales
    param.grad in place: the step must record the clipped gradients (read again), and the
    in-backward ones only when nothing changed them (both torches)."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "hot")
    watcher = run.watch(model, opt, hot_gradients=True)
    grads = []
    for x, y in run.data(batches(3)):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    run.finish()
    assert watcher.hot_steps == (0 if clip else 3)
    view = ts.open_run(tmp_path / "hot")
    for param in ("0.weight", "2.bias"):
        for s, step in zip(view.tensor_stats("grad/" + param), grads):
            assert_matches(s, step[param])


@needs_torch2
def test_step_hooks_leave_optimizer_step_untouched(tmp_path):
    """torch 2.x: watch() uses the optimizer's step hooks; optimizer.step stays torch's
    (LR schedulers wrap it cleanly, the optimizer pickles), and finish() removes the hooks."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    run = ts.init(tmp_path, "hooks")
    watcher = run.watch(model, opt)
    assert "step" not in vars(opt)  # no instance attribute of ours
    assert len(opt._optimizer_step_pre_hooks) == 1 and len(opt._optimizer_step_post_hooks) == 1
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()" must not fire
        for x, y in run.data(batches(3)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    copy = pickle.loads(pickle.dumps(opt))
    assert copy.param_groups[0]["lr"] == 0.125
    run.finish()
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert watcher.closed
    view = ts.open_run(tmp_path / "hooks")
    assert [v for _, v in scalars(view, "opt/lr")] == [1.0, 0.5, 0.25]
    assert [s["step"] for s in view.tensor_stats("grad/0.weight")] == [0, 1, 2]


def test_guard_mode_still_wraps_the_step(tmp_path):
    """A hook cannot skip the step, so guard mode keeps the wrapper (both torches)."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "guard")
    run.watch(model, opt, guard=True)
    assert "step" in vars(opt)
    for i, (x, y) in enumerate(run.data(batches(2))):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if i == 1:
            model[0].weight.grad[0, 0] = float("nan")
        opt.step()
    run.finish()
    assert [v for _, v in scalars(ts.open_run(tmp_path / "guard"), "guard/skipped_step")] == [0.0, 1.0]


# ---- autocast (bfloat16 on CPU) with GradScaler ----

def amp_training(run, steps, inject_from=None, fused=False, init_scale=2.0 ** 16, **watch_options):
    """bfloat16 autocast with a GradScaler; from step inject_from on, one gradient value is
    made infinite in backward (a layer whose gradients overflow), so the scaler skips.
    Returns torch's own view: per step (scale, skipped, unscaled gradients or None)."""
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True if fused else None)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    state = {"step": 0}

    def overflow(grad):
        if inject_from is not None and state["step"] >= inject_from:
            grad = grad.clone()
            grad[0, 0] = float("inf")
        return grad

    model[0].weight.register_hook(overflow)
    run.watch(model, opt, histograms_every=0, **watch_options)
    truth = []
    for step, (x, y) in enumerate(run.data(batches(steps))):
        state["step"] = step
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        unscaled = {n: p.grad.detach().double() / scale for n, p in model.named_parameters()}
        weights = [p.detach().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        # Skipped: the weights did not move (torch's own verdict, not trainscope's).
        skipped = all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
        truth.append((scale, skipped, None if skipped else unscaled))
        run.log({"train/loss": loss})
    run.finish()
    return truth


@pytest.mark.skipif(not CPU_GRAD_SCALER, reason="torch.amp.GradScaler('cpu') is torch 2.x")
@pytest.mark.parametrize("fused, hot", [(False, False), (True, False), (False, True)],
                         ids=["adam", "fused_adam", "in_backward"])
def test_grad_scaler_loss_scale_and_skips_are_recorded(tmp_path, fused, hot):
    # in_backward: statistics taken inside backward are of scaled gradients (unscale_
    # changes them in place later): param.grad is read at the step instead.
    run = ts.init(tmp_path, "amp")
    truth = amp_training(run, 8, inject_from=3, fused=fused, hot_gradients=hot)
    assert [skipped for _, skipped, _ in truth] == [False] * 3 + [True] * 5
    view = ts.open_run(tmp_path / "amp")
    # Every scaler.step is a training step, skipped or not.
    assert scalars(view, "amp/loss_scale") == [(i, scale) for i, (scale, _, _) in enumerate(truth)]
    assert scalars(view, "amp/overflow_skip") == [(i, float(skipped)) for i, (_, skipped, _) in enumerate(truth)]
    assert [step for step, _ in scalars(view, "train/loss")] == list(range(8))
    # Gradients of the steps that updated, unscaled (a fused Adam gets them still scaled
    # and unscales inside its kernel); none for the skipped ones.
    stepped = [i for i, (_, skipped, _) in enumerate(truth) if not skipped]
    for param in ("0.weight", "2.weight", "2.bias"):
        stats = view.tensor_stats("grad/" + param)
        assert [s["step"] for s in stats] == stepped
        for s in stats:
            assert_matches(s, truth[s["step"]][2][param])
    assert [step for step, _ in scalars(view, "grad/global_norm")] == stepped
    # finish() gave torch's GradScaler its own step back.
    assert not hasattr(torch.amp.GradScaler.step, "__wrapped__")


@pytest.mark.skipif(not CPU_GRAD_SCALER, reason="torch.amp.GradScaler('cpu') is torch 2.x")
def test_a_scaler_stepping_an_unwatched_optimizer_is_left_alone(tmp_path):
    """GradScaler.step is wrapped on the class: another optimizer's steps (a GAN's other
    network) go straight through, with the same update as without trainscope."""
    def train(watched_run):
        watched, other = mlp(0), mlp(1)
        opt_w = torch.optim.SGD(watched.parameters(), lr=0.1)
        opt_o = torch.optim.SGD(other.parameters(), lr=0.1)
        scaler_w, scaler_o = torch.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
        if watched_run is not None:
            watched_run.watch(watched, opt_w)
        for x, y in batches(3):
            for model, opt, scaler in ((watched, opt_w, scaler_w), (other, opt_o, scaler_o)):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
        if watched_run is not None:
            watched_run.finish()
        return [p.detach().clone() for p in other.parameters()]

    plain = train(None)
    run = ts.init(tmp_path, "two")
    assert all(torch.equal(a, b) for a, b in zip(train(run), plain))
    view = ts.open_run(tmp_path / "two")
    assert scalars(view, "amp/overflow_skip") == [(0, 0.0), (1, 0.0), (2, 0.0)]
    assert {s["tag"] for s in view.series() if s["tag"].startswith("grad/")} == \
        {"grad/global_norm", "grad/0.weight", "grad/0.bias", "grad/2.weight", "grad/2.bias"}


@pytest.mark.skipif(not CPU_GRAD_SCALER, reason="torch.amp.GradScaler('cpu') is torch 2.x")
def test_fp16_overflow_is_found_from_the_recorded_scaler_and_not_in_a_healthy_run(tmp_path):
    # Skips from step 30 on, after the start where a scaler calibrates: the scale halves
    # at each, down past 1 (the doctor's critical floor).
    sick, healthy = ts.init(tmp_path, "sick"), ts.init(tmp_path, "healthy")
    truth = amp_training(sick, 60, inject_from=30)
    assert sum(skipped for _, skipped, _ in truth) == 30
    amp_training(healthy, 60)
    for name, expect in (("sick", True), ("healthy", False)):
        offline = ts.diagnose(tmp_path / name)
        cli = run_cli("diagnose", tmp_path / name, "--json")
        assert cli.returncode == 0, cli.stderr
        for report in (offline, json.loads(cli.stdout)):
            found = [f for f in report["findings"] if f["code"] == "FP16_OVERFLOW"]
            assert bool(found) == expect, (name, report["findings"])
            if expect:
                assert found[0]["step"] == 30 and found[0]["location"] == "amp/overflow_skip"
                assert found[0]["severity"] == "critical"
                assert found[0]["evidence"]["skipped"] == 30
                assert found[0]["evidence"]["loss_scale"]["min"] == truth[-1][0]


# ---- torch.compile ----

def train_compiled_or_eager(run, backend, steps=4):
    """The same init and data, compiled with `backend` or eager (None); returns losses."""
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    net = torch.compile(model, backend=backend) if backend else model
    if run is not None:
        run.watch(net, opt, weights_every=1, histograms_every=2, units_every=2)
    losses = []
    for x, y in (run.data(batches(steps)) if run is not None else batches(steps)):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if run is not None:
            run.log({"train/loss": loss})
    if run is not None:
        run.finish()
    return losses


def compile_counts():
    from torch._dynamo.utils import counters
    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


@needs_torch2
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_model_records_what_its_eager_twin_records(tmp_path, backend, capfd):
    import torch._dynamo
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    train_compiled_or_eager(None, backend)
    unwatched = compile_counts()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = train_compiled_or_eager(ts.init(tmp_path, "compiled"), backend)
    watched = compile_counts()
    assert watched == unwatched  # no graph break and no graph of watch()'s own
    assert "activation statistics are off" in capfd.readouterr().err
    eager = train_compiled_or_eager(ts.init(tmp_path, "eager"), None)
    assert compiled == pytest.approx(eager, rel=1e-5)
    a, b = ts.open_run(tmp_path / "compiled"), ts.open_run(tmp_path / "eager")
    tags_a = {s["tag"]: s["kind"] for s in a.series()}
    tags_b = {s["tag"]: s["kind"] for s in b.series()}
    # The same names (no "_orig_mod." prefix); the eager twin has activations besides.
    assert {t for t in tags_b if not t.startswith("act/")} - set(tags_a) == set()
    assert not [t for t in tags_a if t.startswith("act/")]
    compared = 0
    for tag, kind in tags_a.items():
        if not tag.startswith(("grad/", "weight/", "update/", "update_ratio/", "train/", "opt/", "input/")):
            continue
        if kind == "tensor_stats":
            sa, sb = a.tensor_stats(tag), b.tensor_stats(tag)
            assert [s["step"] for s in sa] == [s["step"] for s in sb] == [0, 1, 2, 3], tag
            for x, y in zip(sa, sb):
                for key in SCALAR_STATS:
                    # float32 kernels in another order: a few ulps of the values summed
                    assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6 * max(1e-12, y["abs_max"])), (tag, key)
                assert ("exponent_counts" in x) == ("exponent_counts" in y)
        else:
            va, vb = scalars(a, tag), scalars(b, tag)
            assert [s for s, _ in va] == [s for s, _ in vb], tag
            assert [v for _, v in va] == pytest.approx([v for _, v in vb], rel=1e-5), tag
        compared += 1
    assert compared >= 20


@needs_torch2
def test_compiled_optimizer_step_keeps_its_graphs(tmp_path):
    """optimizer.step inside a torch.compile'd function: watch()'s step hooks run outside
    the graph (dynamo's disable), so the step compiles to as many graphs as unwatched."""
    import torch._dynamo

    def train(run):
        model = mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        if run is not None:
            run.watch(model, opt)

        @torch.compile(backend="aot_eager")
        def step():
            opt.step()

        grads = []
        for x, y in batches(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            grads.append(model[0].weight.grad.clone())
            step()
        if run is not None:
            run.finish()
        return grads

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    train(None)
    unwatched_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    grads = train(ts.init(tmp_path, "step"))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == unwatched_graphs
    stats = ts.open_run(tmp_path / "step").tensor_stats("grad/0.weight")
    assert [s["step"] for s in stats] == [0, 1, 2]
    for s, g in zip(stats, grads):
        assert_matches(s, g)


# ---- DDP: gradient accumulation under no_sync ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="no gloo backend")
def test_ddp_no_sync_accumulation_records_once_per_optimizer_step(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0)
    try:
        model = DistributedDataParallel(mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        run = ts.init(tmp_path, "ddp")
        assert os.path.basename(run.dir) == "rank-0"
        run.watch(model, opt, accumulation_steps=4, weights_every=1)
        data = batches(12)
        grads, before, after = [], [], []
        for i, (x, y) in enumerate(run.data(data)):
            last = i % 4 == 3
            if i % 4 == 0:
                opt.zero_grad()
            if last:  # the all-reduce of the accumulated gradients comes with this backward
                (torch.nn.functional.cross_entropy(model(x), y) / 4).backward()
            else:
                with model.no_sync():
                    (torch.nn.functional.cross_entropy(model(x), y) / 4).backward()
            if last:
                grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
                before.append({n: p.detach().clone() for n, p in model.named_parameters()})
                opt.step()
                after.append({n: p.detach().clone() for n, p in model.named_parameters()})
        run.finish()
        view = ts.open_run(run.dir)
    finally:
        dist.destroy_process_group()
    for param in ("module.0.weight", "module.2.bias"):
        g = view.tensor_stats("grad/" + param)
        assert [s["step"] for s in g] == [0, 1, 2]  # one per optimizer step, not per micro-batch
        for s, step in zip(g, grads):
            assert_matches(s, step[param])
        u = view.tensor_stats("update/" + param)
        for s, b, a in zip(u, before, after):
            assert_matches(s, a[param] - b[param], rel=1e-5)
    assert [step for step, _ in scalars(view, "time/data")] == [0, 1, 2]
    assert [v for _, v in scalars(view, "train/grad_zeroed")] == [1.0, 1.0, 1.0]


class _LoggingSGD(torch.optim.SGD):
    """A subclass whose step calls super().step(): torch 2.x runs step hooks once per class."""

    def step(self, closure=None):
        return super().step(closure)


def test_an_optimizer_subclass_is_measured_once_a_step(tmp_path):
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # torch hooks SGD.step itself too
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = _LoggingSGD(model.parameters(), lr=0.1)
    run = ts.init(tmp_path, "sub")
    run.watch(model, optimizer)
    norms = []
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        optimizer.zero_grad()
        model(torch.randn(4, 3, generator=g)).pow(2).sum().backward()
        norms.append(float(model.weight.grad.double().norm()))
        optimizer.step()
        run.log({"train/loss": 1.0})
    run.finish()
    view = ts.open_run(tmp_path / "sub")
    stats = view.tensor_stats("grad/weight")
    assert [s["step"] for s in stats] == [0, 1, 2, 3]
    assert [s["l2_norm"] for s in stats] == pytest.approx(norms, rel=1e-6)
    assert view.scalars("train/loss")["step"].tolist() == [0, 1, 2, 3]
    assert view.scalars("time/optimizer")["step"].tolist() == [0, 1, 2, 3]
