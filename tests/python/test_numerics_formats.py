"""`trainscope numerics formats --json`: the format table's exact values, and the same
values as torch.finfo gives them for every format this torch knows (torch 1.13: float16,
bfloat16, float32, float64; torch 2.x adds the float8 types). Under torch 1.13 the float8
rows are also checked against the torch-2 venv when it is there (scripts/torch2-venv.sh)."""

import json
import math
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
from conftest import REPO, run_cli  # noqa: E402


@pytest.fixture(scope="module")
def table():
    out = run_cli("numerics", "formats", "--json", check=True)
    return {row["name"]: row for row in json.loads(out.stdout)["formats"]}


def test_exact_values_the_issue_names(table):
    fp16, bf16, tf32, fp32 = table["fp16"], table["bf16"], table["tf32"], table["fp32"]
    assert fp16["max"] == 65504.0
    assert fp16["min_subnormal"] == 2.0 ** -24
    assert fp16["min_normal"] == 2.0 ** -14
    assert fp16["epsilon"] == 2.0 ** -10
    assert fp16["inf_pattern"] == "0x7c00" and fp16["max_pattern"] == "0x7bff"
    assert bf16["max"] == (2 - 2.0 ** -7) * 2.0 ** 127
    assert abs(bf16["max"] - 3.3895e38) < 0.0001e38
    assert bf16["epsilon"] == 2.0 ** -7
    assert table["fp8-e4m3"]["max"] == 448.0
    assert table["fp8-e4m3"]["has_inf"] is False and table["fp8-e4m3"]["nan_pattern"] == "0x7f"
    assert table["fp8-e4m3"]["epsilon"] == 0.125
    assert table["fp8-e5m2"]["max"] == 57344.0
    assert table["fp8-e5m2"]["has_inf"] is True and table["fp8-e5m2"]["epsilon"] == 0.25
    assert tf32["mantissa_bits"] == 10 and tf32["exponent_bits"] == 8
    assert tf32["min_normal"] == fp32["min_normal"] and tf32["max_exponent"] == fp32["max_exponent"]
    assert tf32["epsilon"] == fp16["epsilon"]
    assert fp32["epsilon"] == 2.0 ** -23 and table["fp64"]["epsilon"] == 2.0 ** -52
    # MX elements come from the same data file: rows, not code.
    assert table["fp4-e2m1"]["max"] == 6.0 and table["fp6-e3m2"]["max"] == 28.0 and table["fp6-e2m3"]["max"] == 7.5


def finfo_row(dtype):
    f = torch.finfo(dtype)
    row = {"bits": f.bits, "max": float(f.max), "min": float(f.min), "eps": float(f.eps),
           "tiny": float(f.tiny), "resolution": float(f.resolution)}
    if hasattr(f, "smallest_normal"):
        row["smallest_normal"] = float(f.smallest_normal)
    return row


def compare(row, ref, name):
    bits = 32 if name == "tf32" else row["bits"]
    assert ref["bits"] == bits, name
    assert ref["max"] == row["max"], name
    assert ref["min"] == -row["max"], name
    assert ref["eps"] == row["epsilon"], name
    assert ref["tiny"] == row["min_normal"], name
    assert ref["resolution"] == pytest.approx(row["resolution"], rel=1e-12), name


def test_against_torch_finfo(table):
    checked = []
    for name, row in table.items():
        dtype = getattr(torch, row["torch"] or "", None)
        if not isinstance(dtype, torch.dtype):
            continue
        compare(row, finfo_row(dtype), name)
        checked.append(name)
    assert {"fp16", "bf16", "fp32", "fp64"} <= set(checked)


def test_smallest_subnormal_by_casting(table):
    """torch.finfo has no smallest subnormal: cast it and half of it and look."""
    for name in ("fp16", "bf16", "fp32", "fp64"):
        row = table[name]
        dtype = getattr(torch, row["torch"])
        # (1 + 2^-10): torch casts float64 to bfloat16 through float32, whose subnormals near
        # 2^-134 are 2^-149 apart: a closer value would round to the tie there first.
        tiny = torch.tensor([row["min_subnormal"], row["min_subnormal"] * 0.5 * (1 + 2.0 ** -10),
                             row["min_subnormal"] * 0.5],
                            dtype=torch.float64).to(dtype)
        assert tiny[0].item() == row["min_subnormal"], name
        if name != "fp64":  # a double just above 2^-1075 does not exist
            assert tiny[1].item() == row["min_subnormal"], name  # just above half rounds up
        assert tiny[2].item() == 0.0, name                  # the tie goes to even: zero
        if row["overflow_threshold"] != "inf":
            edge = torch.tensor([row["max"], (row["max"] + row["overflow_threshold"]) / 2], dtype=torch.float64).to(dtype)
            assert edge[0].item() == row["max"] and edge[1].item() == row["max"], name
            assert math.isinf(torch.tensor([row["overflow_threshold"]], dtype=torch.float64).to(dtype)[0].item()), name


FLOAT8_PROBE = r"""
import json, torch
out = {}
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    d = getattr(torch, name, None)
    if d is None:
        continue
    f = torch.finfo(d)
    sub = None
    # the smallest subnormal: the smallest positive value a cast keeps
    x = torch.tensor([2.0 ** -k for k in range(1, 30)], dtype=torch.float32).to(d).float()
    sub = min(v for v in x.tolist() if v > 0)
    over = torch.tensor([1e6], dtype=torch.float32).to(d).float().item()
    out[name] = {"bits": f.bits, "max": float(f.max), "min": float(f.min), "eps": float(f.eps),
                 "tiny": float(f.tiny), "resolution": float(f.resolution), "subnormal": sub,
                 "overflow_to": repr(over)}
print(json.dumps(out))
"""


def float8_finfo():
    if hasattr(torch, "float8_e4m3fn"):
        return _probe_here()
    try:
        venv = subprocess.run(["bash", str(REPO / "scripts" / "torch2-venv.sh")], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(python):
        return None
    out = subprocess.run([python, "-c", FLOAT8_PROBE], capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _probe_here():
    scope = {}
    import contextlib
    import io
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(FLOAT8_PROBE, scope)  # noqa: S102 (our own probe)
    return json.loads(buffer.getvalue())


def test_float8_against_torch2(table):
    ref = float8_finfo()
    if not ref:
        pytest.skip("no torch with float8 types here (torch 2.x or scripts/torch2-venv.sh)")
    checked = 0
    for name, row in table.items():
        if row["torch"] in ref:
            r = ref[row["torch"]]
            compare(row, r, name)
            assert r["subnormal"] == row["min_subnormal"], name
            # out of range: Inf where the format has it, else NaN, or the largest value where
            # torch's conversion saturates (it does for float8_e4m3fn)
            expected = {"inf"} if row["has_inf"] else {"nan", repr(row["max"])}
            assert r["overflow_to"] in expected, name
            checked += 1
    assert checked >= 2  # e4m3fn and e5m2 at least


def test_formats_file_adds_rows_and_errors_name_the_place(tmp_path):
    extra = tmp_path / "mx.json"
    extra.write_text(json.dumps({"formats": [{"name": "fp5-e2m2", "exponent_bits": 2, "mantissa_bits": 2,
                                              "encoding": "finite"}]}))
    rows = {r["name"]: r for r in json.loads(run_cli("numerics", "formats", "--json", "--formats", extra,
                                                     check=True).stdout)["formats"]}
    assert rows["fp5-e2m2"]["max"] == 7.0 and rows["fp5-e2m2"]["min_subnormal"] == 0.25
    extra.write_text(json.dumps({"formats": [{"name": "x", "exponent_bits": 3}]}))
    bad = run_cli("numerics", "formats", "--formats", extra)
    assert bad.returncode == 2
    assert f"{extra}: formats[0]: \"mantissa_bits\" must be an integer" in bad.stderr
