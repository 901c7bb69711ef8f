"""`trainscope trace` on real PyTorch profiler traces, against Holistic Trace Analysis.

tests/data/hta_reference.json holds HTA 0.5.0's numbers for every trace in
../shared/testdata/external/profiler_traces/ (written by bench/perf/hta_compare.py
--reference; its "produced_by" says how), so HTA need not be installed here. Then real CPU
trainings profiled with torch.profiler: a slow DataLoader (num_workers=0, a sleep in
__getitem__) is flagged DATALOADER_BOTTLENECK, the same training with a fast loader is not,
through the CLI and through run.profile(steps=...) in a watched run.
"""

import gzip
import json
import pathlib
import shutil
import time

import pytest

from conftest import REPO, run_cli

TRACES = REPO.parent / "shared" / "testdata" / "external" / "profiler_traces"
REFERENCE = json.loads((REPO / "tests" / "data" / "hta_reference.json").read_text())
TEMPORAL_KEYS = ["idle_us", "compute_us", "non_compute_us", "kernel_us", "idle_pct", "compute_pct", "non_compute_pct"]

pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/testdata is not here")


def trace_json(*paths, extra=()):
    result = run_cli("trace", "--json", *extra, *paths)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(REFERENCE["traces"]))
def test_temporal_breakdown_agrees_with_hta(name):
    hta = REFERENCE["traces"][name]
    out = trace_json(TRACES / name)
    assert len(out["ranks"]) == 1
    rank = out["ranks"][0]
    assert rank["rank"] == hta["hta"]["rank"]
    mine = rank["temporal"]
    assert sorted(mine) == sorted(TEMPORAL_KEYS)
    if "temporal_error" in hta["hta"]:
        # HTA fails on a trace without GPU kernels (IndexError); trainscope says it is CPU-only.
        assert not rank["has_gpu"]
        assert all(mine[k] == 0 for k in TEMPORAL_KEYS)
        return
    exact = hta["hta_no_ns_rounding"]["temporal"]
    for key in TEMPORAL_KEYS[:4]:
        # HTA without its ns rounding: the same definition on the same numbers.
        assert mine[key] == pytest.approx(exact[key], rel=1e-6, abs=1e-3), key
    for key in TEMPORAL_KEYS[4:]:
        assert mine[key] == pytest.approx(exact[key], abs=0.011), key
        # HTA as it comes rounds fractional-microsecond events inward: within 1 point of kernel time.
        assert abs(mine[key] - hta["hta"]["temporal"][key]) <= 1.0, key
    # Its span moves by under 1 us at each end (ts rounded up, end down).
    assert abs(mine["kernel_us"] - hta["hta"]["temporal"]["kernel_us"]) < 2


@pytest.mark.parametrize("name", sorted(n for n, v in REFERENCE["traces"].items() if "idle_breakdown" in v["hta_no_ns_rounding"]))
def test_idle_breakdown_agrees_with_hta(name):
    hta = REFERENCE["traces"][name]["hta_no_ns_rounding"]["idle_breakdown"]
    mine = trace_json(TRACES / name)["ranks"][0]["idle_breakdown"]
    for key in ("host_wait_us", "kernel_wait_us", "other_us"):
        assert mine[key] == pytest.approx(hta.get(key, 0.0), rel=1e-6, abs=1e-3), key


@pytest.mark.parametrize("name", sorted(REFERENCE["traces"]))
def test_launch_delay_and_overlap_agree_with_hta(name):
    hta = REFERENCE["traces"][name]["hta_no_ns_rounding"]
    rank = trace_json(TRACES / name)["ranks"][0]
    if "launch_delay" in hta:
        mine = rank["launch_delay"]
        assert mine["count"] == hta["launch_delay"]["count"]
        assert mine["median_us"] == pytest.approx(hta["launch_delay"]["median_us"], abs=1e-3)
        assert mine["max_us"] == pytest.approx(hta["launch_delay"]["max_us"], abs=1e-3)
    elif rank["has_gpu"]:
        # HTA's launch stats know CUDA runtime launches only; the HIP (AMD) and driver-API
        # (Triton's cuLaunchKernel) launches are counted here.
        assert rank["launch_delay"]["count"] >= 1
    if "comm_overlap_pct" in hta:
        assert rank["comm_overlap_pct"] == pytest.approx(hta["comm_overlap_pct"], abs=0.006)  # HTA rounds to 0.01
    else:
        assert rank["comm_overlap_pct"] is None  # no NCCL kernels


def test_two_ranks_from_a_folder_and_gzip(tmp_path):
    shutil.copy(TRACES / "hta_sampled_rank0.json", tmp_path)
    with open(TRACES / "hta_sampled_rank1.json", "rb") as src, gzip.open(tmp_path / "rank1.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (tmp_path / "notes.json").write_text('{"log_history": []}')  # not a trace: left out
    out = trace_json(tmp_path)
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    ref = REFERENCE["traces"]
    assert out["ranks"][1]["temporal"]["compute_us"] == ref["hta_sampled_rank1.json"]["hta"]["temporal"]["compute_us"]
    # Skew: median profiler steps of both ranks; rank 1 computes 135.5 ms against 106.3 ms.
    assert out["skew"]["slowest_rank"] in (0, 1)
    assert out["skew"]["compute_skew_pct"] == pytest.approx(100 * (135548 - 106252) / 106252, rel=1e-6)
    r0 = out["ranks"][0]
    # The NCCL kernels: communication time and its overlap with computation.
    assert r0["comm_us"] > 0 and 0 <= r0["comm_overlap_pct"] <= 100
    assert r0["top_kernels"][0]["name"].startswith("ncclKernel_SendRecv")
    assert 0 < r0["launch_delay"]["count"] <= r0["gpu_events_used"]
    # These 2023 traces carry no collective sizes: counted, no bandwidth made up.
    assert r0["collectives"] == [] and r0["collectives_without_metadata"] == 10


def test_bad_traces_are_refused_with_the_file_named(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_bytes((TRACES / "hta_tiny_base_rank1.json").read_bytes()[:5000])
    result = run_cli("trace", cut)
    assert result.returncode == 2
    assert f"{cut}: not valid JSON" in result.stderr
    result = run_cli("trace", tmp_path / "missing.json")
    assert result.returncode == 2 and "no such file" in result.stderr


@pytest.mark.parametrize("name", sorted(REFERENCE["traces"]))
def test_diagnose_sends_a_trace_to_trainscope_trace(name):
    result = run_cli("diagnose", TRACES / name)
    assert result.returncode == 2
    assert "PyTorch profiler (Kineto) trace" in result.stderr and "trainscope trace" in result.stderr
    assert "log_history" not in result.stderr


# ---- real CPU trainings, profiled ----

# 16 items x 20 ms = 320 ms of loading a batch, against 20 ms (idle machine) to a few hundred
# ms (two vCPUs shared with builds, watch() on) of compute: well over the doctor's 30 %; the
# fast loader's ~1 ms stays under 5 %.
SLOW_ITEM_SECONDS = 0.02

def _training(sleep_per_item, steps, on_step=None, batch=16):
    import torch

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(512, 256, generator=g)
            self.y = torch.randint(0, 10, (512,), generator=g)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            if sleep_per_item:
                time.sleep(sleep_per_item)  # a slow decode / augmentation
            return self.x[i], self.y[i]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Data(), batch_size=batch, num_workers=0, shuffle=True)
    return model, opt, loader, torch


def _profiled_trace(path, sleep_per_item):
    model, opt, loader, torch = _training(sleep_per_item, 6)
    from torch.profiler import ProfilerActivity, profile, schedule
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if i == 6:
                break
    doc = json.loads(path.read_text())
    # Kineto's {"traceEvents": [...]}, or a bare array where PyTorch has no Kineto (Debian's 1.13).
    assert doc["traceEvents"] if isinstance(doc, dict) else doc
    return path


@pytest.mark.parametrize("slow", [True, False], ids=["slow_loader", "fast_loader"])
def test_dataloader_bottleneck_from_a_real_cpu_trace(tmp_path, slow):
    path = _profiled_trace(tmp_path / "trace.json", SLOW_ITEM_SECONDS if slow else 0)
    out = trace_json(path)
    rank = out["ranks"][0]
    assert not rank["has_gpu"]
    assert len(rank["steps"]) == 4
    codes = [f["code"] for f in out["findings"]]
    if slow:
        assert rank["dataloader_share"] > 0.3, rank["steps"]
        assert codes == ["DATALOADER_BOTTLENECK"], rank["steps"]
        finding = out["findings"][0]
        assert finding["evidence"]["threshold"] == 0.3  # the doctor's DataloaderOptions.share
        assert finding["evidence"]["data_wait_ms"] > 300
    else:
        assert rank["dataloader_share"] < 0.3, rank["steps"]
        assert codes == [], rank["steps"]
    top = {op["name"] for op in rank["top_cpu_ops"]}
    assert "aten::addmm" in top or "aten::linear" in top, top


@pytest.mark.parametrize("slow", [True, False], ids=["slow_loader", "fast_loader"])
def test_run_profile_adds_the_finding_to_the_run(tmp_path, slow):
    import trainscope as ts
    model, opt, loader, torch = _training(SLOW_ITEM_SECONDS if slow else 0, 8)
    with ts.init(logdir=str(tmp_path), name="profiled", doctor=False) as run:
        run.watch(model, opt, activations=False)
        prof = run.profile(steps=3)
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.log({"loss": loss.item()})
            if i == 7:
                break
        assert prof.report is not None, "the profiling window did not close"
        assert pathlib.Path(prof.trace_path).is_file()
        codes = [f["code"] for f in run.findings]
        rank = prof.report["ranks"][0]
        assert len(rank["steps"]) == 3
        if slow:
            assert "DATALOADER_BOTTLENECK" in codes, rank["steps"]
            finding = next(f for f in run.findings if f["code"] == "DATALOADER_BOTTLENECK")
            # The run's steps (wait 1 + warmup 1: the window is steps 2..4), not the trace's.
            assert (finding["step"], finding["last_step"]) == (2, 4)
        else:
            assert "DATALOADER_BOTTLENECK" not in codes
    stored = ts.open_run(str(tmp_path / "profiled"))
    codes = [f["code"] for f in stored.findings()]
    assert ("DATALOADER_BOTTLENECK" in codes) == slow


def test_gloo_collectives_busbw_from_a_real_two_rank_trace(tmp_path):
    """busbw of each collective from its metadata: a real DDP run on gloo (torch 2.x records
    the gloo:<op> ranges with their input's shape; torch 1.13 here has no Kineto)."""
    import socket
    import subprocess
    import sys
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        pytest.skip("torch 1.x here is built without Kineto: no gloo ranges in its traces")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([sys.executable, str(REPO / "tests" / "python" / "scripts" / "profile_gloo.py"), str(tmp_path), str(port)],
                   check=True, capture_output=True, timeout=300)
    out = trace_json(tmp_path)
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for rank in out["ranks"]:
        by_name = {}
        for c in rank["collectives"]:
            by_name.setdefault(c["name"], []).append(c)
        one_mib = 4 * (1 << 18)
        reduce = next(c for c in by_name["all_reduce"] if c["bytes"] == one_mib)
        gather = by_name["all_gather"][0]
        bcast = by_name["broadcast"][0]
        assert gather["bytes"] == 2 * one_mib  # the gathered whole, as nccl-tests counts it
        for c, factor in ((reduce, 1.0), (gather, 0.5), (bcast, 1.0)):  # 2(n-1)/n, (n-1)/n, 1 at n = 2
            assert c["count"] == 3 and c["group_size"] == 2
            assert c["algbw_gbps"] == pytest.approx(c["bytes"] / (c["median_us"] * 1e-6) / 1e9, rel=1e-9)
            assert c["busbw_gbps"] == pytest.approx(c["algbw_gbps"] * factor, rel=1e-9)
        # DDP's own gradient bucket: 512*1024 + 1024 + 1024*10 + 10 floats.
        assert any(c["bytes"] == 4 * (512 * 1024 + 1024 + 1024 * 10 + 10) for c in by_name["all_reduce"])
    assert out["skew"]["slowest_rank"] in (0, 1)
