"""The step clock's C++ core (_core.StepCore) and the C++ GuardedHook torch calls.

What moved out of Python (python/trainscope/_watch/clock.py, hooks.py) must record the same
series: the phase spans and time/<phase>, time/step and time/other of each step, and
time/watch; and a hook that fails must switch its part off without raising into the
training, be inert in a copy or a pickle, and not keep a finished watcher alive.
"""

import copy
import gc
import pickle
import sys
import time
import weakref

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from trainscope import _core  # noqa: E402
from trainscope._watch.hooks import INERT_HOOK_EVENT, Failures, Hook  # noqa: E402


def tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)) for _ in range(6)]
    return model, opt, batches


def train(run, model, opt, batches, **options):
    run.watch(model, opt, **options)
    for x, y in run.data(batches):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        run.log({"train/loss": loss})
    run.finish()


def test_each_step_gets_its_phase_times_and_time_other_is_the_rest(tmp_path):
    run = ts.init(tmp_path, "phases")
    train(run, *tiny())
    view = ts.open_run(run.dir)
    series = {p: dict(zip(view.scalars(f"time/{p}")["step"].tolist(), view.scalars(f"time/{p}")["value"].tolist()))
              for p in ("data", "forward", "backward", "optimizer", "step", "other", "watch")}
    assert sorted(series["step"]) == list(range(6))
    for step in range(6):
        phases = sum(series[p][step] for p in ("data", "forward", "backward", "optimizer"))
        assert all(series[p][step] >= 0 for p in series)
        assert series["other"][step] == pytest.approx(max(0.0, series["step"][step] - phases), abs=1e-12)
        assert step in series["watch"]
    spans = view.spans()
    assert {s["phase"] for s in spans} == {"data", "forward", "backward", "optimizer"}
    for s in spans:  # each span's seconds are in its step's time/<phase> (one span a phase here)
        assert series[s["phase"]][s["step"]] == pytest.approx(s["duration"], abs=1e-12)


def test_the_core_sums_a_phase_timed_several_times_and_logs_a_late_one_at_its_step(tmp_path):
    run = ts.init(tmp_path, "core")
    clock = run._step_clock()
    core = clock.core
    run._step = 3
    clock.step_started = time.perf_counter()
    for _ in range(2):
        core.start("forward")
        assert core.is_open("forward")
        core.stop("forward")
    assert not core.is_open("forward")
    core.stop("forward")  # not open: nothing
    core.add_phase("backward", time.time(), 0.25)
    core.add_phase("backward", time.time(), 0.5, 1)  # landed late: step 1's time/backward, now
    assert core.has_phase_seconds
    clock._close_step(3)
    assert not core.has_phase_seconds
    run.finish()
    view = ts.open_run(run.dir)
    backward = view.scalars("time/backward")
    assert dict(zip(backward["step"].tolist(), backward["value"].tolist())) == {1: 0.5, 3: 0.25}
    forward_spans = [s for s in view.spans() if s["phase"] == "forward"]
    assert len(forward_spans) == 2 and all(s["step"] == 3 for s in forward_spans)
    forward = view.scalars("time/forward")
    assert forward["step"].tolist() == [3]
    assert forward["value"][0] == pytest.approx(sum(s["duration"] for s in forward_spans), abs=1e-12)


def test_self_time_counts_outermost_calls_only(tmp_path):
    run = ts.init(tmp_path, "self")
    failures = Failures()
    core = run._step_clock().core
    core.reset_self_time()

    def inner():
        time.sleep(0.002)

    def outer():
        core.call(failures, "inner", inner)  # nested: not counted twice
        time.sleep(0.002)

    started = time.perf_counter()
    core.call(failures, "outer", outer)
    wall = time.perf_counter() - started
    taken = core.take()
    assert 0.004 <= taken <= wall  # the inner call's 2 ms counted once, inside the outer's
    assert core.take() < 0.001 and core.depth == 0
    run.finish()


def test_the_cores_direct_calls_check_their_arguments(tmp_path):
    """start/stop/is_open/enter/leave/take/call and a hook's call bypass pybind11's dispatcher:
    each checks what it is given itself."""
    run = ts.init(tmp_path, "args")
    core = run._step_clock().core
    for call in (lambda: core.start(1), lambda: core.stop(), lambda: core.is_open("a", "b"),
                 lambda: core.call(Failures(), "part"), lambda: core.take(1)):
        with pytest.raises(TypeError):
            call()
    assert core.call(Failures(), "part", lambda a, b=0: a + b, 1, b=2) == 3
    core.start("forward")
    assert core.is_open("forward") and not core.is_open("backward")
    core.stop("forward")
    core.stop("never started")  # nothing to stop: no error
    assert not core.is_open("forward")
    bare = _core.GuardedHook.__new__(_core.GuardedHook)  # never initialised
    with pytest.raises(TypeError, match="not initialised"):
        bare(1)
    rec = run._recorder
    series = rec.series("check/direct", "scalar")
    with pytest.raises(ValueError, match="differ in length"):
        rec.log_scalar_ids([series], [], 0)
    with pytest.raises(TypeError):
        rec.log_scalar_ids([series], [1.0])
    with pytest.raises(TypeError):
        rec.log_scalar_ids([series], ["one"], 0)
    rec.log_scalar_ids((series, series), [2, 0.5], 7)  # a tuple of ids, an int value
    run.finish()
    logged = ts.open_run(tmp_path / "args").scalars("check/direct")
    assert logged["step"].tolist() == [7, 7] and logged["value"].tolist() == [2.0, 0.5]


def test_a_failing_guarded_hook_switches_its_part_off_and_never_raises(tmp_path, capfd):
    run = ts.init(tmp_path, "fail")
    core = run._step_clock().core
    core.reset_self_time()
    failures = Failures()
    calls = []

    def broken(*args, **kwargs):
        calls.append((args, kwargs))
        raise ValueError("injected hook failure")

    hook = _core.GuardedHook(broken, "activations", failures, core)
    with pytest.warns(RuntimeWarning, match="injected hook failure"):
        assert hook(1, 2, key=3) is None
    assert calls == [((1, 2), {"key": 3})]
    assert "activations" in failures.off and failures.count == 1
    assert hook(1) is None  # switched off: not called again
    assert len(calls) == 1 and core.depth == 0
    assert "injected hook failure" in capfd.readouterr().err

    def interrupted():
        raise KeyboardInterrupt  # not the monitor's failure: the user's, passed through

    with pytest.raises(KeyboardInterrupt):
        _core.GuardedHook(interrupted, "other", failures, core)()
    assert core.depth == 0 and "other" not in failures.off
    run.finish()


def test_a_cpp_hook_records_the_same_statistics_and_a_raising_one_leaves_the_training_alone(tmp_path, monkeypatch):
    model, opt, batches = tiny()
    run = ts.init(tmp_path, "hooks")
    watcher = run.watch(model, opt, activations_every=1)
    assert isinstance(watcher.inspect_batch, _core.GuardedHook)
    calls = []
    original = watcher._on_forward_end

    def broken_end(module, args, output):
        calls.append(1)
        original(module, args, output)
        raise RuntimeError("injected forward-end failure")

    # The root's forward hook, as torch holds it: the C++ hook calls the watcher's method.
    hooks = [h for h in model._forward_hooks.values() if isinstance(h, _core.GuardedHook)]
    assert len(hooks) == 1
    hooks[0].fn = broken_end
    plain_model, plain_opt, _ = tiny()
    with pytest.warns(RuntimeWarning, match="injected forward-end failure"):
        for (x, y) in run.data(batches):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            plain_opt.zero_grad()
            torch.nn.functional.cross_entropy(plain_model(x), y).backward()
            plain_opt.step()
    run.finish()
    assert len(calls) == 1  # "forward" switched off after its first failure
    for a, b in zip(model.parameters(), plain_model.parameters()):
        assert torch.equal(a, b)
    view = ts.open_run(run.dir)
    # The module hooks (C++ GuardedHooks around the activation capture) kept measuring.
    assert len(view.tensor_stats("act/0")) == 6
    assert len(view.tensor_stats("grad/0.weight")) == 6


def test_a_cpp_hook_copies_and_pickles_inert_and_its_cycles_are_collected(tmp_path):
    model, opt, batches = tiny()
    run = ts.init(tmp_path, "copies")
    run.watch(model, opt)
    hook = next(h for h in model._forward_pre_hooks.values() if isinstance(h, _core.GuardedHook))
    copied = copy.deepcopy(hook)
    assert isinstance(copied, Hook) and copied.fn is None
    restored = pickle.loads(pickle.dumps(hook))
    assert restored.func is sys.audit and restored.args == (INERT_HOOK_EVENT,)
    twin = copy.deepcopy(model)  # a copy's hooks are inert: training it records nothing
    x, y = batches[0]
    torch.nn.functional.cross_entropy(twin(x), y).backward()
    run.finish()

    class Owner:  # a watcher holds its hooks, each hook the watcher's bound method
        def method(self):
            return None

    owner = Owner()
    owner.hook = _core.GuardedHook(owner.method, "part", Failures(), run._step_clock().core)
    gone = weakref.ref(owner)
    del owner
    gc.collect()
    assert gone() is None  # the hook showed the collector what it holds
