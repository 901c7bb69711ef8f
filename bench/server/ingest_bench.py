"""The team server's load benchmark (docs/benchmarks.md "Team server ingest"): a PostgreSQL
(scripts/test-postgres.sh), SERVERS `trainscope server` processes over it, and RANKS simulated
ranks (build/trainscope_ingest_load, one process each) streaming into them for SECONDS while a
dashboard client reads. Then every point is counted in the database: what the servers
acknowledged must all be there, once.

    python3 bench/server/ingest_bench.py [--ranks 64] [--seconds 600] [--servers 2] [--build build]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRITE = "bench-writer-0123456789abcdef"
READ = "bench-reader-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ranks, seconds, servers, build, series=16, points=2048, database=None):
    build = Path(build)
    directory = Path("/tmp") / f"trainscope-bench-pg-{uuid.uuid4().hex[:8]}"
    script = REPO / "scripts" / "test-postgres.sh"
    started_db = database is None
    if started_db:
        database = subprocess.run(["bash", str(script), "start", str(directory)], capture_output=True, text=True,
                                  check=True).stdout.strip()
    tokens = Path(tempfile.mkdtemp()) / "tokens"
    tokens.write_text(f"{WRITE} load write\n{READ} load read\n")
    procs, urls = [], []
    try:
        for _ in range(servers):
            port = free_port()
            proc = subprocess.Popen([str(build / "trainscope"), "server", "--store", database, "--token-file",
                                     str(tokens), "--listen", f"127.0.0.1:{port}", "--rate", "100000"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert re.search(r"http://", proc.stdout.readline())
            procs.append(proc)
            urls.append(f"http://127.0.0.1:{port}")
        out = subprocess.run([str(build / "trainscope_ingest_load"), "--servers", ",".join(urls), "--token", WRITE,
                              "--read-token", READ, "--project", "load", "--ranks", str(ranks), "--seconds",
                              str(seconds), "--series", str(series), "--points", str(points)],
                             capture_output=True, text=True, check=True, timeout=seconds + 600).stdout
        result = json.loads(out)
        sys.path.insert(0, str(build / "python"))
        import trainscope
        stored = 0
        for r in range(ranks):
            stored += sum(s["points"] for s in trainscope.open_run(f"{database}#load/rank-{r}").series())
        result["points_stored"] = stored
        return result
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        if started_db:
            subprocess.run(["bash", str(script), "stop", str(directory)])
            subprocess.run(["rm", "-rf", str(directory)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--series", type=int, default=16)
    parser.add_argument("--points", type=int, default=2048)
    parser.add_argument("--build", default=str(REPO / "build"))
    args = parser.parse_args()
    result = run(args.ranks, args.seconds, args.servers, args.build, args.series, args.points)
    print(json.dumps(result, indent=1))
    return 0 if result["points_stored"] == result["points_acknowledged"] else 1


if __name__ == "__main__":
    sys.exit(main())
