"""The host executor's tickets own the tensors their jobs read (issue 14: one lifetime owner).

The helper thread is paused so that each job runs late, after the training thread has let
go of every tensor of its own; the statistics must still be those of the values submitted.
"""

import gc
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import trainscope as ts  # noqa: E402
from trainscope import _core  # noqa: E402


def plan_of(rec, tensors, tag="grad/t"):
    ids = [rec.series(f"{tag}{i}", "tensor_stats") for i in range(len(tensors))]
    return _core.StatsPlan(ids, [t.numel() for t in tensors], [0] * len(tensors), [], [])


def test_a_ticket_keeps_its_tensors_until_the_late_job_has_read_them(tmp_path):
    run = ts.init(tmp_path, "kept")
    rec = run._recorder
    worker = _core.HostWorker(rec)
    torch.manual_seed(0)
    tensors = [torch.randn(1000) for _ in range(3)]
    expected = [float(t.double().norm()) for t in tensors]
    plan = plan_of(rec, tensors)
    worker.pause()
    ticket = worker.submit_stats(0, plan, [t.data_ptr() for t in tensors], False, False,
                                 kept=list(tensors))
    ptrs = [t.data_ptr() for t in tensors]
    del tensors
    gc.collect()
    # The freed memory would be reused by these (same size): the job must not see them.
    others = [torch.full((1000,), 7.0) for _ in range(6)]
    assert len(ticket.kept) == 3 and [t.data_ptr() for t in ticket.kept] == ptrs
    assert not ticket.done()
    threading.Timer(0.1, worker.resume).start()
    sum_squares, nan, inf = ticket.wait()
    assert ticket.kept is None  # waited for: the tensors may go now
    assert (nan, inf) == (0, 0)
    assert sum_squares == pytest.approx(sum(e * e for e in expected), rel=1e-6)
    run.finish()
    view = ts.open_run(tmp_path / "kept")
    for i, e in enumerate(expected):
        assert view.tensor_stats(f"grad/t{i}")[0]["l2_norm"] == pytest.approx(e, rel=1e-6)
    assert others[0][0] == 7.0


def test_a_dropped_ticket_waits_for_its_job_before_letting_the_tensors_go(tmp_path):
    run = ts.init(tmp_path, "dropped")
    rec = run._recorder
    worker = _core.HostWorker(rec)
    t = torch.arange(1000, dtype=torch.float32)
    plan = plan_of(rec, [t])
    worker.pause()
    ticket = worker.submit_stats(3, plan, [t.data_ptr()], False, False, kept=[t])
    del t
    threading.Timer(0.3, worker.resume).start()
    started = time.perf_counter()
    del ticket  # blocks until the job has run: only then may the tensor be freed
    assert time.perf_counter() - started >= 0.2
    run.finish()
    stats = ts.open_run(tmp_path / "dropped").tensor_stats("grad/t0")
    assert [s["step"] for s in stats] == [3]
    assert stats[0]["max"] == 999.0 and stats[0]["numel"] == 1000


def test_a_plan_and_its_pointers_must_agree_before_anything_is_read(tmp_path):
    run = ts.init(tmp_path, "bad")
    rec = run._recorder
    worker = _core.HostWorker(rec)
    t = torch.zeros(10)
    with pytest.raises(ValueError, match="differ in length"):
        worker.submit_stats(0, plan_of(rec, [t]), [t.data_ptr(), t.data_ptr()], False, False)
    with pytest.raises(ValueError, match="unknown dtype code 9"):
        _core.StatsPlan([1], [10], [9], [], [])
    # Activation records are read field by field: a malformed one raises before any job is queued.
    record, _ = _core.capture_record(rec.series("act/t", "tensor_stats"), t, 0, 0, False, True, torch.strided)
    assert record[2] == 10 and record[1] == t.data_ptr()
    for bad, error in (([record[:10]], TypeError), ([list(record)], TypeError), (record, TypeError),
                       ([record[:3] + (9,) + record[4:]], ValueError),  # dtype code
                       ([record[:4] + (2, 3, 1, 1) + record[8:]], ValueError),  # dead units: 2 x 3 != 10 values
                       ([record[:9] + ((5, 3),) + ((1, 5),)], ValueError)):  # sizes of 15, not 10
        with pytest.raises(error):
            worker.submit_activations(0, bad, [t])
    ticket = worker.submit_activations(0, [record], [t])
    ticket.log_activations([True])
    with pytest.raises(TypeError):
        _core.Ticket()  # a ticket is the worker's to make
    run.finish()
    assert ts.open_run(tmp_path / "bad").tensor_stats("act/t")[0]["numel"] == 10


def test_a_job_smaller_than_the_wake_runs_on_the_submitting_thread_only_when_the_helper_is_idle(tmp_path):
    # Waking the helper costs the training thread more than the statistics of a small tensor
    # (docs/watch.md): under 64 KiB the job runs at once where it is submitted, unless the
    # helper is paused or has a job before it (jobs keep their order).
    run = ts.init(tmp_path, "here")
    rec = run._recorder
    worker = _core.HostWorker(rec)
    small, large = torch.randn(1000), torch.randn(64 * 1024)  # 4 KB, 256 KB
    small_plan, large_plan = plan_of(rec, [small], "grad/small"), plan_of(rec, [large], "grad/large")
    ticket = worker.submit_stats(0, small_plan, [small.data_ptr()], False, False, kept=[small])
    assert ticket.done()  # ran before submit returned
    assert ticket.wait()[0] == pytest.approx(float(small.double().pow(2).sum()), rel=1e-6)

    worker.pause()
    late_small = worker.submit_stats(1, small_plan, [small.data_ptr()], False, False, kept=[small])
    assert not late_small.done()  # a paused helper: never run here
    worker.resume()
    late_small.wait()

    worker.pause()
    big = worker.submit_stats(2, large_plan, [large.data_ptr()], False, False, kept=[large])
    after_big = worker.submit_stats(2, small_plan, [small.data_ptr()], False, False, kept=[small])
    assert not big.done() and not after_big.done()  # queued behind the large job, in order
    worker.resume()
    assert after_big.wait()[0] == pytest.approx(float(small.double().pow(2).sum()), rel=1e-6)
    assert big.wait()[0] == pytest.approx(float(large.double().pow(2).sum()), rel=1e-6)
    run.finish()
    assert [s["step"] for s in ts.open_run(tmp_path / "here").tensor_stats("grad/small0")] == [0, 1, 2]


def test_a_forwards_small_module_outputs_go_to_the_helper_in_one_job(tmp_path, monkeypatch):
    # Each helper job wakes the helper; a forward's outputs under ACTIVATION_BATCH_BYTES go in
    # one job, and each module's statistics are still its own output's.
    from trainscope._watch import executors
    from trainscope._watch.watcher import ACTIVATION_BATCH_BYTES
    jobs = []
    submit = executors.HostExecutor.activations

    def counted(self, step, captured):
        jobs.append((step, len(captured)))
        return submit(self, step, captured)
    monkeypatch.setattr(executors.HostExecutor, "activations", counted)
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(8)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.Tanh())])
    outputs = {}
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda m, a, out, i=i: outputs.setdefault(i, []).append(out.detach().clone()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = ts.init(tmp_path, "batched")
    run.watch(model, opt, activations_every=1)
    x = torch.randn(4, 16)
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    run.finish()
    assert 16 * 4 * 16 * 4 < ACTIVATION_BATCH_BYTES
    assert jobs == [(step, 16) for step in range(3)]  # 16 outputs (8 Linear, 8 Tanh), one job a forward
    view = ts.open_run(tmp_path / "batched")
    for i in range(8):
        stats = view.tensor_stats(f"act/{2 * i}")
        assert [s["step"] for s in stats] == [0, 1, 2]
        for s in stats:
            assert s["l2_norm"] == pytest.approx(float(outputs[i][s["step"]].double().norm()), rel=1e-6)
