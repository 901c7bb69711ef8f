"""Round trips with the real TensorBoard (issue 5): a run exported by trainscope is read by
TensorBoard's own reader with identical steps and values, and a file written by
TensorBoard's own writer (via torch.utils.tensorboard) is read by trainscope identically.

TensorBoard comes from PyPI into a venv made with --system-site-packages (so the system
torch is visible) under the build directory; the tests skip, saying so, only when PyPI
cannot be reached."""

import json
import math
import os
import pathlib
import subprocess
import textwrap

import pytest

from conftest import BUILD, CLI, REPO, run_cli

TESTDATA = pathlib.Path(os.environ.get("TRAINSCOPE_TESTDATA", REPO.parent / "shared" / "testdata" / "external"))
VENV = BUILD / "venv-tb"
PY = VENV / "bin" / "python"

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built")


@pytest.fixture(scope="module")
def tb_python():
    """The venv's interpreter, with tensorboard installed (once per build directory)."""
    if not PY.exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(VENV)], check=True, timeout=120)
    probe = subprocess.run([str(PY), "-c", "import tensorboard"], capture_output=True)
    if probe.returncode != 0:
        r = subprocess.run([str(PY), "-m", "pip", "install", "-q", "tensorboard"], capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            if any(s in r.stderr for s in ("NewConnectionError", "Temporary failure in name resolution",
                                           "Could not find a version", "Network is unreachable")):
                pytest.skip("PyPI unreachable: cannot install tensorboard for the round-trip tests")
            raise AssertionError(r.stderr)
    return str(PY)


def venv_run(py, code, *args):
    r = subprocess.run([py, "-c", textwrap.dedent(code), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


READ_WITH_TENSORBOARD = """
    import json, math, sys
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "histograms": {}}
    for tag in tags["scalars"]:
        ev = acc.Scalars(tag)
        out["scalars"][tag] = {"steps": [e.step for e in ev],
                               "values": ["nan" if math.isnan(e.value) else e.value for e in ev]}
    for tag in tags["histograms"]:
        ev = acc.Histograms(tag)
        out["histograms"][tag] = [{"step": e.step, "num": e.histogram_value.num, "sum": e.histogram_value.sum,
                                   "sum_squares": e.histogram_value.sum_squares,
                                   "buckets": e.histogram_value.bucket} for e in ev]
    print(json.dumps(out))
"""


def f32(x):
    import struct
    return struct.unpack("<f", struct.pack("<f", x))[0]


def import_points(src, out):
    r = run_cli("import", "--json", "--points", src, "-o", out)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)[0]["series"]


def test_exported_run_reads_back_in_tensorboard(tmp_path, tb_python):
    csv_path = TESTDATA / "csv_metrics" / "resnet18_img100_epoch_metrics.csv"
    hist_path = TESTDATA / "tfevents" / "pt_histogram_demo.tfevents"
    if not csv_path.exists():
        pytest.skip("no test data")
    for name, src in [("scalars", csv_path), ("histograms", hist_path)]:
        run_dir = tmp_path / name
        original = import_points(src, run_dir)
        r = run_cli("export", run_dir, "--to", "tfevents", "-o", tmp_path / f"tb_{name}")
        assert r.returncode == 0, r.stderr
        tb = venv_run(tb_python, READ_WITH_TENSORBOARD, tmp_path / f"tb_{name}")
        scalars = {t: s for t, s in original.items() if s["kind"] == "scalar"}
        hists = {t: s for t, s in original.items() if s["kind"] == "tensor_stats"}
        assert set(tb["scalars"]) == set(scalars)
        assert set(tb["histograms"]) == set(hists)
        for tag, s in scalars.items():
            assert tb["scalars"][tag]["steps"] == s["steps"], tag
            assert tb["scalars"][tag]["values"] == [v if isinstance(v, str) else f32(v) for v in s["values"]], tag
        for tag, s in hists.items():
            got = tb["histograms"][tag]
            assert [h["step"] for h in got] == s["steps"]
            for h, st in zip(got, s["stats"]):
                assert h["num"] == st["numel"]
                assert h["sum"] == st["sum"] and h["sum_squares"] == st["sum_squares"]
                assert sum(h["buckets"]) == st["numel"]


WRITE_WITH_TORCH = """
    import json, math, sys
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(sys.argv[1])
    rng = np.random.default_rng(0)
    for step in range(0, 300, 3):
        w.add_scalar("train/loss", 2.0 / (1 + step) + 0.01 * rng.standard_normal(), step)
        w.add_scalar("train/lr", 1e-3 * 0.99 ** step, step)
        if step % 30 == 0:
            # add_histogram_raw: torch 1.13's add_histogram trips over newer numpy.
            x = rng.standard_normal(1000) * (1 + step / 100)
            counts, edges = np.histogram(x, bins=30)
            w.add_histogram_raw("grad/fc.weight", min=float(x.min()), max=float(x.max()), num=x.size,
                                sum=float(x.sum()), sum_squares=float((x * x).sum()),
                                bucket_limits=edges[1:].tolist(), bucket_counts=counts.tolist(), global_step=step)
    w.add_scalar("train/loss", float("nan"), 300)
    w.add_scalar("train/loss", float("inf"), 301)
    w.add_hparams({"lr": 0.001, "optimizer": "adam"}, {"hparam/final_loss": 0.5})
    w.close()
    print("{}")
"""


def test_file_written_by_tensorboards_writer_reads_identically(tmp_path, tb_python):
    logdir = tmp_path / "tb"
    venv_run(tb_python, WRITE_WITH_TORCH, logdir)
    files = sorted(logdir.glob("events.out.tfevents.*"))
    assert len(files) == 1
    reference = venv_run(tb_python, READ_WITH_TENSORBOARD, files[0])
    ours = import_points(files[0], tmp_path / "run")
    assert reference["scalars"]["train/loss"]["values"][-2:] == ["nan", math.inf]
    for tag, ref in reference["scalars"].items():
        got = ours[tag]
        assert got["steps"] == ref["steps"], tag
        assert [math.inf if v == "inf" else v for v in got["values"]] == ref["values"], tag
    for tag, ref in reference["histograms"].items():
        got = ours[tag]
        assert got["kind"] == "tensor_stats"
        assert got["steps"] == [h["step"] for h in ref]
        for h, st in zip(ref, got["stats"]):
            assert st["numel"] == h["num"] == 1000
            assert st["sum"] == h["sum"] and st["sum_squares"] == h["sum_squares"]
    # add_hparams writes a second event file in a subdirectory: a logdir with two runs.
    r = run_cli("diagnose", "--json", logdir)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "logdir" and len(doc["runs"]) == 2
