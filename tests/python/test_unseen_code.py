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
