"""The doctor on training scripts written the way public ones are (issue 27): real PyTorch
trainings recorded with the real client and diagnosed offline. Each one is a kind of false
alarm or wrong cause seen on code nobody on the team wrote."""

import math

import pytest

import conftest  # noqa: F401  (puts the trainscope under test on sys.path)

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import trainscope as ts  # noqa: E402

VOCAB, BLOCK = 16, 12


class TinyGPT(nn.Module):
    """minGPT's interface: forward(idx, targets) returns (logits, loss), with the targets
    masked by -1 where there is nothing to predict (cross_entropy(ignore_index=-1))."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, 32)
        self.fc = nn.Linear(32, 64)
        self.head = nn.Linear(64, VOCAB)

    def forward(self, idx, targets=None):
        logits = self.head(F.gelu(self.fc(self.wte(idx))))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), ignore_index=-1)
        return logits, loss


def sorting_batch(generator, batch=16):
    """minGPT's sorting demo: the input is a sequence and its sorted copy; only the sorted
    half is predicted, the rest of the targets is -1."""
    n = BLOCK // 2
    seq = torch.randint(0, VOCAB, (batch, n), generator=generator)
    full = torch.cat([seq, seq.sort(dim=1).values], dim=1)
    x, y = full[:, :-1].clone(), full[:, 1:].clone()
    y[:, : n - 1] = -1
    return x, y


def test_targets_masked_with_minus_one_are_no_label_fault(tmp_path):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with ts.init(logdir=str(tmp_path), name="mingpt_sort", config={"batch_size": 16}) as run:
        run.watch(model, opt)
        for _ in range(120):
            x, y = sorting_batch(generator)
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run.log({"train/loss": loss.item()})
        run_dir = run.dir
    d = ts.diagnose(run_dir)
    codes = [f["code"] for f in d["findings"]]
    assert "LABEL_OUT_OF_RANGE" not in codes, d["findings"]
    assert not [f for f in d["findings"] if f["severity"] == "critical"], d["findings"]


def test_a_per_epoch_scheduler_stepped_per_batch_is_named(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # StepLR(step_size=1) is meant per epoch; stepped per batch it takes the LR to ~0.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.08)
    x_all = torch.randn(2048, 20)
    y_all = (x_all[:, :5].argmax(1))
    with ts.init(logdir=str(tmp_path), name="steplr_per_batch", config={"num_classes": 5}) as run:
        run.watch(model, opt)
        for step in range(200):
            i = (step * 32) % 2048
            x, y = x_all[i:i + 32], y_all[i:i + 32]
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run.log({"train/loss": loss.item()})
        run_dir = run.dir
    d = ts.diagnose(run_dir)
    lr = [f for f in d["findings"] if f["code"] == "LR_ANOMALY"]
    assert lr, d["findings"]
    assert lr[0]["causes"][0]["id"] == "lr_schedule_collapsed"
    assert "fell from 0.001 at step 0" in lr[0]["summary"], lr[0]["summary"]
    for f in d["findings"]:
        for action in f["actions"]:
            assert "raise the learning rate" not in action.lower(), f
            assert "higher learning rate" not in action.lower(), f
        if f["code"] == "LOSS_PLATEAU":
            assert f["causes"][0]["id"] == "lr_schedule_collapsed", f
    assert not math.isnan(lr[0]["evidence"]["lr_max"])


class TwoStage(nn.Module):
    """An encoder, a head, and an unused auxiliary head; `cut` puts a .detach() between
    the encoder and the head (gcn-style: a debugging line left in)."""

    def __init__(self, cut):
        super().__init__()
        self.cut = cut
        self.encoder = nn.Linear(20, 32)
        self.head = nn.Linear(32, 4)
        self.aux_head = nn.Linear(32, 4)  # built, called, its output never reaches the loss

    def forward(self, x):
        h = torch.relu(self.encoder(x))
        if self.cut:
            h = h.detach()
        out = self.head(h)
        self.aux = self.aux_head(h)
        return out


def train_two_stage(tmp_path, cut):
    torch.manual_seed(0)
    model = TwoStage(cut)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(256, 20), torch.randint(0, 4, (256,))
    name = "cut" if cut else "unused_head"
    with ts.init(logdir=str(tmp_path), name=name, config={"batch_size": 32}) as run:
        run.watch(model, opt)
        for step in range(60):
            i = (step * 32) % 256
            loss = F.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.log({"train/loss": loss.item()})
    return ts.open_run(tmp_path / name), ts.diagnose(tmp_path / name)["findings"]


def test_a_graph_cut_before_learning_layers_is_named_where_it_is(tmp_path):
    """gcn with a .detach(): the gradient of the layers before it is None at every step.
    Before: nothing (PARAM_NOT_UPDATED needed a gradient), or LOSS_PLATEAU 'lr_too_low'."""
    run, findings = train_two_stage(tmp_path, cut=True)
    assert sorted(json_list(run.meta["extra"]["params_without_grad"])) == ["aux_head.bias", "aux_head.weight",
                                                                 "encoder.bias", "encoder.weight"]
    blocked = [f for f in findings if f["code"] == "PARAM_NOT_UPDATED"]
    assert len(blocked) == 1, findings
    assert blocked[0]["severity"] == "warning"
    assert blocked[0]["location"].startswith("encoder.")
    assert blocked[0]["causes"][0]["id"] == "gradient_blocked"


def test_a_head_the_loss_does_not_use_is_information_not_a_warning(tmp_path):
    run, findings = train_two_stage(tmp_path, cut=False)
    assert sorted(json_list(run.meta["extra"]["params_without_grad"])) == ["aux_head.bias", "aux_head.weight"]
    blocked = [f for f in findings if f["code"] == "PARAM_NOT_UPDATED"]
    assert [f["severity"] for f in blocked] == ["info"], findings
    assert [f for f in findings if f["severity"] in ("warning", "critical")] == []


def json_list(value):
    import json
    return json.loads(value) if isinstance(value, str) else value


def train_by_hand(tmp_path, name, zeroing, accumulate=1):
    """examples/regression's loop: a Linear fitted by hand (param.data.add_), no optimizer."""
    torch.manual_seed(0)
    fc = nn.Linear(4, 1)
    w_true = torch.randn(4, 1)
    with ts.init(logdir=str(tmp_path), name=name) as run:
        run.watch(fc)
        for step in range(80):
            x = torch.randn(32, 4)
            if step % accumulate == 0:
                if zeroing == "zero_grad":
                    fc.zero_grad()
                elif zeroing == "none_by_hand":
                    for p in fc.parameters():
                        p.grad = None
                elif zeroing == "zero_by_hand":
                    for p in fc.parameters():
                        if p.grad is not None:
                            p.grad.zero_()
            loss = F.smooth_l1_loss(fc(x), x @ w_true)
            loss.backward()
            if (step + 1) % accumulate == 0:
                for p in fc.parameters():
                    p.data.add_(-0.1 * p.grad)
            run.log({"train/loss": loss.item()})
    return ts.diagnose(tmp_path / name)["findings"]


@pytest.mark.parametrize("zeroing", ["zero_grad", "none_by_hand", "zero_by_hand"])
def test_a_hand_made_update_that_zeroes_is_quiet(tmp_path, zeroing):
    findings = train_by_hand(tmp_path, zeroing, zeroing)
    assert not [f for f in findings if f["code"] == "GRAD_NOT_ZEROED"], findings


def test_a_hand_made_update_that_never_zeroes_is_named(tmp_path):
    """examples/regression without fc.zero_grad(): before, no train/grad_zeroed without an
    optimizer, and the growing gradients were read as 'lr_too_high'."""
    findings = train_by_hand(tmp_path, "no_zero_grad", "never")
    first = [f for f in findings if f["severity"] in ("warning", "critical")][0]
    assert first["code"] == "GRAD_NOT_ZEROED", findings
    assert first["causes"][0]["id"] == "missing_zero_grad"
    # No optimizer in this loop: the advice zeroes through the model.
    assert any("model.zero_grad(" in a for a in first["actions"]), first["actions"]
    assert not any("optimizer.zero_grad(" in a for a in first["actions"]), first["actions"]


def test_hand_made_accumulation_is_no_forgotten_zero_grad(tmp_path):
    findings = train_by_hand(tmp_path, "accumulate", "zero_grad", accumulate=4)
    assert not [f for f in findings if f["code"] == "GRAD_NOT_ZEROED"], findings


def test_diagnose_puts_one_action_on_top(tmp_path):
    """What users of the peers liked: one line that says what to do first."""
    from conftest import run_cli
    _, findings = train_two_stage(tmp_path, cut=True)
    out = run_cli("diagnose", str(tmp_path / "cut"), check=True).stdout.splitlines()
    first = findings[0]
    assert out[1] == f"  first: {first['actions'][0]} ({first['code']} at step {first['step']} in {first['location']})"


def test_diagnose_scores_each_layer_with_its_reason(tmp_path):
    """The other thing users of the peers liked: a health score per layer. With the encoder
    cut off from the loss by a .detach(), the encoder scores lowest and says why; the head
    that learns scores higher."""
    from conftest import run_cli
    train_two_stage(tmp_path, cut=True)
    report = ts.diagnose(tmp_path / "cut")
    layers = {h["layer"]: h for h in report["layers"]}
    assert set(layers) >= {"encoder", "head"}
    encoder, head = layers["encoder"], layers["head"]
    assert encoder["score"] < head["score"], layers
    assert encoder["score"] <= 50 and encoder["worst"], encoder
    assert all(0 <= share <= 1 for share in encoder["parts"].values())
    assert encoder["score"] == round(100 * min(encoder["parts"].values()))
    out = run_cli("diagnose", str(tmp_path / "cut"), check=True).stdout.splitlines()
    assert out[2].startswith("  layer health: encoder "), out[:3]
