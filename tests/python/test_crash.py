"""A training killed with SIGKILL leaves a store that opens, is consistent, and holds
everything flushed before the kill (at most the last flush interval is lost).

The child logs 3 values a step at 100,000 steps a second: 300,000 values a second, about a
hundred times what a real training logs, and well within what the writer stores (several
million a second). A producer faster than the store fills the queue instead, and a kill
then loses what is queued (bounded by the queue's capacity): docs/architecture.md.
TRAINSCOPE_CRASH_FULL_SPEED=1 drops the pacing (Python then logs ~4 M values a second):
that holds on a quiet machine and is not a CI setting, since on an overloaded 2-core
machine the writer falls behind such a producer."""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import trainscope as ts
from conftest import child_env

FLUSH_INTERVAL = 0.25
# The writer needs a moment to commit a batch; on a loaded 2-core machine allow one more
# interval plus scheduling slack beyond the flush interval itself.
ALLOWED_LOSS_SECONDS = 2 * FLUSH_INTERVAL + 0.25

STEPS_PER_SECOND = 0 if os.environ.get("TRAINSCOPE_CRASH_FULL_SPEED") == "1" else 100000

CHILD = textwrap.dedent("""
    import sys, time
    import trainscope as ts
    run = ts.init(logdir=sys.argv[1], name="victim", flush_interval={interval})
    step = 0
    started = time.monotonic()
    while True:
        run.log({{"train/loss": 1.0 / (step + 1), "opt/lr": 0.1, "train/acc": step * 1e-6}})
        if step % 2000 == 0:
            print(step, time.monotonic(), flush=True)
            ahead = step / {rate} - (time.monotonic() - started) if {rate} else 0
            if ahead > 0:
                time.sleep(ahead)
        step += 1
""").format(interval=FLUSH_INTERVAL, rate=STEPS_PER_SECOND)


def test_sigkill_at_random_moments_loses_at_most_the_last_flush(tmp_path):
    rng = random.Random(1234)
    for attempt in range(12):
        logdir = tmp_path / f"attempt{attempt}"
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(logdir)], env=child_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        assert first, proc.stderr.read()
        time.sleep(rng.uniform(0.1, 1.2))
        killed_at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        # The kill can cut the child's last line mid-write: only whole "step time" lines count.
        progress = [tuple(map(float, line.split())) for line in [first] + out.splitlines() if len(line.split()) == 2]
        must_have = max((int(step) for step, at in progress if at <= killed_at - ALLOWED_LOSS_SECONDS), default=0)

        db = logdir / "victim" / "trainscope.db"
        with sqlite3.connect(db) as connection:  # replays the WAL like any later reader
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        view = ts.open_run(logdir / "victim")
        assert view.meta["status"] == "crashed"  # its process is gone
        tags = {s["tag"] for s in view.series()}
        if not tags:  # killed before the first flush: an empty but valid store
            assert must_have == 0
            continue
        losses = view.scalars("train/loss")
        steps = losses["step"].tolist()
        assert steps == list(range(len(steps))), "the stored points are a prefix, no holes"
        assert len(steps) > must_have, (attempt, len(steps), must_have)
        assert losses["value"][-1] == 1.0 / len(steps)
        # Every series of a flush is committed together.
        assert len(view.scalars("opt/lr")["step"]) == len(steps)


def test_a_kill_of_a_heavy_logger_loses_at_most_a_second(tmp_path):
    # 1,000 values a step under run.watch (issue 28's child, where 2 of 16 kills lost 1.1-1.6
    # s): a commit takes a few hundred ms on a loaded machine, and the gap between commits
    # shrinks by the commits' time so that a kill loses about flush_interval at most. A guard:
    # on this VM the fixed gap lost at most 0.57 s in 30 kills too. bench/store/kill_loss.py.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "store"))
    import kill_loss
    rng = random.Random(28)
    for k in range(4):
        r = kill_loss.kill_once(child_env(), tmp_path / f"k{k}", "heavy", rng.uniform(1.5, 4.0))
        assert r["integrity"] == "ok" and r["prefix"] and r["status"] == "crashed", r
        assert r["last_stored"] >= 0, r
        assert r["lost"] <= 1.0 + 0.25, r  # a second, and scheduling slack on a loaded 2-core machine
