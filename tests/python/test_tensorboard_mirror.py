"""ts.init(tensorboard=...): the run mirrored live into a TensorBoard event file (issue 5).
A real PyTorch training is watched with the mirror on; TensorBoard's own reader (from PyPI,
in the venv test_ingest_tensorboard.py sets up) must see, during the training and after it,
exactly the steps and values that ts.open_run reads from the run's store."""

import math

import pytest

from test_ingest_tensorboard import READ_WITH_TENSORBOARD, f32, tb_python, venv_run  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402


def store_contents(run_dir):
    view = ts.open_run(run_dir)
    scalars, histograms = {}, {}
    for series in view.series():
        tag = series["tag"]
        if series["kind"] == "scalar":
            points = view.scalars(tag)
            scalars[tag] = ([int(s) for s in points["step"]], [float(v) for v in points["value"]])
        elif series["kind"] == "tensor_stats":
            histograms[tag] = view.tensor_stats(tag)
    return scalars, histograms


def assert_same_scalars(tb, scalars):
    assert set(tb["scalars"]) == set(scalars)
    for tag, (steps, values) in scalars.items():
        assert tb["scalars"][tag]["steps"] == steps, tag
        # TensorBoard's scalar is a float32: the mirror rounds exactly as a cast does.
        expected = ["nan" if math.isnan(v) else f32(v) for v in values]
        assert tb["scalars"][tag]["values"] == expected, tag


def train(run, steps, on_step=None):
    torch.manual_seed(0)
    x = torch.randn(256, 10)
    labels = (x[:, 0] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    run.watch(model, optimizer, histograms_every=5, system_interval=0)
    for step in range(steps):
        index = torch.randint(0, 256, (32,))
        logits = model(x[index])
        loss = torch.nn.functional.cross_entropy(logits, labels[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.log({"train/loss": loss.item(), "train/acc": (logits.argmax(1) == labels[index]).float().mean().item()})
        if on_step:
            on_step(step)


def test_mirror_reads_in_tensorboard_like_the_store(tmp_path, tb_python):
    run = ts.init(logdir=tmp_path, name="mirrored", tensorboard=True)
    mirror_dir = tmp_path / "mirrored" / "tensorboard"
    assert run.tensorboard_path and run.tensorboard_path.startswith(str(mirror_dir))
    live = {}

    def read_mid_training(step):
        if step == 19:
            run.flush()  # what a store reader sees now, TensorBoard sees too
            live["tb"] = venv_run(tb_python, READ_WITH_TENSORBOARD, mirror_dir)
            live["store"] = store_contents(run.dir)

    train(run, 40, read_mid_training)
    run.finish()

    assert live["tb"]["scalars"]["train/loss"]["steps"] == list(range(20))
    assert_same_scalars(live["tb"], live["store"][0])

    tb = venv_run(tb_python, READ_WITH_TENSORBOARD, mirror_dir)
    scalars, histograms = store_contents(run.dir)
    assert scalars["train/loss"][0] == list(range(40))
    assert_same_scalars(tb, scalars)
    # Statistics with an exponent histogram (every histograms_every steps) are histograms.
    histograms = {tag: [s for s in stats if "exponent_counts" in s] for tag, stats in histograms.items()}
    histograms = {tag: stats for tag, stats in histograms.items() if stats}
    assert any(tag.startswith("grad/") for tag in histograms), "watch() records gradient histograms"
    assert set(tb["histograms"]) == set(histograms)
    for tag, stats in histograms.items():
        got = tb["histograms"][tag]
        assert [h["step"] for h in got] == [s["step"] for s in stats], tag
        if tag.startswith("grad/"):
            assert [h["step"] for h in got] == list(range(0, 40, 5)), tag  # histograms_every=5
        for h, s in zip(got, stats):
            assert h["num"] == s["numel"] - s["nan"] - s["inf"]
            assert h["sum"] == pytest.approx(s["mean"] * s["numel"], rel=1e-12, abs=1e-300)
            # One bucket per power of two from the first used to the last, after a bucket of
            # exact zeros: what the exponent histogram knows.
            counts = s["exponent_counts"]
            used = [i for i, c in enumerate(counts) if c]
            expected = ([s["zeros"]] if s["zeros"] or not used else []) + (counts[used[0]:used[-1] + 1] if used else [])
            assert h["buckets"] == expected, tag


def test_mirror_into_a_shared_logdir_gives_each_run_its_folder(tmp_path, tb_python):
    for name in ("a", "b"):
        run = ts.init(logdir=tmp_path / "runs", name=name, tensorboard=tmp_path / "tb")
        for step in range(5):
            run.log({"val/loss": 1.0 / (step + 1) + (name == "b")}, step=step)
        run.finish()
        assert run.tensorboard_path.startswith(str(tmp_path / "tb" / name) + "/")
    for name, offset in (("a", 0), ("b", 1)):
        tb = venv_run(tb_python, READ_WITH_TENSORBOARD, tmp_path / "tb" / name)
        assert tb["scalars"]["val/loss"]["steps"] == list(range(5))
        assert tb["scalars"]["val/loss"]["values"] == [f32(1.0 / (s + 1) + offset) for s in range(5)]


def test_mirror_off_by_default(tmp_path):
    run = ts.init(logdir=tmp_path, name="plain")
    run.log({"train/loss": 1.0}, step=0)
    run.finish()
    assert run.tensorboard_path is None
    assert not (tmp_path / "plain" / "tensorboard").exists()
