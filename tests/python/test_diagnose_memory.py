"""`trainscope diagnose` holds a window of steps, not the run (issue 28): its peak RSS on a
stored run of 6 M points is within a few MB of its peak on 2 M points (past 2 M points its
window, ~256 k points, and its page cache, 32 MB, are full). Loading the run whole, as
diagnose did before, grew it by ~24 bytes a point (docs/benchmarks.md, "diagnose on long
runs").

Each run ends with one point at step 10^15, far from the others, as a run whose step
counter jumped: the windows must not widen to hold the run because of it.
"""

import pathlib
import subprocess
import sys

from conftest import CLI

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "store"))
import store_path  # noqa: E402

GROWTH_LIMIT_MB = 15


def stored_run(work: pathlib.Path, steps: int, series: int = 100) -> pathlib.Path:
    csv = work / f"run{steps}.csv"
    store_path.write_csv(csv, steps, series)
    with open(csv, "a") as f:
        f.write(f"{10**15}," + ",".join(["1.0"] * series) + "\n")
    run = work / f"run{steps}"
    subprocess.run([str(CLI), "import", str(csv), "-o", str(run)], check=True, capture_output=True)
    return run


def test_diagnose_memory_does_not_grow_with_the_run(tmp_path):
    peaks = {}
    for steps in (20000, 60000):
        run = stored_run(tmp_path, steps)
        out, _, _, peak_mb = store_path.run_measured([str(CLI), "diagnose", "--json", str(run)])
        assert '"steps": 1000000000000000' in out
        peaks[steps] = peak_mb
    assert peaks[60000] - peaks[20000] < GROWTH_LIMIT_MB, peaks
