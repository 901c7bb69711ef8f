"""Reading recorded runs back: ts.open_run(path), ts.list_runs(logdir)."""

from __future__ import annotations

import json
import os

from trainscope import _core

_FIRST = -(1 << 63)
_LAST = (1 << 63) - 1


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
        return self._reader.scalars(tag, start, end)

    def decimated(self, tag, buckets, start=_FIRST, end=_LAST):
        """Points bucketed by step: {step_begin, step_end, last_step, count, min, max, last}."""
        return self._reader.decimated(tag, buckets, start, end)

    def tensor_stats(self, tag, start=_FIRST, end=_LAST):
        return json.loads(self._reader.tensor_stats_json(tag, start, end))

    def vectors(self, tag, start=_FIRST, end=_LAST):
        return self._reader.vectors(tag, start, end)

    def spans(self, start=_FIRST, end=_LAST):
        return json.loads(self._reader.spans_json(start, end))

    def findings(self):
        return json.loads(self._reader.findings_json())
