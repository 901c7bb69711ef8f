"""A run kept in PostgreSQL answers as the same run kept in its SQLite file: real PyTorch
trainings recorded by trainscope, pushed into a real PostgreSQL (Debian's, started for this
session by conftest.postgres_url), then `diagnose --json` and every dashboard API answer
compared between the two (docs/server.md)."""
import http.client
import json
import re
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import CLI, PYTHON, child_env, run_cli

TRAIN = textwrap.dedent("""
    import sys, torch, trainscope as ts
    logdir, name, lr, nan_at = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    run = ts.init(logdir=logdir, name=name, config={"lr": lr})
    run.watch(model, opt)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for step in range(120):
        xb = x * float("nan") if step == nan_at else x
        loss = torch.nn.functional.mse_loss(model(xb), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss, "opt/lr": lr})
    run.finish()
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, postgres_url):
    database = postgres_url
    """Two trainings (healthy; NaN input at step 60) in a logdir, pushed into the database."""
    logdir = tmp_path_factory.mktemp("pg") / "runs"
    for name, lr, nan_at in (("healthy", 0.05, -1), ("nan", 0.05, 60)):
        subprocess.run([PYTHON, "-c", TRAIN, str(logdir), name, str(lr), str(nan_at)], env=child_env(), check=True,
                       timeout=300)
    pushed = run_cli("push", logdir, "--to", database, "--project", "proj", check=True)
    assert pushed.stdout.count(" -> ") == 2
    return logdir, database


def comparable(text, names):
    """The JSON with the runs' own locations and names (which differ by backend) replaced."""
    for old, new in names.items():
        text = text.replace(old, new)
    return json.loads(text)


def test_diagnose_gives_the_same_answer_from_both_stores(runs):
    logdir, database = runs
    for name in ("healthy", "nan"):
        local = run_cli("diagnose", "--json", logdir / name)
        remote = run_cli("diagnose", "--json", f"{database}#proj/{name}")
        assert remote.returncode == local.returncode, remote.stderr
        names = {f"{database}#proj/{name}": "RUN", str(logdir / name): "RUN"}
        assert comparable(remote.stdout, names) == comparable(local.stdout, names)
    # The faulty run is diagnosed as faulty (the comparison is not of two empty answers).
    codes = {f["code"] for f in json.loads(run_cli("diagnose", "--json", f"{database}#proj/nan").stdout)["findings"]}
    assert any("NAN" in c or "NONFINITE" in c for c in codes), codes


def serve(target):
    proc = subprocess.Popen([str(CLI), "serve", str(target), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    match = re.search(r"http://[^:/]+:(\d+)/", proc.stdout.readline())
    assert match
    return proc, int(match.group(1))


def get(port, target):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", target)
    res = conn.getresponse()
    body = res.read().decode()
    conn.close()
    return res.status, body


def test_the_dashboard_api_answers_the_same_from_both_stores(runs):
    logdir, database = runs
    local, local_port = serve(logdir)
    remote, remote_port = serve(f"{database}#proj")
    try:
        for name in ("healthy", "nan"):
            status, run = get(local_port, f"/api/run?run={name}")
            assert status == 200
            series = json.loads(run)["series"]
            assert len(series) > 10  # loss, lr, and the watched layers' statistics
            targets = [f"/api/{e}?run=RUN" for e in ("run", "findings", "config", "layers", "spans", "numerics")]
            for s in series:
                endpoint = {"scalar": "scalars", "tensor_stats": "tensor_stats", "vector": "vectors"}[s["kind"]]
                targets.append(f"/api/{endpoint}?run=RUN&tag={s['tag']}")
            for target in targets:
                a = get(local_port, target.replace("RUN", name))
                b = get(remote_port, target.replace("RUN", f"proj/{name}"))
                assert a[0] == b[0] == 200, (target, a[0], b[0], b[1][:200])
                names = {f"proj/{name}": "RUN", f"{database}#proj/{name}": "RUN", str(logdir / name): "RUN"}
                assert comparable(b[1], names) == comparable(a[1], names), target
        status, listing = get(remote_port, "/api/runs")
        assert status == 200
        assert sorted(r["name"] for r in json.loads(listing)["runs"]) == ["proj/healthy", "proj/nan"]
    finally:
        for proc in (local, remote):
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
