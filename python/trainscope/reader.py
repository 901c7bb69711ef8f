"""Reading recorded runs back: ts.open_run(path), ts.list_runs(logdir)."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from trainscope import _core

# The dtype of each column _core packs (src/python/reader_bindings.cc).
_DTYPES = {"step": np.int64, "step_begin": np.int64, "step_end": np.int64, "last_step": np.int64,
           "count": np.int64, "value": np.float64, "wall_time": np.float64, "min": np.float64,
           "max": np.float64, "last": np.float64}


def _arrays(columns):
    """{name: numpy array} from _core's {name: bytearray of packed values}."""
    return {name: np.frombuffer(data, dtype=_DTYPES[name]) for name, data in columns.items()}


def _check_packing():
    """Refuses to load where _core's arrays would not read back as written.

    The arrays cross as raw bytes read with numpy.frombuffer, which is the same on NumPy 1
    and 2; this guards that assumption (dtype sizes, byte order) with known values.
    """
    got = _arrays(_core.scalar_columns_probe())
    expected = {"step": [0, 1, 10, 1 << 40], "wall_time": [0.5, 1.5, 2.5, 3.5], "value": [4.0, -1.0, 1e300, -0.0]}
    for name, values in expected.items():
        if got[name].tolist() != values:
            raise ImportError(
                f"trainscope: the compiled module {_core.__file__} hands out wrong {name!r} arrays with "
                f"NumPy {np.__version__} ({got[name].tolist()} where {values} was written); "
                "rebuild it (make build, or pip install .) against this interpreter and NumPy")


_check_packing()

_FIRST = -(1 << 63)
_LAST = (1 << 63) - 1


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _finite_floats(value):
    """value with JSON's "nan"/"inf"/"-inf" strings turned into floats (in dicts and lists)."""
    if isinstance(value, dict):
        return {k: _finite_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_floats(v) for v in value]
    if isinstance(value, str):
        return _NONFINITE.get(value, value)
    return value


def list_runs(logdir):
    """[(name, directory)] of every run below logdir."""
    return _core.list_runs(os.fspath(logdir))


def diagnose(path):
    """Offline diagnosis, the same as `trainscope diagnose PATH --json`, as a dict.

    PATH: a run directory, a logdir of runs, or a log another tool wrote (TensorBoard,
    trainer_state.json, text logs, CSV, JSONL); the format is found from the content.
    """
    return json.loads(_core.diagnose_json(os.fspath(path)))


def open_run(path):
    """A read-only view of a run directory (or its trainscope.db)."""
    return RunView(path)


class RunView:
    """Read-only access to one run's store. Safe while the run is still being written."""

    def __init__(self, path):
        self._reader = _core.RunReader(os.fspath(path))

    @property
    def meta(self):
        return json.loads(self._reader.meta_json())

    def series(self):
        """[{tag, kind, points, first_step, last_step, last_value}] sorted by tag."""
        return json.loads(self._reader.series_json())

    def scalars(self, tag, start=_FIRST, end=_LAST):
        """{step, value, wall_time} numpy arrays of every point, in the order logged."""
        return _arrays(self._reader.scalars(tag, start, end))

    def decimated(self, tag, buckets, start=_FIRST, end=_LAST):
        """Points bucketed by step: {step_begin, step_end, last_step, count, min, max, last}."""
        return _arrays(self._reader.decimated(tag, buckets, start, end))

    def tensor_stats(self, tag, start=_FIRST, end=_LAST):
        """[{step, count, min, max, mean, ...}] in step order. Non-finite values are floats
        (float('nan'), float('inf')), as everywhere in the Python API: the store's JSON
        writes them as the strings "nan"/"inf"/"-inf" (docs/architecture.md)."""
        return [_finite_floats(row) for row in json.loads(self._reader.tensor_stats_json(tag, start, end))]

    def vectors(self, tag, start=_FIRST, end=_LAST):
        """[(step, float32 numpy array)] in the order logged."""
        return [(step, np.frombuffer(data, dtype=np.float32)) for step, data in self._reader.vectors(tag, start, end)]

    def spans(self, start=_FIRST, end=_LAST):
        return json.loads(self._reader.spans_json(start, end))

    def findings(self):
        return json.loads(self._reader.findings_json())
