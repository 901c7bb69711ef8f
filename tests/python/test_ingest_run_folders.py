"""W&B run folders and datastores, MLflow runs, and the text-log shapes of issue 17, written
here from the formats' descriptions (wandb/sdk/internal/datastore.py's block log, the
wandb_internal.proto Record fields, MLflow's file store) by a few lines of Python that share
no code with trainscope's readers, then imported and checked point by point."""

import json
import os
import math
import pathlib
import sqlite3
import struct
import subprocess
import zlib

import pytest

from conftest import CLI, REPO, run_cli

pytestmark = pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built")

BLOCK = 32768


# ---- a W&B datastore writer ----

def _varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(num, payload):
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def _item(key, value_json):
    return _field(1, key.encode()) + _field(16, value_json.encode())


def history_record(step, items):
    body = b"".join(_field(1, _item(k, v)) for k, v in items) + _field(2, _field(1, step))
    return _field(1, step + 10) + _field(2, body)


def datastore(records, pad_to=None):
    """The bytes of a run-*.wandb file holding `records` (serialized Record messages)."""
    out = bytearray(b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00")

    def chunk(kind, data):
        crc = zlib.crc32(data, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
        out.extend(struct.pack("<IHB", crc, len(data), kind) + data)

    for data in records:
        left = BLOCK - len(out) % BLOCK
        if left < 7:
            out.extend(b"\x00" * left)
            left = BLOCK
        if len(data) + 7 <= left:
            chunk(1, data)
            continue
        chunk(2, data[:left - 7])
        rest = data[left - 7:]
        while len(rest) > BLOCK - 7:
            chunk(3, rest[:BLOCK - 7])
            rest = rest[BLOCK - 7:]
        chunk(4, rest)
    return bytes(out)


def _run_records(n):
    recs = [_field(21, b""), _field(17, _field(1, b"r8x") + _field(3, b"proj") + _field(8, b"brave-run"))]
    recs.append(_field(5, _field(1, _item("num_classes", "2")) + _field(1, _item("_wandb", '{"e": "x@y"}'))))
    for s in range(n):
        items = [("train/loss", repr(1.0 / (s + 1))), ("_step", str(s)), ("_timestamp", str(1.7e9 + s))]
        if s == 7:
            items.append(("val/acc", "NaN"))
        if s % 50 == 0:
            items.append(("examples", '{"_type": "table", "ncols": 2}'))  # media: not a point
        recs.append(history_record(s, items))
    return recs


def import_run(src, tmp_path):
    out = tmp_path / "run"
    r = run_cli("import", "--json", "--points", src, "-o", out)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert len(report) == 1
    db = sqlite3.connect(out / "trainscope.db")
    meta = dict(db.execute("SELECT key, value FROM meta"))
    db.close()
    return report[0], meta, r.stderr


def test_wandb_datastore_history_summary_config_and_exit(tmp_path):
    recs = _run_records(300)
    # A history row larger than a block: FIRST, MIDDLE, LAST chunks.
    recs.append(history_record(300, [("train/loss", "0.5"), ("big", "0.25"), ("blob", json.dumps("x" * 70000))]))
    recs.append(_field(3, _field(1, _item("train/loss", "0.5"))))
    recs.append(_field(18, _field(1, 3) + _field(2, 42)))
    recs.append(_field(22, b""))
    path = tmp_path / "run-r8x.wandb"
    path.write_bytes(datastore(recs))
    rep, meta, _ = import_run(path, tmp_path)
    assert rep["format"] == "wandb/datastore"
    loss = rep["series"]["train/loss"]
    assert loss["steps"] == list(range(301))
    assert loss["values"][:3] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert rep["series"]["big"]["values"] == [0.25]  # the record split over three chunks
    assert rep["series"]["val/acc"]["values"] == ["nan"]
    assert "examples" not in rep["series"] and "_step" not in rep["series"]
    assert json.loads(meta["config"]) == {"num_classes": 2}  # _wandb (host, e-mail) left out
    assert json.loads(meta["wandb_summary"]) == {"train/loss": 0.5}
    assert meta["wandb_exit_code"] == "3" and meta["wandb_run_id"] == "r8x"
    assert rep["import"]["partial_tail"] is False


@pytest.mark.parametrize("cut", [7, 20, 32768 - 3, 32768 + 11, None])
def test_a_cut_datastore_keeps_the_records_before_the_cut(tmp_path, cut):
    data = datastore(_run_records(2000))
    cut_at = len(data) - 5 if cut is None else cut
    path = tmp_path / "run-cut.wandb"
    path.write_bytes(data[:cut_at])
    # Independent count: complete history records whose chunks end before the cut.
    rep_full, _, _ = import_run(_write(tmp_path / "full.wandb", data), tmp_path / "a")
    full_steps = rep_full["series"]["train/loss"]["steps"]
    rep, meta, err = import_run(path, tmp_path / "b")
    steps = rep["series"].get("train/loss", {}).get("steps", [])
    assert steps == full_steps[:len(steps)]  # a prefix, in order, nothing invented
    assert rep["import"]["partial_tail"] is True
    assert meta.get("wandb_complete") == "false"
    assert "cut" in err or "without exit" in err
    if cut is None:
        assert len(steps) == len(full_steps) - 1  # only the last record was lost


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_damaged_chunk_is_skipped_with_its_block_and_named(tmp_path):
    data = bytearray(datastore(_run_records(3000)))
    data[40000] ^= 0xFF  # inside the second block
    path = _write(tmp_path / "run-bad.wandb", bytes(data))
    rep, _, err = import_run(path, tmp_path)
    steps = rep["series"]["train/loss"]["steps"]
    assert 2500 < len(steps) < 3000 and steps == sorted(steps)
    assert rep["import"]["damaged"] >= 1
    assert "CRC mismatch" in err and "offset" in err


def test_wandb_run_folder_is_one_run_with_the_richest_history(tmp_path):
    run = tmp_path / "wandb" / "run-20240101_000000-abc"
    files = run / "files"
    files.mkdir(parents=True)
    (run / "run-abc.wandb").write_bytes(datastore([history_record(s, [("train/loss", str(3 - s / 10))]) for s in range(0, 20, 5)]))
    lines = ["\x1b[1mstep 0: train loss 3.0100 BPC, val loss 3.0200 BPC\x1b[0m"]
    lines += [f"iter {i}: loss {3 - i / 100:.4f} BPC, time 10.0ms, mfu 5.00%" for i in range(0, 200, 10)]
    lines += ["Traceback (most recent call last):", '  File "train.py", line 3', "torch.cuda.OutOfMemoryError: CUDA out of memory."]
    (files / "output.log").write_text("\n".join(lines) + "\n")
    (files / "wandb-summary.json").write_text('{"train/loss": 1.0, "_step": 15}')
    (files / "config.yaml").write_text("wandb_version: 1\n_wandb:\n  desc: null\n  value:\n    e: secret\n"
                                       "batch_size:\n  desc: null\n  value: 12\n")
    (tmp_path / "wandb" / "latest-run").symlink_to(run)
    # The wandb/ folder: one run (the symlink is not a second one).
    r = run_cli("diagnose", "--json", tmp_path / "wandb")
    d = json.loads(r.stdout)
    assert [x["format"] for x in d["runs"]] == ["wandb/console"]
    rep, meta, _ = import_run(run, tmp_path)
    assert rep["format"] == "wandb/console"  # 20 console points beat 4 history rows
    assert rep["series"]["loss"]["steps"] == list(range(0, 200, 10))
    assert rep["series"]["loss"]["values"][1] == pytest.approx(2.9)
    assert rep["series"]["val loss"]["values"] == [3.02]
    assert json.loads(meta["config"]) == {"batch_size": 12}
    assert meta["exception"].startswith("torch.cuda.OutOfMemoryError")
    sources = {s["file"]: s for s in json.loads(meta["wandb_sources"])}
    assert set(sources) == {"run-abc.wandb", "files/output.log", "files/wandb-summary.json", "files/config.yaml"}
    assert sources["files/output.log"]["used"] and not sources["run-abc.wandb"]["used"]
    assert sources["run-abc.wandb"]["points"] == 4
    d = json.loads(run_cli("diagnose", "--json", run).stdout)
    crash = next(f for f in d["findings"] if f["code"] == "RUN_CRASHED")
    assert crash["severity"] == "critical" and crash["causes"][0]["id"] == "out_of_memory"


def test_mlflow_run(tmp_path):
    run = tmp_path / "mlruns" / "3" / "f00d"
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "tags").mkdir()
    (tmp_path / "mlruns" / "3" / "meta.yaml").write_text("experiment_id: '3'\nname: my experiment\n")
    (run / "meta.yaml").write_text("run_id: f00d\nrun_name: brave\nstatus: 4\nstart_time: 1700000000000\nend_time: 1700000500000\n")
    (run / "metrics" / "train" / "loss").write_text("".join(f"{1700000000000 + i} {2.0 / (i + 1)} {i * 10}\n" for i in range(8)))
    (run / "metrics" / "val_acc").write_text("1700000000000 0.5\n1700000000001 nan\nnot a line\n1700000000002 0.7\n")
    (run / "params" / "lr").write_text("0.01")
    (run / "tags" / "mlflow.user").write_text("someone")
    rep, meta, err = import_run(run, tmp_path)
    assert rep["format"] == "mlflow"
    assert rep["series"]["train/loss"]["steps"] == [i * 10 for i in range(8)]
    assert rep["series"]["val_acc"]["steps"] == [0, 1, 2]  # no step column: the line's index
    assert rep["series"]["val_acc"]["values"] == [0.5, "nan", 0.7]
    assert rep["import"]["damaged"] == 1 and "line 3" in err
    assert json.loads(meta["config"]) == {"lr": "0.01"}
    assert meta["mlflow_status"] == "failed" and meta["mlflow_experiment"] == "my experiment"
    assert sorted(json.loads(meta["mlflow_files"])) == sorted(
        ["meta.yaml", "../meta.yaml", "metrics/train/loss", "metrics/val_acc", "params/lr", "tags/mlflow.user"])
    # The whole mlruns/ folder: each run is one source.
    d = json.loads(run_cli("diagnose", "--json", tmp_path / "mlruns").stdout)
    assert [x["format"] for x in d["runs"]] == ["mlflow"]


# ---- text-log shapes ----

def _import_text(tmp_path, text, name="train.log"):
    p = tmp_path / name
    p.write_text(text)
    return import_run(p, tmp_path)


def test_preamble_ansi_compact_pairs_and_repeated_ranks(tmp_path):
    preamble = "".join(f"    line_{i} = {i}  # part of the script's source, printed first\n" for i in range(90))
    preamble += "+-----------------------------------------------------------------------------+\n"
    body = ""
    for s in range(0, 60, 10):
        for rank in range(2):  # two ranks print every record
            body += f"[rank{rank}]:step:{s}/100 val_loss:{4 - s / 100:.4f} train_time:{s * 10}ms step_avg:nanms\n"
    rep, meta, err = _import_text(tmp_path, preamble + body)
    assert rep["format"] == "text_log"
    assert rep["series"]["val_loss"]["steps"] == list(range(0, 60, 10))  # once each, not twice
    assert rep["series"]["train_time_ms"]["values"][1] == 100.0
    assert "repeated" in err


def test_a_console_line_with_a_comma_is_not_a_csv_header(tmp_path):
    text = "\x1b[32mINFO\x1b[0m | starting, please wait\n"
    text += "".join(f"\x1b[1m{{'loss': {1.3 + i / 10:.2f}, 'grad_norm': {10.0 ** i:.1f}, 'epoch': {i / 10}}}\x1b[0m\n" for i in range(6))
    text += "100%|##########| 6/6 [00:01<00:00, 5.0it/s]\r{'train_runtime': 12.5, 'epoch': 0.6}\n"
    rep, _, _ = _import_text(tmp_path, text)
    assert rep["format"] == "text_log"
    assert rep["series"]["loss"]["values"] == pytest.approx([1.3, 1.4, 1.5, 1.6, 1.7, 1.8])
    assert rep["series"]["grad_norm"]["values"][-1] == 1e5
    assert rep["series"]["train_runtime"]["values"] == [12.5]  # after the progress bar's \r


def test_llmc_and_fairseq_lines(tmp_path):
    text = "".join(f"s:{s} trl:{11 - s / 10:.4f} lr:0.000{s + 1} norm:{1 + s / 100:.2f}\n" for s in range(30))
    text += "s:30 tel:7.5\n"
    rep, _, _ = _import_text(tmp_path, text, "main.log")
    assert rep["format"] == "text_log/llmc"
    assert rep["roles"]["loss"] == "trl" and rep["roles"]["val_loss"] == "tel" and rep["roles"]["grad_norm"] == "norm"
    assert rep["series"]["trl"]["steps"] == list(range(30))
    fair = ('[2022-04-08 18:40:57,965][fairseq_cli.train][INFO] - {\'_name\': None, \'common\': {\'log_interval\': 200}}\n'
            '[2022-04-08 18:48:05,372][train_inner][INFO] - {"epoch": 1, "loss": "9.276", "num_updates": "200", "lr": "3.125e-06"}\n'
            '[2022-04-08 18:55:11,305][fairseq.trainer][INFO] - NOTE: gradient overflow detected, ignoring gradient, '
            'setting loss scale to: 64.0\n'
            '[2022-04-08 18:58:04,035][valid][INFO] - {"epoch": 1, "valid_loss": "6.389", "valid_num_updates": "479"}\n')
    (tmp_path / "f").mkdir()
    rep, _, _ = _import_text(tmp_path / "f", fair, "hydra_train.log")
    assert rep["series"]["loss"]["steps"] == [200] and rep["series"]["loss"]["values"] == [9.276]
    assert rep["series"]["valid_loss"]["steps"] == [479]
    assert rep["series"]["amp/loss_scale"]["values"] == [64.0]
    assert math.isclose(rep["series"]["lr"]["values"][0], 3.125e-06)


def test_llamafactory_current_steps_is_the_step(tmp_path):
    rows = [{"current_steps": 5 * (i + 1), "total_steps": 40, "loss": 1.5 - i / 100, "epoch": 0.01 * i,
             "elapsed_time": "0:01:00", "throughput": "0.00"} for i in range(8)]
    rows.append({"current_steps": 40, "total_steps": 40, "loss": None, "epoch": 0.1})
    rep, _, _ = _import_text(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), "trainer_log.jsonl")
    assert rep["format"] == "jsonl"
    assert rep["series"]["loss"]["steps"] == [5 * (i + 1) for i in range(8)]


def test_mmdet_log_json_counts_iterations_across_epochs(tmp_path):
    rows = [{"env_info": "sys.platform: linux", "seed": 0}]
    for epoch in (1, 2):
        for it in (50, 100, 150):
            rows.append({"mode": "train", "epoch": epoch, "iter": it, "lr": 0.02, "loss": 2.0 / (epoch * it), "time": 0.4})
        rows.append({"mode": "val", "epoch": epoch, "iter": 500, "lr": 0.02, "bbox_mAP": 0.1 * epoch})
    rep, _, _ = _import_text(tmp_path, "".join(json.dumps(r) + "\n" for r in rows), "20240101_000000.log.json")
    assert rep["series"]["loss"]["steps"] == [50, 100, 150, 200, 250, 300]
    assert rep["series"]["val/bbox_mAP"]["steps"] == [150, 300]


def test_torchtitan_and_megatron_rank_prefixed_lines(tmp_path):
    text = "".join(f"[titan] 2024-05-01 10:00:0{s} - root - INFO - step: {s:2d}  loss: {12 - s:7.4f}  memory: 34.5GiB(36.3%)"
                   f"  tps: 1,{s}34  mfu: 12.{s}%\n" for s in range(1, 6))
    rep, _, _ = _import_text(tmp_path, text)
    assert rep["series"]["loss"]["steps"] == [1, 2, 3, 4, 5]
    assert rep["series"]["tps"]["values"][0] == 1134
    assert rep["series"]["memory_GiB"]["values"][0] == 34.5
    (tmp_path / "m").mkdir()
    text = "".join(f"[default{r}]: iteration {i}/ 100 | lm loss: {9 - i / 10:.6E} | grad norm: 1.5 |\n"
                   for i in range(1, 4) for r in (0, 1))
    rep, _, err = _import_text(tmp_path / "m", text)
    assert rep["series"]["lm loss"]["steps"] == [1, 2, 3]  # each rank's copy kept once
    # A log appended to itself (a resumed run) is not a repeat: steps going back are kept.
    (tmp_path / "r").mkdir()
    rep, _, _ = _import_text(tmp_path / "r", text * 2)
    assert rep["series"]["lm loss"]["steps"] == [1, 2, 3, 1, 2, 3]


def test_real_wandb_and_mlflow_runs_imported_are_served_like_recorded_runs(tmp_path):
    """A W&B run folder and an MLflow run of the corpus, imported into one logdir, are in the
    dashboard's runs list with their health and final metrics, and their series read back."""
    import http.client
    import re
    import signal
    import urllib.parse
    root = pathlib.Path(os.environ.get("TRAINSCOPE_TESTDATA_ROOT", REPO.parent / "shared" / "testdata")) / "external-2"
    wandb_run = root / "wandb" / "nanogpt_shakespeare_char_overfit_kt2awly2"
    if not wandb_run.is_dir():
        pytest.skip(f"corpus not here: {root}")
    mlflow_run = next((root / "mlflow" / "swahili_asr_keras_ctc_plateau" / "mlruns" / "1").glob("*/meta.yaml")).parent
    logdir = tmp_path / "logs"
    for name, src in (("from-wandb", wandb_run), ("from-mlflow", mlflow_run)):
        r = run_cli("import", src, "-o", logdir / name)
        assert r.returncode == 0, r.stderr
    proc = subprocess.Popen([str(CLI), "serve", str(logdir), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        port = int(re.search(r":(\d+)/", proc.stdout.readline()).group(1))

        def get(target):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", target)
            res = conn.getresponse()
            body = res.read()
            conn.close()
            assert res.status == 200, (target, body[:300])
            return json.loads(body)

        runs = {r["name"]: r for r in get("/api/runs")["runs"]}
        assert {"from-wandb", "from-mlflow"} <= set(runs)
        assert runs["from-wandb"]["health"] in ("warning", "critical")  # the overfitting nanoGPT run
        for name in ("from-wandb", "from-mlflow"):
            series = [s for s in get(f"/api/run?run={name}")["series"] if s["kind"] == "scalar" and s["points"] > 1]
            assert series, name
            buckets = get(f"/api/scalars?run={name}&tag={urllib.parse.quote(series[0]['tag'])}&width=50")
            assert buckets, name
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
