"""The store's write and read paths against plain SQLite on the same points, measured side by
side in one test so that the machine cancels out (issue 28: the import path had become 12x
slower, diagnose 28x, and nothing noticed).

The measure is bench/store/store_path.py's: CPU seconds of `trainscope import` over a plain
sqlite3 insert of the same points, and of `trainscope diagnose` over a plain scan reading
them back, medians of 3. On the 2-core VM both ratios were 0.8 (docs/benchmarks.md, "Store
write and read paths against plain SQLite"); the limit of 2.0 lets noise more than double
them and still fails on a 3x slowdown of either path (2.4). The code before the fix gave
11.9 and 150.
"""

import pathlib
import sys

from conftest import CLI

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "store"))
import store_path  # noqa: E402

LIMIT = 2.0


def test_import_and_diagnose_keep_pace_with_plain_sqlite(tmp_path):
    r = store_path.ratios(CLI, steps=2000, series=200, repeat=3, work=tmp_path)
    said = (f"import {r['write_cpu']:.3f} CPU s vs insert {r['sqlite_insert_cpu']:.3f}; "
            f"diagnose {r['read_cpu']:.3f} vs scan {r['sqlite_scan_cpu']:.3f}")
    assert r["write_ratio"] < LIMIT, said
    assert r["read_ratio"] < LIMIT, said
