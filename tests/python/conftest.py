"""Shared fixtures: which trainscope is under test, and running Python snippets in a child process.

Two ways to test (README: the two CI legs):
- the build (default): `build/python` first on sys.path and the CLI `build/trainscope`;
- an installed package (TRAINSCOPE_TEST_INSTALLED=1, the torch-2 leg): `trainscope` as
  the interpreter imports it (pip install .) and the `trainscope` command pip put beside
  the interpreter. C++ test helpers (trainscope_server_gen) still come from the build.
"""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINSCOPE_BUILD_DIR", REPO / "build"))
INSTALLED = os.environ.get("TRAINSCOPE_TEST_INSTALLED") == "1"
PYTHON = sys.executable  # child processes run the interpreter under test

if INSTALLED:
    CLI = pathlib.Path(sys.executable).parent / "trainscope"
    PYTHONPATH = None
else:
    CLI = BUILD / "trainscope"
    PYTHONPATH = str(BUILD / "python")
    if PYTHONPATH not in sys.path:
        sys.path.insert(0, PYTHONPATH)


def pytest_report_header(config):
    import trainscope
    import numpy
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "none"
    return f"trainscope under test: {os.path.dirname(trainscope.__file__)} (CLI {CLI}); torch {torch_version}, NumPy {numpy.__version__}"


def child_env(*extra_paths):
    """The environment for a child process that imports the trainscope under test."""
    env = dict(os.environ)
    paths = [p for p in (PYTHONPATH, *map(str, extra_paths)) if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_cli(*args, check=False):
    """Runs the trainscope CLI; returns the CompletedProcess (text mode)."""
    result = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"trainscope {' '.join(map(str, args))} failed:\n{result.stderr}")
    return result


@pytest.fixture
def logdir(tmp_path):
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL for the session (Debian's; scripts/test-postgres.sh: initdb into a
    fresh directory, loopback, a free port), stopped at the end. Yields its URL; the
    server's directory is postgres_url.directory for tests that restart it."""
    import uuid
    # Directly under /tmp: as root the server runs as the postgres user, who must reach it.
    directory = pathlib.Path("/tmp") / f"trainscope-pytest-pg-{uuid.uuid4().hex[:8]}"
    script = REPO / "scripts" / "test-postgres.sh"
    started = subprocess.run(["bash", str(script), "start", str(directory)], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr
    url = PostgresUrl(started.stdout.strip())
    url.directory = directory
    url.script = script
    yield url
    subprocess.run(["bash", str(script), "stop", str(directory)], timeout=60)
    subprocess.run(["rm", "-rf", str(directory)])


class PostgresUrl(str):
    """The URL of the test database, with where its server lives (restart())."""

    def restart(self):
        subprocess.run(["bash", str(self.script), "restart", str(self.directory)], check=True, timeout=60)
