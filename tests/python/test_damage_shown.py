"""Damage is never silent (issue 28): 30 damaged copies of one store, cut short or with bytes
flipped, are read by `diagnose`, `show`, `runs`, `report` and the server's API. Each says
damaged exactly when a whole read skips records, with the same count as `diagnose`; a copy
cut short is always called damaged."""
import http.client
import json
import random
import re
import signal
import sqlite3
import subprocess

import pytest

from conftest import BUILD, CLI

GEN = BUILD / "trainscope_server_gen"
PAGE = 16384

pytestmark = pytest.mark.skipif(not CLI.exists() or not GEN.exists(), reason=f"build {CLI} and {GEN} first")


def damaged_count(text):
    """The N of "N damaged record(s) skipped" in a message, else 0."""
    match = re.search(r"(\d+) damaged records? skipped", text)
    return int(match.group(1)) if match else 0


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    root = tmp_path_factory.mktemp("damage")
    subprocess.run([str(GEN), "demo", str(root), "whole", "--steps", "600"], check=True, capture_output=True)
    db = root / "whole" / "trainscope.db"
    with sqlite3.connect(db) as c:  # every page in the main file, none in a WAL
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = db.read_bytes()
    pages = len(data) // PAGE
    assert pages > 20
    logdir = root / "logdir"
    logdir.mkdir()
    rng = random.Random(28)
    kinds = {}
    for i in range(30):
        name = f"copy{i:02d}"
        (logdir / name).mkdir()
        damaged = bytearray(data)
        if i < 15:  # cut at a page boundary between 5 % and 95 % of the file
            damaged = damaged[:rng.randint(pages // 20, pages * 19 // 20) * PAGE]
            kinds[name] = "cut"
        else:  # 4 runs of 16 flipped bytes past the header page
            for _ in range(4):
                at = rng.randrange(PAGE, len(damaged) - 16)
                for k in range(at, at + 16):
                    damaged[k] ^= 0xFF
            kinds[name] = "flipped"
        (logdir / name / "trainscope.db").write_bytes(bytes(damaged))
    return logdir, kinds


def api(port, target):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", target)
    res = conn.getresponse()
    body = res.read()
    conn.close()
    return res.status, json.loads(body) if body else None


def test_every_view_says_damaged_when_diagnose_does(copies, tmp_path):
    logdir, kinds = copies
    listing = subprocess.run([str(CLI), "runs", str(logdir)], capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()[1:] if line.strip()}
    server = subprocess.Popen([str(CLI), "serve", str(logdir), "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        match = re.search(r":(\d+)/", server.stdout.readline())
        assert match
        port = int(match.group(1))
        status, listed = api(port, "/api/runs")
        assert status == 200
        entries = {r["name"]: r for r in listed["runs"]}
        seen = {"cut": 0, "flipped": 0}
        for name, kind in sorted(kinds.items()):
            run = logdir / name
            diagnose = subprocess.run([str(CLI), "diagnose", "--json", str(run)], capture_output=True, text=True,
                                      timeout=120)
            show = subprocess.run([str(CLI), "show", str(run)], capture_output=True, text=True, timeout=120)
            if diagnose.returncode == 2:  # nothing readable: every view says so
                assert show.returncode == 2, (name, show.stdout[:300])
                assert "unreadable" in rows[name] or "damaged" in rows[name], rows[name]
                assert entries[name]["status"] == "unreadable" or "damage" in entries[name], entries[name]
                seen[kind] += 1
                continue
            n = damaged_count(diagnose.stderr)
            assert show.returncode == 0, show.stderr
            report = tmp_path / f"{name}.html"
            subprocess.run([str(CLI), "report", str(run), "-o", str(report)], capture_output=True, check=True,
                           timeout=120)
            html = report.read_text()
            status, detail = api(port, f"/api/run?run={name}")
            assert status == 200
            scalar = next(s["tag"] for s in detail["series"] if s["kind"] == "scalar")
            status, series = api(port, f"/api/scalars?run={name}&tag={scalar}")
            assert status == 200
            if n == 0:  # read whole: no view may call it damaged
                assert "damaged" not in show.stdout and "damaged" not in rows[name], name
                assert "Damaged store" not in html
                assert "damage" not in detail and "damage" not in series and "damage" not in entries[name]
                assert entries[name]["health"] != "damaged"
                continue
            seen[kind] += 1
            assert damaged_count(show.stdout) == n, (name, show.stdout[:400])
            assert f"damaged: {n} records skipped" in rows[name], rows[name]
            assert "Damaged store" in html and damaged_count(html) == n, name
            for answer in (entries[name], detail, series):
                assert answer["damage"]["records"] == n, (name, answer.get("damage"))
                assert "/" not in answer["damage"]["summary"].split("(")[0]
            assert str(logdir) not in json.dumps(detail["damage"])  # no server paths
            assert entries[name]["health"] in ("damaged", "warning", "critical"), entries[name]["health"]
            for tag in detail["damage"]["series"]:  # show marks the series the damage is in
                line = next((l for l in show.stdout.splitlines() if l.startswith(tag + " ")), "")
                assert line.endswith("damaged"), (name, tag, line)
        # Every copy cut short is found; flipped bytes inside stored values are not (yet: no
        # checksums), so only their count is printed.
        assert seen["cut"] == 15, seen
        print(f"damaged copies reported: {seen['cut']}/15 cut, {seen['flipped']}/15 with flipped bytes")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
