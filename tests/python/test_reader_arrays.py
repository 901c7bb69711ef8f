"""Arrays read back from a run are the values logged, on NumPy 1 and 2, whichever way the
module was built (issue 13: a module built with Debian's pybind11 2.10 handed out arrays
with zero strides under NumPy 2, with no error)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import conftest
import trainscope as ts

LOGGED = [(0, 1.0), (1, 2.0), (10, 3.0), (11, 4.0), (1 << 40, -0.0), (1 << 40, float("inf"))]


@pytest.fixture
def run_dir(logdir):
    run = ts.init(logdir=logdir, name="arrays")
    for step, value in LOGGED:
        run.log({"a": value}, step=step)
    run.finish()
    return logdir / "arrays"


def test_scalars_read_back_as_logged(run_dir):
    points = ts.open_run(run_dir).scalars("a")
    assert points["step"].dtype == np.int64 and points["value"].dtype == np.float64
    assert points["step"].tolist() == [s for s, _ in LOGGED]
    assert points["value"].tolist() == [v for _, v in LOGGED]
    assert np.signbit(points["value"][4])
    assert np.all(np.diff(points["wall_time"]) >= 0) and points["wall_time"][0] > 1.6e9
    points["value"][0] = 7.0  # arrays are the caller's own, writable


def test_decimated_buckets(run_dir):  # vectors: test_watch.py's per-unit gradient norms
    view = ts.open_run(run_dir)
    buckets = view.decimated("a", 2, 0, 12)
    assert buckets["count"].tolist() == [2, 2]
    assert buckets["min"].tolist() == [1.0, 3.0] and buckets["max"].tolist() == [2.0, 4.0]
    assert buckets["last_step"].tolist() == [1, 11]


def test_a_module_handing_out_wrong_arrays_refuses_to_import(tmp_path):
    # The import-time probe must catch a packing that reads back wrong: here the module's
    # probe is made to return shifted bytes, as a mismatched build would, and the reader
    # module is imported again.
    code = textwrap.dedent("""
        import importlib
        import trainscope._core as core
        import trainscope.reader
        good = core.scalar_columns_probe
        def shifted():
            columns = good()
            columns["step"] = bytearray(8) + columns["step"][:-8]
            return columns
        core.scalar_columns_probe = shifted
        try:
            importlib.reload(trainscope.reader)
        except ImportError as error:
            print("REFUSED", error)
        else:
            print("LOADED")
    """)
    out = subprocess.run([sys.executable, "-c", code], env=conftest.child_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("REFUSED"), out.stdout + out.stderr
    assert "wrong 'step' arrays" in out.stdout and np.__version__ in out.stdout and "rebuild" in out.stdout


@pytest.mark.skipif(not conftest.INSTALLED or not (conftest.BUILD / "python" / "trainscope").is_dir(),
                    reason="the torch-2 leg only: the make-build module read by this interpreter's NumPy")
def test_the_make_build_module_reads_right_under_this_numpy(run_dir):
    # The module `make build` makes (the system's pybind11) imported by the venv's
    # interpreter and NumPy: the combination that returned wrong numbers silently.
    code = "import sys, trainscope as ts; p = ts.open_run(sys.argv[1]).scalars('a'); print(p['step'].tolist())"
    env = conftest.child_env(conftest.BUILD / "python")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == str([s for s, _ in LOGGED]), out.stderr


def test_the_package_imports_and_reads_runs_without_torch(run_dir):
    # The package needs only NumPy at run time: a machine without torch reads and diagnoses runs.
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises
        import trainscope as ts
        view = ts.open_run({str(run_dir)!r})
        print(view.scalars("a")["step"].tolist() == {[s for s, _ in LOGGED]!r}, ts.diagnose({str(run_dir)!r}) is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=conftest.child_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
