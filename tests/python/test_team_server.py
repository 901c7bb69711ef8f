"""A team server as a team runs it (docs/server.md): `trainscope server` over a real
PostgreSQL, tokens per project, real PyTorch trainings forwarded live by their ranks
(TRAINSCOPE_SERVER), the server killed and the database restarted while they train, and the
security rules over real sockets. Every point is counted end to end: none lost, none doubled."""
import gzip
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from conftest import CLI, PYTHON, child_env, run_cli

WRITER_A = "writer-a-0123456789abcdef"
READER_A = "reader-a-0123456789abcdef"
WRITER_B = "writer-b-0123456789abcdef"

TRAIN = textwrap.dedent("""
    import sys, time, torch, trainscope as ts
    logdir, name, steps, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = ts.init(logdir=logdir, name=name, project="alpha", flush_interval=0.2)
    run.watch(model, opt)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"train/loss": loss, "it/step": step})
        time.sleep(pause)
    run.finish()
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, database, tokens, port=None, *extra):
        self.args = [str(CLI), "server", "--store", database, "--token-file", str(tokens), *extra]
        self.port = port or free_port()
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args + ["--listen", f"127.0.0.1:{self.port}"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        line = self.proc.stdout.readline()
        assert re.search(r"http://127.0.0.1:\d+/", line), line

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)

    def request(self, method, target, token=None, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request(method, target, body=body, headers=headers)
        res = conn.getresponse()
        text = res.read().decode("utf-8", "replace")
        conn.close()
        return res.status, text

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def tokens(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"# token project scope\n{WRITER_A} alpha write\n{READER_A} alpha read\n{WRITER_B} beta write\n")
    return path


@pytest.fixture
def server(postgres_url, tokens):
    s = Server(postgres_url, tokens)
    yield s
    s.stop()


def every_point(location):
    """{tag: [(step, value), ...]} of every scalar series, and {tag: rows} of the rest."""
    import trainscope
    run = trainscope.open_run(location)
    out = {}
    for s in run.series():
        tag, kind = s["tag"], s["kind"]
        if kind == "scalar":
            got = run.scalars(tag)
            out[tag] = list(zip(got["step"].tolist(), got["value"].tolist()))
        elif kind == "tensor_stats":
            out[tag] = [r["step"] for r in run.tensor_stats(tag)]
    out["spans"] = len(run.spans())
    return out


def wait_until(predicate, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_forwarded_run_reaches_the_server_whole_through_a_server_kill_and_a_database_restart(
        tmp_path, postgres_url, tokens):
    server = Server(postgres_url, tokens)
    logdir = tmp_path / "runs"
    env = child_env()
    env.update(TRAINSCOPE_SERVER=server.url, TRAINSCOPE_TOKEN=WRITER_A)
    name = f"outage-{os.getpid()}"
    training = subprocess.Popen([PYTHON, "-c", TRAIN, str(logdir), name, "300", "0.02"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1.5)
        server.kill()                      # the server dies mid-run ...
        time.sleep(1.5)
        server.start()                     # ... and comes back on the same address
        time.sleep(1.0)
        postgres_url.restart()             # the database restarts under it
        out, _ = training.communicate(timeout=120)
        assert training.returncode == 0, out
        location = f"{postgres_url}#alpha/{name}"
        assert wait_until(lambda: run_cli("runs", f"{postgres_url}#alpha").stdout.count(name) == 1)
        import trainscope
        assert wait_until(lambda: trainscope.open_run(location).meta["status"] == "finished"), out
        local, remote = every_point(logdir / name), every_point(location)
        assert len(local["train/loss"]) == 300
        assert sorted(local) == sorted(remote)
        for tag in local:
            assert remote[tag] == local[tag], tag   # every point, once, in order
        names = {location: "RUN", str(logdir / name): "RUN"}
        a = run_cli("diagnose", "--json", logdir / name).stdout
        b = run_cli("diagnose", "--json", location).stdout
        for old, new in names.items():
            a, b = a.replace(old, new), b.replace(old, new)
        assert json.loads(a) == json.loads(b)
    finally:
        if training.poll() is None:
            training.kill()
        server.stop()


def test_a_libtorch_training_forwards_its_run_whole(tmp_path, server, postgres_url):
    """The LibTorch client (include/trainscope/torch.h) forwards as the Python one does:
    TRAINSCOPE_SERVER, TRAINSCOPE_TOKEN and TRAINSCOPE_PROJECT set, examples/libtorch_train.cc
    unchanged."""
    from conftest import BUILD
    example = BUILD / "examples" / "libtorch_train"
    if not example.exists():
        pytest.skip(f"{example} is not built (LibTorch not found at configure time)")
    env = dict(os.environ, TRAINSCOPE_SERVER=server.url, TRAINSCOPE_TOKEN=WRITER_A, TRAINSCOPE_PROJECT="alpha",
               OMP_NUM_THREADS="1")
    logdir = tmp_path / "runs"
    result = subprocess.run([str(example), str(logdir), "120"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    import trainscope
    location = f"{postgres_url}#alpha/libtorch-example"
    assert wait_until(lambda: "libtorch-example" in run_cli("runs", f"{postgres_url}#alpha").stdout)
    assert wait_until(lambda: trainscope.open_run(location).meta["status"] == "finished")
    local, remote = every_point(logdir / "libtorch-example"), every_point(location)
    assert len(local["train/loss"]) == 120 and any(tag.startswith("grad/") for tag in local)
    assert sorted(local) == sorted(remote)
    for tag in local:
        assert remote[tag] == local[tag], tag


def ingest(server, token, project, run, body, gzip_it=False):
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if gzip_it:
        data = gzip.compress(data)
        headers["Content-Encoding"] = "gzip"
    return server.request("POST", f"/api/v1/ingest?project={project}&run={run}", token, data, headers)


def test_a_batch_sent_twice_is_stored_once_and_a_gap_is_refused(server, postgres_url):
    run = f"twice-{os.getpid()}"
    batch = {"version": 1, "batch": "t:1", "scalars": {"loss": {"from": 0, "points": [[0, 1.0, 2.0], [1, 2.0, 3.0]]}}}
    assert ingest(server, WRITER_A, "alpha", run, batch, gzip_it=True)[0] == 200
    status, reply = ingest(server, WRITER_A, "alpha", run, batch)
    assert status == 200 and json.loads(reply)["positions"]["scalar:loss"] == 2
    overlap = {"version": 1, "scalars": {"loss": {"from": 1, "points": [[1, 2.0, 3.0], [2, 3.0, "nan"]]}}}
    assert ingest(server, WRITER_A, "alpha", run, overlap)[0] == 200
    gap = {"version": 1, "scalars": {"loss": {"from": 9, "points": [[9, 9.0, 9.0]]}}}
    status, reply = ingest(server, WRITER_A, "alpha", run, gap)
    assert status == 409 and json.loads(reply)["positions"]["scalar:loss"] == 3
    import trainscope
    got = trainscope.open_run(f"{postgres_url}#alpha/{run}").scalars("loss")
    assert got["step"].tolist() == [0, 1, 2]
    assert got["value"].tolist()[:2] == [2.0, 3.0]


def test_tokens_keep_projects_apart(server):
    run = f"secret-{os.getpid()}"
    assert ingest(server, WRITER_B, "beta", run, {"version": 1, "meta": {"note": "beta's"}})[0] == 200
    # A's tokens neither list, read nor write B's runs.
    status, listing = server.request("GET", "/api/runs", READER_A)
    assert status == 200 and all(not r["name"].startswith("beta/") for r in json.loads(listing)["runs"])
    assert server.request("GET", f"/api/run?run=beta/{run}", READER_A)[0] == 403
    assert server.request("GET", f"/api/run?run=beta/{run}", WRITER_A)[0] == 403
    assert ingest(server, WRITER_A, "beta", run, {"version": 1})[0] == 403
    # B's writer reads its own.
    status, body = server.request("GET", f"/api/run?run=beta/{run}", WRITER_B)
    assert status == 200 and json.loads(body)["meta"]["extra"]["note"] == "beta's"
    assert json.loads(server.request("GET", "/api/projects", READER_A)[1])["projects"] == ["alpha"]


def test_a_read_token_cannot_write_and_an_unknown_one_reads_nothing(server):
    assert ingest(server, READER_A, "alpha", "x", {"version": 1})[0] == 403
    assert server.request("GET", "/api/runs", "not-a-token-0123456789")[0] == 401
    assert server.request("GET", "/api/runs")[0] == 401
    assert server.request("POST", "/api/runs", WRITER_A, b"{}")[0] == 405


def test_an_oversized_body_is_refused(postgres_url, tokens):
    small = Server(postgres_url, tokens, None, "--max-body", "100000")
    try:
        big = {"version": 1, "scalars": {"loss": {"from": 0, "points": [[i, 1.0, 1.0] for i in range(20000)]}}}
        assert ingest(small, WRITER_A, "alpha", f"big-{os.getpid()}", big)[0] == 413
        # A small gzip body that inflates past the bound is refused too.
        bomb = {"version": 1, "meta": {"pad": "0" * 5_000_000}}
        assert ingest(small, WRITER_A, "alpha", f"bomb-{os.getpid()}", bomb, gzip_it=True)[0] == 413
    finally:
        small.stop()


def test_requests_past_the_rate_are_refused(postgres_url, tokens):
    slow = Server(postgres_url, tokens, None, "--rate", "2")
    try:
        statuses = [slow.request("GET", "/api/projects", READER_A)[0] for _ in range(30)]
        assert statuses[:8] == [200] * 8 and statuses.count(429) >= 15
    finally:
        slow.stop()


def test_sql_in_run_names_and_tags_is_stored_as_text(server, postgres_url):
    run = "x'); DROP TABLE run; --"
    tag = "loss\"; DELETE FROM series; -- '"
    body = {"version": 1, "scalars": {tag: {"from": 0, "points": [[0, 1.0, 4.5]]}},
            "spans": [[1, 0, "p'); DROP TABLE span; --", 1.0, 0.5]]}
    from urllib.parse import quote
    status, reply = server.request("POST", f"/api/v1/ingest?project=alpha&run={quote(run)}", WRITER_A,
                                   json.dumps(body).encode())
    assert status == 200, reply
    status, series = server.request("GET", f"/api/run?run={quote('alpha/' + run)}", READER_A)
    assert status == 200
    assert [s["tag"] for s in json.loads(series)["series"]] == [tag]
    status, points = server.request("GET", f"/api/scalars?run={quote('alpha/' + run)}&tag={quote(tag)}", READER_A)
    assert status == 200 and json.loads(points)["last"] == [4.5]
    assert run_cli("runs", postgres_url).returncode == 0  # the tables are all still there


PARSE_OPENMETRICS = textwrap.dedent("""
    import json, sys
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    print(json.dumps([{"name": f.name, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
                      for f in text_string_to_metric_families(sys.stdin.read())]))
""")


def prometheus_parse(text):
    """/metrics parsed by Prometheus' Python client from PyPI (pinned, in a venv of its own:
    scripts/prometheus-venv.sh), whichever torch leg runs the test."""
    venv = subprocess.run(["bash", str(Path(__file__).parents[2] / "scripts" / "prometheus-venv.sh")],
                          capture_output=True, text=True, check=True).stdout.strip()
    parsed = subprocess.run([f"{venv}/bin/python", "-c", PARSE_OPENMETRICS], input=text, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr  # the parser refuses what is not OpenMetrics
    return {f["name"]: f["samples"] for f in json.loads(parsed.stdout)}


def test_metrics_are_openmetrics_that_prometheus_parses_per_token(server):
    run = f"metrics-{os.getpid()}"
    finding = {"code": "LOSS_NAN", "severity": "critical", "step": 3, "last_step": 3, "location": "loss",
               "summary": "s", "evidence": {}, "causes": [], "actions": []}
    body = {"version": 1, "meta": {"start_time": "1000", "heartbeat": "1010", "status": "running"},
            "scalars": {"loss": {"from": 0, "points": [[s, 1000.0 + s, 1.0] for s in range(50)]}},
            "findings": [finding]}
    assert ingest(server, WRITER_A, "alpha", run, body)[0] == 200
    assert ingest(server, WRITER_B, "beta", run, {"version": 1, "meta": {"status": "running"}})[0] == 200
    status, text = server.request("GET", "/metrics", READER_A)
    assert status == 200 and text.endswith("# EOF\n")
    families = prometheus_parse(text)
    def value(family, **labels):
        return [v for name, got, v in families[family]
                if all(got.get(k) == want for k, want in labels.items()) and name.startswith(family)]
    assert value("trainscope_run_step", project="alpha", run=run) == [49]
    assert value("trainscope_run_findings", project="alpha", run=run, severity="critical") == [1]
    assert value("trainscope_run_findings", project="alpha", run=run, severity="warning") == [0]
    assert value("trainscope_run_steps_per_second", project="alpha", run=run) == [pytest.approx(4.9)]
    assert value("trainscope_run_last_write_age_seconds", project="alpha", run=run)[0] > 0
    assert families["trainscope_run"][0][1]["status"]
    assert not value("trainscope_run_step", project="beta")  # another project's runs are not shown
    assert server.request("GET", "/metrics")[0] == 401


def test_a_forwarded_data_parallel_run_names_its_straggler_and_its_diverging_rank_on_the_server(
        tmp_path, postgres_url, tokens, server):
    import sys
    import torch
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from pathlib import Path
    name = f"ddp-{os.getpid()}"
    env = child_env()
    env.update(OMP_NUM_THREADS="1", TRAINSCOPE_SERVER=server.url, TRAINSCOPE_TOKEN=WRITER_A,
               TRAINSCOPE_PROJECT="alpha")
    # Rank 3's gradients leave the all-reduce from step 30; rank 0's forward waits 10 ms.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), "--redirects", "2", "--tee", "2",
               str(Path(__file__).with_name("ddp_train.py")), "--logdir", str(tmp_path / "runs"), "--name", name,
               "--steps", "80", "--perturb", "grads", "--perturb-rank", "3", "--perturb-from", "30", "--slow-rank", "0"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    listed = lambda: run_cli("runs", f"{postgres_url}#alpha").stdout
    assert wait_until(lambda: all(f"rank-{r}" in listed() for r in range(4)) and listed().count("finished") >= 5)
    report = json.loads(run_cli("diagnose", "--json", f"{postgres_url}#alpha/{name}", check=True).stdout)
    named = {(f["code"], f["rank"]) for f in report["findings"] if f["code"] in ("RANK_DIVERGENCE", "STRAGGLER")}
    assert named == {("RANK_DIVERGENCE", 3), ("STRAGGLER", 0)}, report["findings"]
    local = json.loads(run_cli("diagnose", "--json", tmp_path / "runs" / name, check=True).stdout)
    assert {(f["code"], f.get("rank"), f["location"], f["step"]) for f in report["findings"]} == \
        {(f["code"], f.get("rank"), f["location"], f["step"]) for f in local["findings"]}
    # The dashboard's Ranks view on the server: the same comparison, each rank's phases, the spread.
    status, text = server.request("GET", f"/api/ranks?run=alpha/{name}", token=READER_A)
    assert status == 200, text
    view = json.loads(text)
    assert [r["rank"] for r in view["ranks"]] == [0, 1, 2, 3]
    assert [r["run"] for r in view["ranks"]] == [f"alpha/{name}/rank-{r}" for r in range(4)]
    compared = lambda findings: sorted((f["code"], f["rank"], f["step"], f["location"]) for f in findings
                                       if f["code"] in ("RANK_DIVERGENCE", "STRAGGLER"))
    assert compared(view["findings"]) == compared(report["findings"])
    forward = [r["phases"]["forward"] for r in view["ranks"]]
    assert forward[0] > 5 * max(forward[1:]), forward
    grad = next(s for s in view["series"] if s["role"] == "grad_norm")
    assert grad["spread"][0] == 0 and grad["spread"][-1] > 5, grad["spread"]
    assert all(row[3] > 2 and all(abs(v - 1) < 0.05 for v in row[:3]) for row in view["layers"]["ratio"]), view["layers"]
    assert server.request("GET", f"/api/ranks?run=alpha/{name}", token=WRITER_B)[0] == 403


def test_a_short_load_of_simulated_ranks_into_two_servers_is_stored_whole(postgres_url):
    # The benchmark (bench/server/ingest_bench.py, docs/benchmarks.md) in small: 6 ranks for
    # 4 s into two servers; every point the servers acknowledged is in the database, once.
    import importlib.util
    from conftest import BUILD, REPO
    spec = importlib.util.spec_from_file_location("ingest_bench", REPO / "bench" / "server" / "ingest_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(ranks=6, seconds=4, servers=2, build=BUILD, series=4, points=1024, database=postgres_url)
    assert result["failed_requests"] == 0
    assert result["points_acknowledged"] >= 6 * 4 * 1024
    assert result["points_stored"] == result["points_acknowledged"]
