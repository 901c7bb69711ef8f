"""Shared fixtures: where the build is, and running Python snippets in a child process."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINSCOPE_BUILD_DIR", REPO / "build"))
CLI = BUILD / "trainscope"
PYTHONPATH = str(BUILD / "python")

if PYTHONPATH not in sys.path:
    sys.path.insert(0, PYTHONPATH)


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHONPATH + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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
