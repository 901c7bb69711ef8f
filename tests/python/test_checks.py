"""The checks before the first step (trainscope/checks.py, run.watch) and ts.overfit_check,
on real torch modules and real short trainings: each check fires on a model with the
problem and stays silent on a healthy model of the same shape; findings reach the store,
`trainscope diagnose` and run.findings with the module named."""

import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainscope as ts  # noqa: E402
from trainscope import checks  # noqa: E402
from conftest import run_cli  # noqa: E402


def by_check(findings):
    return {f["evidence"]["check"]: f for f in findings}


def mlp(hidden=32, *tail):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4), *tail)


def cnn(pool=None, bn=True):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4) if bn else nn.Identity(), nn.ReLU(),
                         pool or nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def transformer(dropout=0.1):
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=dropout), 2)


def test_healthy_models_get_no_findings():
    assert checks.check_model(mlp(), nn.CrossEntropyLoss(), batch_size=16) == []
    assert checks.check_model(cnn(), nn.CrossEntropyLoss(), batch_size=16) == []
    assert checks.check_model(transformer(), nn.MSELoss(), batch_size=16) == []


@pytest.mark.parametrize("pool,fires", [
    (nn.MaxPool2d(2, stride=3), True),
    (nn.MaxPool2d((2, 2), stride=(2, 3)), True),   # one dimension is enough
    (nn.AvgPool2d(3, stride=4), True),
    (nn.MaxPool2d(2), False),                      # stride defaults to the kernel
    (nn.MaxPool2d(3, stride=2), False),            # overlapping windows are fine
])
def test_pool_stride_larger_than_kernel(pool, fires):
    found = by_check(checks.check_model(cnn(pool)))
    assert ("pool_stride_gt_kernel" in found) == fires
    if fires:
        f = found["pool_stride_gt_kernel"]
        assert f["code"] == "ARCHITECTURE_WARNING" and f["location"] == "3"
        assert max(f["evidence"]["stride"]) > max(f["evidence"]["kernel_size"]) or f["evidence"]["stride"][1] == 3
        assert f["causes"][0]["id"] == "pooling_skips_input" and f["actions"]


def test_pool_stride_in_one_dimension_of_a_1d_pool():
    found = by_check(checks.check_model(nn.Sequential(nn.Conv1d(1, 2, 3), nn.MaxPool1d(2, stride=5))))
    assert found["pool_stride_gt_kernel"]["evidence"] == {
        "module": "1", "type": "MaxPool1d", "kernel_size": [2], "stride": [5], "check": "pool_stride_gt_kernel"}


@pytest.mark.parametrize("tail,loss,check,severity", [
    (nn.Softmax(dim=1), nn.CrossEntropyLoss(), "softmax_into_loss", "warning"),
    (nn.Softmax(dim=1), F.cross_entropy, "softmax_into_loss", "warning"),   # functional losses too
    (nn.Softmax(dim=1), nn.NLLLoss(), "softmax_into_nll", "warning"),
    (nn.LogSoftmax(dim=1), nn.CrossEntropyLoss(), "log_softmax_into_cross_entropy", "info"),
    (nn.Sigmoid(), nn.BCEWithLogitsLoss(), "sigmoid_into_bce_with_logits", "warning"),
    (nn.ReLU(), nn.CrossEntropyLoss(), "relu_before_logits", "warning"),
    (nn.Sigmoid(), nn.MSELoss(), "bounded_output_into_regression", "info"),
    (nn.Tanh(), nn.L1Loss(), "bounded_output_into_regression", "info"),
])
def test_final_activation_against_the_loss(tail, loss, check, severity):
    found = checks.check_model(mlp(32, tail), loss)
    assert [f["evidence"]["check"] for f in found] == [check]
    f = found[0]
    assert f["location"] == "3" and f["severity"] == severity
    assert f["evidence"]["final_module_from"].startswith("registration order")
    # The same model without the final activation, or with the one the loss wants, is silent.
    assert checks.check_model(mlp(32), loss) == []


@pytest.mark.parametrize("tail,loss", [
    (nn.LogSoftmax(dim=1), nn.NLLLoss()), (nn.Sigmoid(), nn.BCELoss()), (nn.Softmax(dim=1), None),
    (nn.Softmax(dim=1), lambda out, y: (out - y).abs().mean()),   # unknown loss: nothing claimed
])
def test_fitting_or_unknown_losses_are_silent(tail, loss):
    assert checks.check_model(mlp(32, tail), loss) == []


def test_two_linear_layers_without_a_nonlinearity():
    torch.manual_seed(0)
    bad = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.1), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
    found = checks.check_model(bad)
    assert [(f["evidence"]["check"], f["location"]) for f in found] == [("linear_after_linear", "2")]
    assert found[0]["evidence"]["previous"] == "0" and found[0]["evidence"]["between"] == ["Dropout"]
    # Nested Sequentials are followed: the pair is across the boundary, named by full path.
    nested = nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), nn.Sequential(nn.Linear(8, 4)))
    assert [f["location"] for f in checks.check_model(nested)] == ["1.0"]
    inner = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4)))
    assert [f["location"] for f in checks.check_model(inner)] == ["1.0", "1.1"]  # each pair once
    good = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.1), nn.GELU(), nn.Linear(32, 4))
    assert checks.check_model(good) == []


def test_constant_initialisation_of_weights_not_of_biases_or_norms():
    model = mlp()
    nn.init.zeros_(model[0].weight)
    nn.init.zeros_(model[2].weight)
    nn.init.constant_(model[0].bias, 0.1)  # a constant bias is normal
    found = checks.check_model(model)
    assert [(f["evidence"]["check"], f["location"]) for f in found] == [("constant_init", "0")]
    assert found[0]["evidence"]["layers"] == ["0", "2"] and found[0]["evidence"]["values"] == [0.0]
    assert found[0]["causes"][0]["id"] == "constant_init"
    deep = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 2))
    for layer in (deep[2], deep[4]):
        nn.init.constant_(layer.weight, 0.5)
    found = checks.check_model(deep)
    assert [(f["location"], f["evidence"]["layers"], f["evidence"]["value"]) for f in found] == [("2", ["2", "4"], 0.5)]
    # One constant layer alone is not symmetric: zero-initialising the output layer or a
    # residual branch's last projection (Fixup, ReZero) is a known good practice.
    single = mlp()
    nn.init.zeros_(single[2].weight)
    assert checks.check_model(single) == []
    conv = cnn()
    nn.init.constant_(conv[0].weight, 0.5)
    assert checks.check_model(conv) == []
    # A zero-initialised free parameter (a learned position embedding) is not a weight layer.
    with_pos = nn.Sequential(mlp())
    with_pos.pos = nn.Parameter(torch.zeros(16, 8))
    assert checks.check_model(with_pos) == []
    # BatchNorm/LayerNorm weights start at 1 on purpose; the transformer has LayerNorms.
    assert checks.check_model(transformer()) == []


def test_nearly_constant_weights_are_not_constant():
    model = mlp()
    with torch.no_grad():
        model[2].weight.fill_(0.25)
        model[2].weight[-1, -1] = 0.2500001  # only the last value differs
    assert checks.check_model(model) == []


def test_dropout_above_one_half():
    found = checks.check_model(mlp(32, nn.Dropout(0.7)))
    assert [(f["evidence"]["check"], f["location"], f["evidence"]["p"]) for f in found] == [
        ("dropout_above_half", "3", 0.7)]
    assert checks.check_model(mlp(32, nn.Dropout(0.5))) == []
    names = sorted(f["location"] for f in checks.check_model(transformer(dropout=0.6)))
    # Each layer's three Dropout modules and its attention's dropout.
    assert names == sorted(f"layers.{i}.{m}" for i in range(2) for m in ("dropout", "dropout1", "dropout2", "self_attn"))


def test_batchnorm_in_training_mode_with_batch_size_one():
    found = checks.check_model(cnn(), batch_size=1)
    assert [(f["evidence"]["check"], f["location"]) for f in found] == [("batchnorm_batch_1", "1")]
    assert found[0]["causes"][0]["id"] == "batchnorm_stats"
    assert checks.check_model(cnn(), batch_size=8) == []
    assert checks.check_model(cnn().eval(), batch_size=1) == []  # inference with one sample is fine
    assert checks.check_model(cnn(bn=False), batch_size=1) == []


def test_a_thousand_modules_are_checked_without_a_forward_pass():
    big = nn.Sequential(*[m for _ in range(250) for m in (nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.1),
                                                           nn.LayerNorm(16))])
    assert len(list(big.modules())) == 1001
    nn.init.zeros_(big[992].weight)
    nn.init.zeros_(big[996].weight)
    found = checks.check_model(big, nn.CrossEntropyLoss(), batch_size=32)
    assert [(f["evidence"]["check"], f["location"]) for f in found] == [("constant_init", "992")]


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        checks.check_model("model")
    with pytest.raises(TypeError, match="batch must be"):
        ts.overfit_check(mlp(), nn.CrossEntropyLoss(), [1, 2, 3])


# ---- through run.watch(): the store, diagnose, run.findings ----

def train(run, model, batches, loss_fn, opt):
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        run.log({"train/loss": loss})


def test_watch_findings_reach_the_store_diagnose_and_run_findings(logdir, capsys):
    model = mlp(32, nn.Softmax(dim=1))
    nn.init.zeros_(model[0].weight)
    nn.init.zeros_(model[2].weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(logdir, name="checks")
    assert run.watch(model, opt, loss_fn=nn.CrossEntropyLoss()) is not None
    live = {(f["location"], f["evidence"]["check"]) for f in run.findings if f["code"] == "ARCHITECTURE_WARNING"}
    assert live == {("3", "softmax_into_loss"), ("0", "constant_init")}
    err = capsys.readouterr().err
    assert "trainscope: [warning] ARCHITECTURE_WARNING at step 0 in 3: the model ends in Softmax" in err
    g = torch.Generator().manual_seed(1)
    train(run, model, [(torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g))
                       for _ in range(5)], nn.CrossEntropyLoss(), opt)
    summary = run.finish()
    assert "ARCHITECTURE_WARNING" in {f["code"] for f in summary["findings"]}

    stored = [f for f in ts.open_run(run.dir).findings() if f["code"] == "ARCHITECTURE_WARNING"]
    assert {(f["location"], f["evidence"]["check"]) for f in stored} == live
    assert all(f["step"] == 0 and f["actions"] and f["causes"] for f in stored)

    result = run_cli("diagnose", run.dir, "--json", check=True)
    diagnosed = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "ARCHITECTURE_WARNING"]
    assert {(f["location"], f["evidence"]["check"]) for f in diagnosed} == live
    softmax = next(f for f in diagnosed if f["location"] == "3")
    assert softmax["causes"][0]["id"] == "double_softmax"
    assert "Remove 3" in softmax["actions"][0]


class CustomNet(nn.Module):
    """Declares the activation before the head, so registration order would mislead."""

    def __init__(self, with_bn=True):
        super().__init__()
        self.out = nn.Softmax(dim=1)
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16) if with_bn else nn.Identity()
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(self.fc2(torch.relu(self.bn(self.fc1(x)))))


def test_first_forward_names_the_final_module_and_the_batchnorm_batch(logdir):
    torch.manual_seed(0)
    model = CustomNet()
    run = ts.init(logdir, name="first")
    run.watch(model, torch.optim.SGD(model.parameters(), lr=0.01), loss_fn=nn.CrossEntropyLoss())
    assert run.findings == []  # a custom forward: nothing is claimed before it runs
    model.eval()
    model(torch.randn(1, 8))   # an evaluation forward with one sample: BatchNorm is not training
    model.train()
    model(torch.randn(4, 8))   # the probe judged the first forward and removed its hooks
    found = {f["evidence"]["check"]: f for f in run.findings}
    assert set(found) == {"softmax_into_loss"}
    assert found["softmax_into_loss"]["location"] == "out"
    assert found["softmax_into_loss"]["evidence"]["final_module_from"].startswith("the first forward")
    probe_hooks = [h for m in model.modules() for h in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())
                   if getattr(h, "__module__", "") == "trainscope.checks"]
    assert probe_hooks == []
    run.finish()

    torch.manual_seed(0)
    model = CustomNet()
    run = ts.init(logdir, name="bn1")
    run.watch(model)   # no loss given: only BatchNorm is watched at the first forward
    with pytest.raises(ValueError):
        model(torch.randn(1, 8))   # BatchNorm1d refuses one sample in training; the finding says why
    found = [(f["evidence"]["check"], f["location"], f["evidence"]["batch_size"]) for f in run.findings]
    assert found == [("batchnorm_batch_1", "bn", 1)]
    run.finish()
    assert [f["location"] for f in ts.open_run(run.dir).findings() if f["code"] == "ARCHITECTURE_WARNING"] == ["bn"]


def test_a_failing_check_is_reported_once_and_training_goes_on(logdir, capsys):
    class Unreadable:
        """A loss whose name cannot be read: the checks fail, not the training."""

        def __call__(self, out, y):
            return F.cross_entropy(out, y)

        @property
        def __name__(self):
            raise RuntimeError("no name")

    model = mlp(32, nn.Softmax(dim=1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(logdir, name="broken")
    assert run.watch(model, opt, loss_fn=Unreadable()) is not None
    assert "model checks failed, training goes on (RuntimeError: no name)" in capsys.readouterr().err
    train(run, model, [(torch.randn(4, 8), torch.randint(0, 4, (4,)))] * 3, Unreadable(), opt)
    run.finish()
    assert ts.open_run(run.dir).scalars("train/loss")["step"].tolist() == [0, 1, 2]


def test_checks_can_be_switched_off(logdir):
    model = mlp(32, nn.Dropout(0.9))
    run = ts.init(logdir, name="off")
    run.watch(model, checks=False)
    assert run.findings == []
    run.finish()


# ---- ts.overfit_check ----

def clustered_batch(n=32, classes=4, dim=8, seed=0):
    """Labels that follow from the inputs (noisy class centres): learnable data."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g) * 2
    y = torch.arange(n) % classes
    return centres[y] + 0.5 * torch.randn(n, dim, generator=g), y


def test_overfit_check_passes_on_a_healthy_mlp_and_leaves_the_model_alone(logdir):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = ts.init(logdir, name="overfit")
    run.watch(model, opt)   # a watched model: the copy must not record into the run
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    result = ts.overfit_check(model, nn.CrossEntropyLoss(), clustered_batch(), steps=60, verbose=False)
    assert result.passed, result.verdict
    assert result.final_loss <= 0.01 * result.initial_loss
    assert result.ratio == pytest.approx(result.final_loss / result.initial_loss)
    assert len(result.losses) == 61 and result.losses[-1] < result.losses[0]
    assert "passed" in str(result)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(rng, torch.get_rng_state())
    run.finish()
    # The copy's 60 training steps went through no watch hook: no inputs, gradients or times.
    # (watch may declare its series up front: a declared series with no point is no record)
    tags = {s["tag"] for s in ts.open_run(run.dir).series() if s["points"]}
    assert not [t for t in tags if t.startswith(("input/", "grad/", "act/", "time/"))]


def test_overfit_check_fails_when_the_targets_change_every_step():
    x, y = clustered_batch()

    def shuffled_targets(out, target):  # the classic data-pipeline bug: labels decoupled from inputs
        return F.cross_entropy(out, target[torch.randperm(len(target))])

    result = ts.overfit_check(mlp(), shuffled_targets, (x, y), steps=60, verbose=False)
    assert not result.passed and result.problem is None
    assert result.tried == [1e-3, 1e-2]
    assert result.final_loss > 0.3 * result.initial_loss
    assert "FAILED" in result.verdict and "bug in the script" in result.verdict


def test_overfit_check_names_detached_outputs_frozen_models_and_softmax_into_nll():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x).detach()

    batch = clustered_batch()
    result = ts.overfit_check(Detached(), nn.CrossEntropyLoss(), batch, verbose=False)
    assert (result.passed, result.problem, len(result.losses)) == (False, "no_gradient", 1)
    frozen = mlp()
    frozen.requires_grad_(False)
    result = ts.overfit_check(frozen, nn.CrossEntropyLoss(), batch, verbose=False)
    assert result.problem == "no_gradient" and "all frozen" in result.verdict
    result = ts.overfit_check(mlp(32, nn.Softmax(dim=1)), nn.NLLLoss(), batch, steps=30, verbose=False)
    assert (result.passed, result.problem) == (False, "negative")


def test_overfit_check_reports_a_nonfinite_loss(capsys):
    x, y = clustered_batch()
    result = ts.overfit_check(mlp(), lambda out, t: torch.log(out - 100).mean(), (x, y))
    assert (result.passed, result.problem) == (False, "nonfinite")
    assert "the loss became nan at step 0" in capsys.readouterr().err


def test_overfit_check_uses_the_given_optimizer_and_dict_batches():
    x, y = clustered_batch()
    result = ts.overfit_check(mlp(), nn.CrossEntropyLoss(), {"input": x, "labels": y}, steps=40,
                              optimizer=lambda params: torch.optim.SGD(params, lr=1e-6), verbose=False)
    assert not result.passed and result.tried == [None]  # the caller's settings, no retry
    model = mlp()
    user_opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    result = ts.overfit_check(model, nn.CrossEntropyLoss(), (x, y), steps=60, optimizer=user_opt, verbose=False)
    assert result.passed and not user_opt.state  # same type and settings, fresh state


def test_add_finding_json_names_what_is_wrong(logdir):
    run = ts.init(logdir, name="bad_finding")
    with pytest.raises(ValueError, match="'code' is required"):
        run._recorder.add_finding_json('{"severity": "warning"}')
    with pytest.raises(ValueError, match="'severity' must be info, warning or critical, got 'loud'"):
        run._recorder.add_finding_json('{"code": "X", "severity": "loud"}')
    with pytest.raises(ValueError, match="'evidence' must be an object"):
        run._recorder.add_finding_json('{"code": "X", "evidence": [1]}')
    with pytest.raises(ValueError, match="expected a JSON object"):
        run._recorder.add_finding_json('not json')
    run._recorder.add_finding_json('{"code": "X", "step": 3, "location": "m", "message": "said", '
                                   '"causes": [{"id": "c", "confidence": 0.5}], "actions": ["a"]}')
    run.finish()
    [stored] = ts.open_run(run.dir).findings()
    assert (stored["code"], stored["step"], stored["last_step"], stored["location"], stored["summary"],
            stored["severity"], stored["causes"], stored["actions"]) == (
        "X", 3, 3, "m", "said", "warning", [{"id": "c", "confidence": 0.5}], ["a"])
