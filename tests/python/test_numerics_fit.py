"""`trainscope numerics fit` against a direct computation on the same tensors.

A real training is recorded with run.watch (exponent histograms every step); the test keeps
copies of the same gradients and activations at a few steps, casts them with torch and
counts what the cast did: values that became Inf/NaN or saturated (overflow), non-zero
values that became 0 (flushed), values that became subnormal. The fractions `fit` computes
from the recorded histograms must bracket those counts, and equal them where the format's
boundary is a bin edge (the flush-to-zero threshold, min_subnormal / 2, always is).
float8 casts run in the torch-2 venv when torch here has no float8 types.
"""

import collections
import json
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from conftest import REPO, run_cli  # noqa: E402

STEPS = 12
KEEP = (3, 8, 11)


def formats():
    out = run_cli("numerics", "formats", "--json", check=True)
    return {row["name"]: row for row in json.loads(out.stdout)["formats"]}


def train(logdir, name="fit"):
    """Inputs scaled by 30000 (the first layer's outputs reach past 65504) and a loss scaled by
    1e-5 (gradients mostly below float16's normals, many below its subnormals)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(collections.OrderedDict([
        ("fc1", torch.nn.Linear(16, 64)), ("act1", torch.nn.ReLU()), ("fc2", torch.nn.Linear(64, 64)),
        ("act2", torch.nn.Tanh()), ("head", torch.nn.Linear(64, 4))]))
    opt = torch.optim.SGD(model.parameters(), lr=50.0)
    g = torch.Generator().manual_seed(1)
    kept = {}
    outputs = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, n=n: outputs.__setitem__(n, out.detach().clone()))
             for n, m in model.named_children()]
    with ts.init(logdir=str(logdir), name=name) as run:
        run.watch(model, opt, histograms_every=1, activations_every=1, weights_every=1, system_interval=0)
        for step in range(STEPS):
            x = torch.randn(64, 16, generator=g) * 30000
            y = torch.randint(0, 4, (64,), generator=g)
            loss = torch.nn.functional.cross_entropy(model(x), y) * 1e-5
            opt.zero_grad()
            loss.backward()
            if step in KEEP:
                for n, p in model.named_parameters():
                    kept[(f"grad/{n}", step)] = p.grad.detach().clone()
                for n, out in outputs.items():
                    kept[(f"act/{n}", step)] = out
            opt.step()
            run.log({"train/loss": loss.item()})
    for h in hooks:
        h.remove()
    return logdir / name, kept


def fit_at(run_dir, fmt, step):
    out = run_cli("numerics", "fit", run_dir, "--format", fmt, "--steps", f"{step}:{step}", "--json", check=True)
    return {t["tag"]: t for t in json.loads(out.stdout)["tensors"]}


def direct(values, cast_values, fmt):
    """What the cast did, counted value by value (numpy float64)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    c = np.asarray(cast_values, dtype=np.float64).ravel()
    finite = np.isfinite(v)
    nonzero = finite & (v != 0)
    # Out of range: Inf/NaN, or saturated (the rounding error exceeds any in-range one:
    # half the ulp of the largest binade, overflow_threshold - max).
    saturated = np.abs(np.abs(v) - np.abs(c)) > (fmt["overflow_threshold"] - fmt["max"])
    overflow = nonzero & (~np.isfinite(c) | saturated)
    flushed = nonzero & (c == 0)
    subnormal = nonzero & np.isfinite(c) & (c != 0) & (np.abs(c) < fmt["min_normal"])
    n = v.size
    return overflow.sum() / n, flushed.sum() / n, subnormal.sum() / n


def check(fit, truth, tag, fmt_name):
    over, under, sub = truth
    eps = 1e-12
    where = f"{tag} in {fmt_name}"
    assert fit["overflow_min"] - eps <= over <= fit["overflow"] + eps, where
    assert fit["underflow_min"] - eps <= under <= fit["underflow"] + eps, where
    assert fit["subnormal_min"] - eps <= sub <= fit["subnormal"] + eps, where


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return train(tmp_path_factory.mktemp("numerics") / "runs")


def test_fit_matches_torch_casts_fp16_bf16(recorded):
    run_dir, kept = recorded
    table = formats()
    seen = collections.Counter()
    for fmt_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        fmt = table[fmt_name]
        for step in KEEP:
            fit = fit_at(run_dir, fmt_name, step)
            for (tag, s), tensor in kept.items():
                if s != step:
                    continue
                assert tag in fit, f"{tag} not recorded at step {step}"
                row = fit[tag]
                # the same tensor: the recorded abs max is the kept copy's
                assert row["abs_max"] == pytest.approx(tensor.abs().max().item(), rel=1e-6), tag
                assert row["values"] == tensor.numel()
                truth = direct(tensor.double().numpy(), tensor.to(dtype).double().numpy(), fmt)
                check(row, truth, tag, fmt_name)
                # flush to zero is exact (its threshold is a power of two: a bin edge)
                assert row["underflow"] == pytest.approx(truth[1], abs=1e-12), tag
                assert row["underflow_min"] == pytest.approx(truth[1], abs=1e-12), tag
                for i, what in enumerate(("overflow", "underflow", "subnormal")):
                    if truth[i] > 0:
                        seen[(fmt_name, what)] += 1
    # The training really exercises every class in float16 (else the test would prove little).
    assert seen[("fp16", "overflow")] > 0
    assert seen[("fp16", "underflow")] > 0
    assert seen[("fp16", "subnormal")] > 0


def test_loss_scale_shifts_gradients_only(recorded):
    run_dir, kept = recorded
    fmt = formats()["fp16"]
    step = KEEP[1]
    out = run_cli("numerics", "fit", run_dir, "--format", "fp16", "--steps", f"{step}:{step}", "--loss-scale", "2^10",
                  "--json", check=True)
    doc = json.loads(out.stdout)
    assert doc["loss_scale"] == 1024.0
    rows = {t["tag"]: t for t in doc["tensors"]}
    for (tag, s), tensor in kept.items():
        if s != step:
            continue
        scaled = tensor.double() * (1024.0 if tag.startswith("grad/") else 1.0)
        truth = direct(scaled.numpy(), scaled.float().to(torch.float16).double().numpy(), fmt)
        check(rows[tag], truth, tag, "fp16 x 2^10")
        assert rows[tag]["underflow"] == pytest.approx(truth[1], abs=1e-12)


FLOAT8_CAST = r"""
import json, sys, numpy as np, torch
out = {}
for path in sys.argv[2:]:
    v = np.load(path).astype(np.float32)
    t = torch.from_numpy(v)
    out[path] = t.to(getattr(torch, sys.argv[1])).float().numpy().astype(np.float64).tolist()
print(json.dumps(out))
"""


def float8_python():
    if hasattr(torch, "float8_e4m3fn"):
        return os.environ.get("PYTHON_FOR_FLOAT8") or __import__("sys").executable
    try:
        venv = subprocess.run(["bash", str(REPO / "scripts" / "torch2-venv.sh")], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    python = os.path.join(venv, "bin", "python") if venv else ""
    return python if python and os.path.exists(python) else None


def test_fit_matches_torch_casts_fp8(recorded, tmp_path):
    python = float8_python()
    if not python:
        pytest.skip("no torch with float8 types (torch 2.x or scripts/torch2-venv.sh)")
    run_dir, kept = recorded
    table = formats()
    step = KEEP[2]
    paths = {}
    for (tag, s), tensor in kept.items():
        if s == step:
            path = tmp_path / (tag.replace("/", "_") + ".npy")
            np.save(path, tensor.numpy())
            paths[tag] = str(path)
    for fmt_name, dtype in (("fp8-e4m3", "float8_e4m3fn"), ("fp8-e5m2", "float8_e5m2")):
        cast = subprocess.run([python, "-c", FLOAT8_CAST, dtype, *paths.values()], capture_output=True, text=True,
                              timeout=120)
        assert cast.returncode == 0, cast.stderr
        casts = json.loads(cast.stdout)
        fit = fit_at(run_dir, fmt_name, step)
        for tag, path in paths.items():
            truth = direct(np.load(path), casts[path], table[fmt_name])
            check(fit[tag], truth, tag, fmt_name)
            assert fit[tag]["underflow"] == pytest.approx(truth[1], abs=1e-12), tag


def test_fit_text_and_errors(recorded):
    run_dir, _ = recorded
    text = run_cli("numerics", "fit", run_dir, "--format", "fp16,bf16", check=True).stdout
    assert "lost (overflow + flushed to zero) per format" in text
    assert "grad/fc1.weight" in text
    bad = run_cli("numerics", "fit", run_dir, "--format", "fp7")
    assert bad.returncode == 2 and "unknown format 'fp7'" in bad.stderr
    bad = run_cli("numerics", "fit", run_dir, "--loss-scale", "1000")
    assert bad.returncode == 2 and "power of two" in bad.stderr
    missing = run_cli("numerics", "fit", str(run_dir) + "-nowhere")
    assert missing.returncode == 2 and "nowhere" in missing.stderr


def test_dashboard_endpoint_is_the_fit_matrix(recorded):
    """GET /api/numerics?run=...: the layer x format table the dashboard colours, the same
    numbers as `numerics fit` for each format."""
    import http.client
    import re
    import signal
    run_dir, _ = recorded
    from conftest import CLI
    proc = subprocess.Popen([str(CLI), "serve", str(run_dir.parent), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        match = re.search(r"http://[^:/]+:(\d+)/", proc.stdout.readline())
        assert match
        port = int(match.group(1))

        def get(target):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", target)
            res = conn.getresponse()
            body = res.read().decode()
            conn.close()
            return res.status, body

        status, body = get(f"/api/numerics?run={run_dir.name}&formats=fp16,bf16&loss_scale=10")
        assert status == 200, body
        matrix = json.loads(body)
        assert matrix["formats"] == ["fp16", "bf16"] and matrix["loss_scale_exponent"] == 10
        fits = {}
        for fmt in ("fp16", "bf16"):
            out = run_cli("numerics", "fit", run_dir, "--format", fmt, "--loss-scale", "2^10", "--json", check=True)
            fits[fmt] = {t["tag"]: t for t in json.loads(out.stdout)["tensors"]}
        assert {r["tag"] for r in matrix["rows"]} == set(fits["fp16"])
        for row in matrix["rows"]:
            for i, fmt in enumerate(("fp16", "bf16")):
                assert row["lost"][i] == pytest.approx(fits[fmt][row["tag"]]["lost"], abs=1e-12)
        assert max(r["lost"][0] for r in matrix["rows"]) == matrix["rows"][0]["lost"][0]  # worst first
        assert get(f"/api/numerics?run={run_dir.name}&formats=fp7")[0] == 400
        assert get(f"/api/numerics?run={run_dir.name}&loss_scale=x")[0] == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def test_fp8_delayed_scaling_per_tensor(recorded):
    run_dir, kept = recorded
    out = json.loads(run_cli("numerics", "fp8", run_dir, "--history", "4", "--json", check=True).stdout)
    assert out["forward_format"] == "fp8-e4m3" and out["backward_format"] == "fp8-e5m2"
    rows = {t["tag"]: t for t in out["tensors"]}
    assert rows["act/fc1"]["format"] == "fp8-e4m3" and rows["grad/fc1.weight"]["format"] == "fp8-e5m2"
    for t in out["tensors"]:
        assert 0 <= t["lost"] <= 1 and len(t["amax_history"]) <= 4
        # the scale maps the history's amax below the format's max: 2^k * amax <= max < 2^(k+1) * amax
        amax = max(float(a) for a in t["amax_history"]) if t["amax_history"] else 0
        if amax > 0:
            top = 448.0 if t["format"] == "fp8-e4m3" else 57344.0
            assert amax * 2.0 ** t["scale_exponent"] <= top < amax * 2.0 ** (t["scale_exponent"] + 1), t["tag"]
