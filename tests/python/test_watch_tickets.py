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
    run.finish()
