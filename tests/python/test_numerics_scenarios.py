"""The numerics advice checked on real trainings (CPU, torch):

- bfloat16 weights lose their updates: the doctor says BF16_STALE_UPDATE with the layer and
  the share lost; the loss stalls while the float32 twin learns, and the fix it recommends
  (FP32 master weights, compute in bfloat16 under autocast) makes the loss fall like the
  float32 twin's.
- an activation cast to float16 overflows: FP16_OVERFLOW names the layer and the step, and
  the share it gives brackets the share of Infs the cast really made.
- the loss scale FP16_UNDERFLOW recommends, applied to the same training with its gradients
  held in float16, flushes no gradient to zero and overflows none (counted with torch).
"""

import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from conftest import REPO, run_cli  # noqa: E402

sys.path.insert(0, str(REPO / "scenarios"))
import common  # noqa: E402
import fault_bf16_stale_update as bf16_scenario  # noqa: E402
import fault_fp16_activation_overflow as fp16_scenario  # noqa: E402


def diagnose(run_dir):
    out = run_cli("diagnose", run_dir, "--json", check=True)
    return json.loads(out.stdout)["findings"]


def losses(run_dir):
    return ts.open_run(str(run_dir)).scalars("train/loss")["value"]


def mean(values):
    return float(sum(values) / len(values))


class BF16Compute(torch.nn.Module):
    """The fix: parameters stay float32 (the master weights the optimizer updates); the
    forward computes in bfloat16 under autocast."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.model(x)


@pytest.fixture(scope="module")
def bf16_runs(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("bf16"))
    bf16_scenario.main(logdir, torch.bfloat16, name="bf16")
    bf16_scenario.main(logdir, torch.float32, name="fp32")
    spec = dict(bf16_scenario.SPEC, name="fix")
    common.train(logdir, spec, BF16Compute(bf16_scenario.model_for(torch.float32)), lr=bf16_scenario.LR,
                 steps=bf16_scenario.STEPS, seed=3, optimizer="adam", loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out.float(), y))
    return {name: os.path.join(logdir, name) for name in ("bf16", "fp32", "fix")}


def test_bf16_stale_update_found_with_layer_and_share(bf16_runs):
    findings = diagnose(bf16_runs["bf16"])
    stale = [f for f in findings if f["code"] == "BF16_STALE_UPDATE"]
    assert len(stale) == 1
    f = stale[0]
    assert f["location"] == bf16_scenario.SPEC["location"]
    assert f["evidence"]["how"] == "observed"
    assert f["evidence"]["fraction_lost"] > 0.5
    assert any("FP32 master weights" in a for a in f["actions"])
    for twin in ("fp32", "fix"):
        assert not [g for g in diagnose(bf16_runs[twin]) if g["code"] == "BF16_STALE_UPDATE"], twin


def test_bf16_loss_stalls_and_the_fix_learns_like_fp32(bf16_runs):
    curves = {name: losses(path) for name, path in bf16_runs.items()}
    start = {name: mean(c[:10]) for name, c in curves.items()}
    end = {name: mean(c[-30:]) for name, c in curves.items()}
    # float32 learns, bfloat16 weights barely move
    assert end["fp32"] < 0.7 * start["fp32"]
    assert end["bf16"] > 0.85 * start["bf16"]
    drop = {name: start[name] - end[name] for name in curves}
    assert drop["bf16"] < 0.3 * drop["fp32"]
    # the fix falls like the float32 twin: within 10 % of its drop, and far beyond bf16's
    assert drop["fix"] == pytest.approx(drop["fp32"], rel=0.10)
    assert drop["fix"] > 3 * max(drop["bf16"], 1e-6)


def test_fp16_activation_overflow_layer_step_and_share(tmp_path):
    logdir = str(tmp_path)
    fp16_scenario.main(logdir)
    run_dir = os.path.join(logdir, fp16_scenario.SPEC["name"])
    over = [f for f in diagnose(run_dir) if f["code"] == "FP16_OVERFLOW"]
    assert over, "no FP16_OVERFLOW"
    f = min(over, key=lambda f: f["step"])
    assert f["location"] == fp16_scenario.SPEC["location"]
    assert f["step"] == fp16_scenario.SPEC["step"]
    # The cast module's output at that step holds the truth: its Infs are fc2's overflows.
    cast = [p for p in ts.open_run(run_dir).tensor_stats("act/fc2_half", f["step"], f["step"])]
    truth = cast[0]["inf"] / cast[0]["numel"]
    assert truth > 0
    assert f["evidence"]["fraction_min"] <= truth <= f["evidence"]["fraction"]
    assert f["evidence"]["largest_value"] > 65504


SCALE_STEPS = 40


def tiny_gradient_training(logdir, name, loss_scale_exponent=None):
    """A training whose loss is weighted by 2^-22 (a loss averaged over a huge batch of
    tokens, a small auxiliary weight): its gradients sit mostly below float16's subnormals.
    With `loss_scale_exponent`, the loss is multiplied by 2^k, each gradient is held in
    float16 (as an fp16 backward stores it), counted, and unscaled in float32 before the step."""
    torch.manual_seed(0)
    model = common.mlp(hidden=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05 * 2 ** 22)
    x_all, y_all = common.make_classification(seed=5)
    batches = common.batches(x_all, y_all, 64, seed=5)
    counts = {"values": 0, "flushed": 0, "overflow": 0}
    config = {"precision": "fp16"}
    with ts.init(logdir=logdir, name=name, config=config) as run:
        run.watch(model, opt, histograms_every=1, activations=False, system_interval=0)
        for step in range(SCALE_STEPS):
            x, y = next(batches)
            loss = torch.nn.functional.cross_entropy(model(x), y) * 2.0 ** -22
            opt.zero_grad()
            if loss_scale_exponent is None:
                loss.backward()
            else:
                scale = 2.0 ** loss_scale_exponent
                (loss * scale).backward()
                for p in model.parameters():
                    g = p.grad
                    g16 = g.half()
                    counts["values"] += g.numel()
                    counts["flushed"] += int(((g != 0) & (g16 == 0)).sum())
                    counts["overflow"] += int((torch.isfinite(g) & ~torch.isfinite(g16)).sum())
                    p.grad = g16.float() / scale
                run.log({"amp/loss_scale": scale})
            opt.step()
            run.log({"train/loss": loss.item() * 2 ** 22})
    return os.path.join(logdir, name), counts


def test_recommended_loss_scale_removes_underflow_without_overflow(tmp_path):
    logdir = str(tmp_path)
    run_dir, _ = tiny_gradient_training(logdir, "unscaled")
    under = [f for f in diagnose(run_dir) if f["code"] == "FP16_UNDERFLOW"]
    assert len(under) == 1
    ev = under[0]["evidence"]
    assert ev["fraction_all_gradients"] > 0.05
    k = ev["recommended_exponent"]
    assert ev["exponent_range"][0] <= k <= ev["exponent_range"][1]

    # Applying it: the same training with its gradients in float16 at scale 2^k.
    scaled_dir, counts = tiny_gradient_training(logdir, "scaled", loss_scale_exponent=k)
    assert counts["values"] > 0
    assert counts["flushed"] == 0, counts
    assert counts["overflow"] == 0, counts
    # At scale 1 the same cast flushes what the doctor said (a control for the count).
    _, control = tiny_gradient_training(logdir, "control", loss_scale_exponent=0)
    assert control["flushed"] / control["values"] > 0.05
    # And the doctor, told the scale in use (amp/loss_scale), sees nothing flushed.
    assert not [f for f in diagnose(scaled_dir) if f["code"] in ("FP16_UNDERFLOW", "FP16_OVERFLOW")]
