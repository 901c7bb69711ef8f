"""Importing the files other tools leave behind (issue 5): every real file in
../shared/testdata/external is read, with point counts checked against independent
Python readers; bad input gives clear messages and keeps what came before the damage."""

import csv
import json
import math
import os
import pathlib
import re
import statistics
import struct
import subprocess

import pytest

from conftest import CLI, REPO, run_cli
from ingest_helpers import tfevents_points

TESTDATA = pathlib.Path(os.environ.get("TRAINSCOPE_TESTDATA", REPO.parent / "shared" / "testdata" / "external"))

pytestmark = [
    pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built"),
]


def import_json(src, out, *extra, points=False):
    args = ["import", "--json", src, "-o", out, *extra]
    if points:
        args.append("--points")
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert len(report) == 1
    return report[0]


def files(sub, pattern="*"):
    """The test files of one kind; none (so the test is skipped) when the data is absent."""
    return sorted((TESTDATA / sub).glob(pattern))


@pytest.mark.parametrize("name", [p.name for p in files("tfevents", "*.tfevents")])
def test_tfevents_files_match_an_independent_reader(tmp_path, name):
    path = TESTDATA / "tfevents" / name
    if not path.exists():
        pytest.skip("no test data")
    scalars, histograms = tfevents_points(path)
    got = import_json(path, tmp_path / "run", points=True)
    assert got["error"] == ""
    assert got["import"]["damaged"] == 0
    series = got["series"]
    assert set(series) == set(scalars) | set(histograms)
    for tag, pts in scalars.items():
        assert series[tag]["points"] == len(pts), tag
        assert series[tag]["steps"] == [s for s, _ in pts], tag
        for got_v, (_, want) in zip(series[tag]["values"], pts):
            if math.isnan(want):
                assert got_v == "nan"
            else:
                assert got_v == want, tag  # float32 widened to double: exact
    for tag, n in histograms.items():
        assert series[tag]["kind"] == "tensor_stats" and series[tag]["points"] == n


def _numeric(v):
    return isinstance(v, (int, float))


@pytest.mark.parametrize("path", files("hf_trainer_state", "*.json"), ids=lambda p: p.name)
def test_trainer_state_files(tmp_path, path):
    history = json.load(open(path))["log_history"]
    want = {}
    for entry in history:
        for k, v in entry.items():
            if k != "step" and _numeric(v):
                want.setdefault(k, []).append(entry["step"])
    got = import_json(path, tmp_path / "run")
    assert got["format"] == "hf_trainer_state"
    assert {k: v["points"] for k, v in got["series"].items()} == {k: len(v) for k, v in want.items()}
    assert got["roles"]["loss"] == "loss"


@pytest.mark.parametrize("path", files("csv_metrics", "*.csv"), ids=lambda p: p.name)
def test_csv_files(tmp_path, path):
    rows = list(csv.reader(open(path)))
    header = [c.strip() for c in rows[0]]
    step_col = "step" if "step" in header else "epoch" if "epoch" in header else None
    want = {}
    for row in rows[1:]:
        for name, cell in zip(header, row):
            if name != step_col and cell.strip():
                want[name] = want.get(name, 0) + 1
    got = import_json(path, tmp_path / "run")
    assert {k: v["points"] for k, v in got["series"].items()} == want
    assert "loss" in got["roles"] or "val_loss" in got["roles"]


def test_megatron_golden_values(tmp_path):
    path = TESTDATA / "raw_logs" / "megatron_golden_gpt3_tp2_pp2_a100.json"
    if not path.exists():
        pytest.skip("no test data")
    doc = json.load(open(path))
    got = import_json(path, tmp_path / "run", points=True)
    assert got["format"] == "megatron_golden"
    for metric, body in doc.items():
        steps = sorted(int(s) for s in body["values"])
        assert got["series"][metric]["steps"] == steps
        assert got["series"][metric]["values"] == [body["values"][str(s)] for s in steps]
    assert got["roles"]["loss"] == "lm loss"


def test_pytorch_word_language_model_log_is_all_nan(tmp_path):
    path = TESTDATA / "raw_logs" / "pytorch_wordlm_rnn_relu_all_nan.log"
    if not path.exists():
        pytest.skip("no test data")
    text = path.read_text()
    batches = re.findall(r"^\| epoch +(\d+) \| +(\d+)/ *(\d+) batches \| lr ([\d.]+)", text, re.M)
    got = import_json(path, tmp_path / "run", points=True)
    loss = got["series"]["loss"]
    assert loss["points"] == len(batches) == 70
    assert loss["steps"] == [(int(e) - 1) * int(t) + int(b) for e, b, t, _ in batches]
    assert set(loss["values"]) == {"nan"}
    assert got["series"]["lr"]["values"] == [float(lr) for *_, lr in batches]
    assert got["series"]["valid loss"]["points"] == len(re.findall(r"end of epoch", text)) == 5
    assert got["roles"] == {**got["roles"], "loss": "loss", "val_loss": "valid loss", "lr": "lr"}


@pytest.mark.parametrize("name,overflows", [("deepspeed_chat_sft_opt1.3b.log", 139), ("deepspeed_chat_rlhf_opt1.3b.log", 14)])
def test_deepspeed_logs_keep_every_overflow_skip(tmp_path, name, overflows):
    path = TESTDATA / "raw_logs" / name
    if not path.exists():
        pytest.skip("no test data")
    text = path.read_text()
    assert text.count("OVERFLOW!") == overflows
    got = import_json(path, tmp_path / "run", points=True)
    skip = got["series"]["amp/overflow_skip"]
    assert skip["points"] == overflows
    assert set(skip["values"]) == {1}
    assert got["roles"]["overflow_skip"] == "amp/overflow_skip"
    assert got["roles"]["loss_scale"] == "amp/loss_scale"
    # The scale after each skip: "reducing to X", or the attempted scale when only the
    # hysteresis dropped.
    want = []
    for line in text.splitlines():
        if "OVERFLOW!" in line:
            m = re.search(r"reducing to (\d+)", line) or re.search(r"Attempted loss scale: (\d+)", line)
            want.append(int(m.group(1)))
    assert got["series"]["amp/loss_scale"]["values"] == want
    if name.startswith("deepspeed_chat_sft"):
        steps = re.findall(r" step=(\d+), skipped=(\d+)", text)
        assert got["series"]["skipped"]["steps"] == [int(s) for s, _ in steps]
        assert got["series"]["skipped"]["values"][-1] == overflows
    else:
        assert got["series"]["act_loss"]["points"] == text.count("act_loss:")


def test_every_external_file_diagnoses(tmp_path):
    """`trainscope diagnose FILE` reads every file (profiler traces belong to another issue)."""
    paths = [p for p in sorted(TESTDATA.rglob("*")) if p.is_file() and p.name != "SOURCES.md" and "profiler_traces" not in p.parts]
    if not paths:
        pytest.skip("no test data")
    for path in paths:
        r = run_cli("diagnose", "--json", path)
        assert r.returncode in (0, 1), (path, r.stderr)
        doc = json.loads(r.stdout)
        assert doc["format"] != "unknown" and doc["source"] == str(path), path


def test_diagnose_a_logdir_of_tensorboard_runs(tmp_path):
    src = TESTDATA / "tfevents"
    if not src.exists():
        pytest.skip("no test data")
    for i, name in enumerate(["sb3_dqn_seed1.tfevents", "sb3_dqn_seed2.tfevents"]):
        d = tmp_path / "logs" / f"seed{i + 1}"
        d.mkdir(parents=True)
        (d / f"events.out.tfevents.{i}.host").write_bytes((src / name).read_bytes())
    r = run_cli("diagnose", "--json", tmp_path / "logs")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "logdir"
    assert [run["format"] for run in doc["runs"]] == ["tfevents", "tfevents"]
    r = run_cli("import", tmp_path / "logs", "-o", tmp_path / "imported")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "imported" / "seed1" / "trainscope.db").exists()
    assert (tmp_path / "imported" / "seed2" / "trainscope.db").exists()


# ---- bad input ----

def _masked_crc(b):
    """CRC-32C, bit by bit (independent of trainscope's table), masked as TFRecord does."""
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    c ^= 0xFFFFFFFF
    return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _record(data):
    header = struct.pack("<Q", len(data))
    return header + _masked_crc(header) + data + _masked_crc(data)


def _scalar_event(tag, step, value):
    tag = tag if isinstance(tag, bytes) else tag.encode()
    val = b"\x0a" + bytes([len(tag)]) + tag + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + bytes([len(val)]) + val
    return b"\x09" + struct.pack("<d", 1.0) + b"\x10" + bytes([step]) + b"\x2a" + bytes([len(summary)]) + summary


def _events(n, tag="loss"):
    return b"".join(_record(_scalar_event(tag, i, float(i))) for i in range(n))


def test_truncated_event_file_keeps_complete_records(tmp_path):
    good = _events(5)
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(good + _record(_scalar_event("loss", 5, 5.0))[:7])
    got = import_json(path, tmp_path / "run")
    assert got["series"]["loss"]["points"] == 5
    assert got["import"]["partial_tail"] is True
    assert got["import"]["resume_offset"] == len(good)


def test_corrupted_crc_is_skipped_and_named(tmp_path):
    data = bytearray(_events(5))
    rec = len(_record(_scalar_event("loss", 0, 0.0)))
    data[2 * rec + 20] ^= 0xFF  # inside the third record's data
    path = tmp_path / "events.out.tfevents.2"
    path.write_bytes(bytes(data))
    r = run_cli("import", path, "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert f"offset {2 * rec}: expected record data matching its checksum" in r.stderr
    assert "4 scalar points" in r.stdout


def test_length_of_two_to_the_sixty(tmp_path):
    header = struct.pack("<Q", 1 << 60)  # with a valid checksum: only the size is wrong
    path = tmp_path / "events.out.tfevents.3"
    path.write_bytes(_events(3) + header + _masked_crc(header) + b"data")
    r = run_cli("import", path, "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert f"offset {len(_events(3))}: expected a record length of at most" in r.stderr
    assert "1152921504606846976" in r.stderr
    assert "kept the 3 points" in r.stderr


def test_invalid_utf8_tag_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "events.out.tfevents.4"
    path.write_bytes(_record(_scalar_event(b"bad\xff", 1, 1.0)) + _events(2))
    r = run_cli("import", path, "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert "offset 0: value skipped" in r.stderr and "UTF-8" in r.stderr
    assert "2 scalar points" in r.stdout


def test_json_array_is_refused_clearly(tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text('[{"step": 1, "loss": 2.0}]')
    r = run_cli("diagnose", path)
    assert r.returncode == 2
    assert f"{path}: line 1: expected a JSON object" in r.stderr and "found a JSON array" in r.stderr


def test_ragged_csv_rows_are_reported_by_line(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss,acc\n1,0.5,0.1\n2,0.4\n3,0.3,0.3,9\n4,0.2,0.4\n")
    got = import_json(path, tmp_path / "run")
    assert got["series"]["loss"]["points"] == 2
    assert got["import"]["damaged"] == 2
    assert any(f"{path}: line 3: expected 3 cells" in w for w in got["import"]["warnings"])


def test_five_gigabyte_line_is_not_loaded(tmp_path):
    path = tmp_path / "train.log"
    with open(path, "wb") as f:
        f.write(b"iter 1: loss 2.5, time 10ms, mfu 1%\n")
        f.write(b"x" * (1 << 20))  # the start of a line that never ends ...
        f.truncate(5 << 30)  # ... sparse to 5 GB, without a newline
    r = subprocess.run(["/usr/bin/time", "-f", "%M", str(CLI), "import", str(path), "-o", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "line 2 (offset 36)" in r.stderr and "without a newline" in r.stderr
    assert "kept the 3 points" in r.stderr
    peak_kb = int(r.stderr.strip().splitlines()[-1])
    assert peak_kb < 200 * 1024, f"peak RSS {peak_kb} kB"


def test_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    r = run_cli("diagnose", path)
    assert r.returncode == 2
    assert f"{path}: empty file" in r.stderr


def test_directory_of_unrelated_files(tmp_path):
    (tmp_path / "notes.txt").write_text("Just notes.\nNothing here.\n")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    r = run_cli("diagnose", tmp_path)
    assert r.returncode == 2
    assert "no runs found among 2 files" in r.stderr
    r = run_cli("import", tmp_path, "-o", tmp_path / "out")
    assert r.returncode == 2 and "nothing to import among 2 files" in r.stderr


def test_role_override_is_stored(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("step,objective,other_loss\n1,2.0,3.0\n2,1.5,2.5\n")
    got = import_json(path, tmp_path / "run", "--role", "loss=objective")
    assert got["roles"]["loss"] == "objective"


# What SOURCES.md names for each external file, as the doctor's findings must say it
# (issue 5). Anomalies a file cannot show are in docs/ingest.md ("The doctor on the
# external files") with the reason, and are asserted *absent* below where a detector could
# be tempted (a doctor that cries divergence on a converging loss is wrong, not thorough).
ANOMALY_CODES = {
    "tfevents/hf_t5_summarization_trainer.tfevents": {"GRAD_EXPLOSION", "LOSS_PLATEAU"},  # 35.6 vs ~2.4; flat loss
    "tfevents/keras_tf1_cnn_val_divergence.tfevents": {"OVERFITTING"},          # val 0.84 -> 3.73
    "tfevents/yolov8_fire_smoke.tfevents": {"DUPLICATE_STEPS"},                 # a value per batch at the epoch's step
    "tfevents/tb_reducer_duplicate_steps_run1.tfevents": {"DUPLICATE_STEPS"},   # steps 90..99 written twice
    "hf_trainer_state/t5_summarization_trainer_state.json": {"GRAD_EXPLOSION", "LOSS_PLATEAU"},
    "hf_trainer_state/star_draft_gradnorm_spikes.json": {"GRAD_EXPLOSION"},      # 82.4 vs ~4.8
    "hf_trainer_state/multi_eval_groups_trainer_state.json": {"OVERFITTING"},
    "raw_logs/deepspeed_chat_sft_opt1.3b.log": {"FP16_OVERFLOW"},               # 139 skips
    "raw_logs/deepspeed_chat_rlhf_opt1.3b.log": {"FP16_OVERFLOW"},              # 14 skips
    "raw_logs/pytorch_wordlm_rnn_relu_all_nan.log": {"NONFINITE_LOSS"},         # nan from the first batch
    "csv_metrics/lightning_pinn_stuck_huge_v13.csv": {"LOSS_PLATEAU", "LOSS_MAGNITUDE"},  # flat at 3.77e25
    # SOURCES.md says DIVERGENCE (max 1.48e14 against a median of 13.4), but the maximum is
    # at step 1 and the loss falls 12 decades from there: what is wrong is its scale.
    "csv_metrics/lightning_pinn_diverge_v17.csv": {"LOSS_MAGNITUDE"},
    "csv_metrics/lightning_pinn_spiky_v0.csv": {"LOSS_SPIKE"},                  # 0.07 -> 17.9 at step 552
    # SOURCES.md says "none" here, but val/box_loss rises from 1.23 (epoch 3) to 1.39-1.43
    # while train/box_loss falls 1.13 -> 0.72: over-fitting of the box regression (mAP holds
    # at ~0.8). docs/ingest.md has the numbers.
    "csv_metrics/yolo_wheat_weed_results.csv": {"OVERFITTING"},
}
# Codes that would be false alarms on these files.
WRONG_CODES = {
    "raw_logs/deepspeed_chat_rlhf_opt1.3b.log": {"NEGATIVE_LOSS"},   # act_loss is a PPO policy loss
    "csv_metrics/lightning_pinn_diverge_v17.csv": {"LOSS_DIVERGENCE"},  # falls 1.4e13 -> 12.9 (docs/ingest.md)
}
# SOURCES.md: anomalies "none".
HEALTHY_FILES = [
    "tfevents/sb3_dqn_seed2.tfevents", "tfevents/pt_histogram_demo.tfevents", "tfevents/pt_hparams_demo.tfevents",
    "tfevents/pt_pr_curve_demo.tfevents", "tfevents/tb_reducer_strict_run1.tfevents",
    "hf_trainer_state/tinyllama_sft_trl_trainer_state.json", "raw_logs/megatron_golden_gpt3_tp2_pp2_a100.json",
    "csv_metrics/lightning_slm_lm_v0.csv", "csv_metrics/yolov8_fire_smoke_results.csv",
]


def _diagnosis(rel):
    path = TESTDATA / rel
    if not path.exists():
        pytest.skip(f"no test data {rel}")
    r = run_cli("diagnose", "--json", path)
    assert r.returncode in (0, 1), (rel, r.stderr)
    return json.loads(r.stdout)


@pytest.mark.parametrize("rel", sorted(ANOMALY_CODES), ids=lambda r: r.split("/")[-1])
def test_doctor_names_the_anomaly_sources_md_names(rel):
    d = _diagnosis(rel)
    codes = {f["code"] for f in d["findings"]}
    assert ANOMALY_CODES[rel] <= codes, (rel, [(f["code"], f["severity"], f["summary"]) for f in d["findings"]])
    assert not (WRONG_CODES.get(rel, set()) & codes), rel


@pytest.mark.parametrize("rel", sorted(WRONG_CODES), ids=lambda r: r.split("/")[-1])
def test_doctor_does_not_invent_anomalies(rel):
    d = _diagnosis(rel)
    wrong = [(f["code"], f["summary"]) for f in d["findings"] if f["code"] in WRONG_CODES[rel]]
    assert not wrong, rel


@pytest.mark.parametrize("rel", HEALTHY_FILES, ids=lambda r: r.split("/")[-1])
def test_doctor_is_quiet_on_the_healthy_files(rel):
    d = _diagnosis(rel)
    alarms = [(f["code"], f["severity"], f["summary"]) for f in d["findings"] if f["severity"] != "info"]
    assert not alarms, rel


def test_pinn_loss_magnitude_names_the_maximum_the_end_and_the_unbalanced_terms():
    rel = "csv_metrics/lightning_pinn_diverge_v17.csv"
    d = _diagnosis(rel)
    with open(TESTDATA / rel, newline="") as f:
        rows = list(csv.DictReader(f))
    loss = [(int(r["step"]), float(r["mean_loss"])) for r in rows if r["mean_loss"]]
    max_step, max_value = max(loss, key=lambda p: p[1])
    finding = next(f for f in d["findings"] if f["code"] == "LOSS_MAGNITUDE")
    ev = finding["evidence"]
    assert (ev["max_step"], ev["max"]) == (max_step, max_value) == (1, 148074584342528.0)
    assert (ev["last_step"], ev["last"]) == loss[-1]
    # "initial" is the first value logged; the summary's level is the median of the first 10.
    assert ev["initial"] == loss[0][1]
    assert ev["initial_level"] == pytest.approx(statistics.median(v for _, v in loss[:10]))
    terms = {t["tag"] for t in ev["terms"]}
    assert terms == {"Conductor_Copper_loss", "Dielectric_Air_loss", "initial_phi_port_port1_loss",
                     "initial_phi_port_port2_loss"}
    assert ev["terms_span_decades"] > 30  # copper ~1e13 against air ~1e-20
    assert finding["causes"][0]["id"] == "unbalanced_loss_terms"


def test_deepspeed_overflow_findings_carry_count_steps_and_scale():
    text = (TESTDATA / "raw_logs" / "deepspeed_chat_sft_opt1.3b.log")
    if not text.exists():
        pytest.skip("no test data")
    scales = [int((re.search(r"reducing to (\d+)", line) or re.search(r"loss scale: (\d+)", line)).group(1))
              for line in text.read_text().splitlines() if "OVERFLOW!" in line]
    d = _diagnosis("raw_logs/deepspeed_chat_sft_opt1.3b.log")
    f = next(f for f in d["findings"] if f["code"] == "FP16_OVERFLOW")
    ev = f["evidence"]
    assert ev["skipped"] == len(scales) == 139
    assert ev["skipped_counter"]["value"] == 139  # DeepSpeed's own skipped=K agrees
    # 6 skips at the start while the scale fell 65536 -> 2048, then one overflow cycle (2
    # skips with hysteresis 2) per 100-step growth window: at most 4 in any 200 steps. Normal.
    assert ev["calibration_skips"] == 6
    assert ev["skip_steps"][:6] == [1, 2, 3, 4, 5, 6]
    assert ev["max_skips_in_window"] <= 4
    assert ev["loss_scale"]["min"] == min(scales) == 2048
    assert f["severity"] == "info"
    # The log prints no training loss: the doctor says so and lists what it saw.
    reason = next(n["reason"] for n in d["not_checked"] if n["check"] == "loss curve")
    assert "ppl" in reason and "amp/loss_scale" in reason
    rlhf = _diagnosis("raw_logs/deepspeed_chat_rlhf_opt1.3b.log")
    g = next(f for f in rlhf["findings"] if f["code"] == "FP16_OVERFLOW")
    assert g["evidence"]["skipped"] == 14 and g["severity"] == "info"


def test_megatron_text_log_skips_and_nan_iterations(tmp_path):
    # Megatron-LM's training log line (its format; values of a small fp16 run): the
    # per-interval counters become FP16_OVERFLOW and, for the NaN iteration, NONFINITE_LOSS.
    lines = []
    for it in range(10, 1010, 10):
        skipped = 5 if it == 10 else (1 if it == 700 else 0)
        nan = 1 if it == 700 else 0
        lines.append(f" iteration {it:8d}/  500000 | consumed samples: {it * 256:12d} | elapsed time per iteration (ms): "
                     f"512.3 | learning rate: 1.500000E-04 | global batch size:   256 | lm loss: {9.5 - it / 500:.6E} | "
                     f"loss scale: {65536.0 if it > 10 else 2048.0} | grad norm: 2.345 | number of skipped iterations: "
                     f"{skipped:3d} | number of nan iterations: {nan:3d} |")
    path = tmp_path / "megatron_train.log"
    path.write_text("\n".join(lines) + "\n")
    r = run_cli("diagnose", "--json", path)
    d = json.loads(r.stdout)
    by_code = {f["code"]: f for f in d["findings"]}
    assert by_code["FP16_OVERFLOW"]["evidence"]["skipped"] == 6
    assert by_code["FP16_OVERFLOW"]["evidence"]["calibration_skips"] == 5
    assert by_code["FP16_OVERFLOW"]["location"] == "number of skipped iterations"
    assert by_code["NONFINITE_LOSS"]["step"] == 700
    assert by_code["NONFINITE_LOSS"]["location"] == "number of nan iterations"


@pytest.mark.parametrize("name", [p.name for p in files("tfevents", "*.tfevents")])
def test_an_imported_run_keeps_its_own_times(tmp_path, name):
    """Start and end of an imported run are its first and last recorded wall times, not the
    time of the import (`trainscope runs` showed 498940.1h: the import time since 1970)."""
    import time

    import trainscope as ts

    got = import_json(TESTDATA / "tfevents" / name, tmp_path / "run")
    meta = ts.open_run(tmp_path / "run").meta
    if not any(s["points"] for s in got["series"].values()):
        assert meta["start_time"] == 0, meta  # nothing with a wall time was imported: unknown, not now
        return
    assert 0 < meta["start_time"] <= meta["end_time"] < time.time() - 86400, meta
    listing = run_cli("runs", str(tmp_path))
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(meta["start_time"]))
    assert listing.returncode == 0 and started in listing.stdout, listing.stdout
