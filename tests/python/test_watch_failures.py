"""The monitor never kills the training: odd modules, a failing hook, a vanished store.

Each scenario trains a real model with trainscope watching and a failure injected inside
trainscope; the training must finish with exactly the weights of an unwatched training,
and the failure must be reported once.
"""

import shutil

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from trainscope import watch as ts_watch  # noqa: E402


class TupleOut(torch.nn.Module):
    def forward(self, x):
        return x * 2, {"aux": x}


class DictOut(torch.nn.Module):
    def forward(self, pair):
        return {"h": pair[0], "none": None}


class NoneOut(torch.nn.Module):
    def forward(self, d):
        return None


class Odd(torch.nn.Module):
    """A model whose submodules return a tuple, a dict and None."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.tup = TupleOut()
        self.dic = DictOut()
        self.nothing = NoneOut()
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        pair = self.tup(torch.relu(self.inp(x)))
        d = self.dic(pair)
        self.nothing(d)
        return self.head(d["h"])


def data(n=6):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(n)]


def train(run=None, inject=None, **options):
    torch.manual_seed(0)
    model = Odd()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if run is not None:
        run.watch(model, opt, activations_every=1, weights_every=1, histograms_every=2, **options)
    loader = run.data(data()) if run is not None else data()
    for step, (x, y) in enumerate(loader):
        if inject is not None:
            inject(step, run)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if run is not None:
            run.log({"train/loss": loss})
    if run is not None:
        run.finish()
    return [p.detach().clone() for p in model.parameters()]


@pytest.fixture(scope="module")
def plain_weights():
    return train()


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_odd_module_outputs_are_watched(tmp_path, plain_weights):
    run = ts.init(tmp_path, "odd")
    assert same(train(run), plain_weights)
    view = ts.open_run(tmp_path / "odd")
    tags = {s["tag"] for s in view.series()}
    assert "act/tup" in tags and "act/dic" in tags  # first tensor of a tuple / dict
    assert "act/nothing" not in tags                 # None: nothing to measure
    assert len(view.tensor_stats("act/tup")) == 6


def test_a_failing_hook_is_reported_once_and_training_goes_on(tmp_path, plain_weights, monkeypatch, capfd):
    from trainscope import _core
    capture_record = _core.capture_record

    def broken(series_id, tensor, code, kind, histogram, flat, strided):
        if not flat:  # a module output (a model input is flat: that part is "inputs")
            raise RuntimeError("injected activation failure")
        return capture_record(series_id, tensor, code, kind, histogram, flat, strided)

    monkeypatch.setattr(_core, "capture_record", broken)
    run = ts.init(tmp_path, "hook")
    with pytest.warns(RuntimeWarning, match="activations failed"):
        weights = train(run)
    assert same(weights, plain_weights)
    err = capfd.readouterr().err
    assert err.count("injected activation failure") == 1
    view = ts.open_run(tmp_path / "hook")
    assert len(view.tensor_stats("grad/head.weight")) == 6  # the other parts kept going


def test_a_failing_gradient_pass_switches_off_that_part_only(tmp_path, plain_weights, monkeypatch, capfd):
    calls = []

    def broken(self):
        calls.append(1)
        raise RuntimeError("injected gradient failure")

    monkeypatch.setattr(ts_watch.Watcher, "_before_update", broken)
    run = ts.init(tmp_path, "grads")
    with pytest.warns(RuntimeWarning, match="gradients failed"):
        weights = train(run)
    assert same(weights, plain_weights)
    assert len(calls) == 1  # switched off after the first failure
    err = capfd.readouterr().err
    assert err.count("injected gradient failure") == 1
    view = ts.open_run(tmp_path / "grads")
    assert len(view.tensor_stats("weight/head.weight")) == 6  # the other parts kept going
    assert len(view.scalars("train/loss")["value"]) == 6


def test_a_raising_activation_hook(tmp_path, plain_weights, monkeypatch, capfd):
    def broken(*args, **kwargs):
        raise ValueError("injected stats failure")

    monkeypatch.setattr(ts_watch, "_first_tensor", broken)
    run = ts.init(tmp_path, "act")
    with pytest.warns(RuntimeWarning):
        weights = train(run)
    assert same(weights, plain_weights)
    err = capfd.readouterr().err
    assert err.count("injected stats failure") <= 2  # once per part (activations, forward)


def test_the_store_directory_vanishing_does_not_stop_training(tmp_path, plain_weights, capfd):
    def remove_store(step, run):
        if step == 2:
            run.flush()
            shutil.rmtree(run.dir)
            (tmp_path / "gone").write_text("")  # the directory is now gone for good

    run = ts.init(tmp_path, "gone")
    assert same(train(run, inject=remove_store), plain_weights)
    # Whatever the store could or could not write, training finished with the same weights;
    # the recorder reports a write failure at most once.
    err = capfd.readouterr().err
    assert err.count("cannot write to the run store") <= 1
