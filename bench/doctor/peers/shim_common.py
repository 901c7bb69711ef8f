"""The part of trainscope's Python API that the benchmark corpus uses (tests/python/scripts/*.py,
scenarios/*.py), forwarding to another diagnosis tool: the shims in shim_<peer>/trainscope/
put this first on PYTHONPATH so that the corpus scripts run unchanged under each peer.

    ts.init(logdir=, name=, config=, ...) -> Run   (a context manager; run.dir = logdir/name)
    run.watch(model, optimizer=None, ..., name=None)
    run.log({tag: value}, step=None)
    run.data(iterable or batch function, steps=None) -> an iterator over the same batches
    run.log_classification(...)                      (no-op)
    run.step()                                       (a no-op context manager)
    run.finish(status=...), run.findings, run.name, run.dir, run.config

A Backend receives watch(model, optimizer, name), train_log(...) once per logged training
loss, eval_log(...) per logged validation loss and finish(run_dir, crashed); it writes the
tool's findings, normalised, into <run dir>/peer_findings.json (read by compare.py).

Which logged value is the training loss: "train/loss" (or "loss", "train_loss"); else the
first tag with "loss" in it that is not a validation one (dcgan.py logs loss/D and loss/G).
Validation loss: the first tag that starts with val/, eval/ or test/ and contains "loss".
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

PRIMARY_LOSS_TAGS = ("train/loss", "loss", "train_loss")
EVAL_PREFIXES = ("val", "eval", "test", "valid")


def _number(value):
    try:
        if hasattr(value, "item"):
            value = value.item()
        return float(value)
    except Exception:
        return None


def split_losses(data):
    """(train loss tag or None, eval loss tag or None) of one run.log dict."""
    train = next((t for t in PRIMARY_LOSS_TAGS if t in data), None)
    evals = [t for t in data if isinstance(t, str) and "loss" in t.lower()
             and t.lower().split("/")[0].split("_")[0] in EVAL_PREFIXES]
    if train is None:
        train = next((t for t in data if isinstance(t, str) and "loss" in t.lower() and t not in evals), None)
    return train, (evals[0] if evals else None)


class Backend:
    """No monitoring at all: the plain run the overheads are measured against."""

    tool = "plain"

    def watch(self, run, model, optimizer, name):
        pass

    def train_log(self, run, step, data, loss_tag):
        pass

    def eval_log(self, run, step, value):
        pass

    def finish(self, run, crashed):
        return []


class Run:
    def __init__(self, backend, logdir="runs", name=None, config=None, **_ignored):
        self._backend = backend
        self.name = name or time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() & 0xffff:04x}"
        self.dir = os.path.join(os.fspath(logdir), self.name)  # trainscope's run dir: logdir/name
        os.makedirs(self.dir, exist_ok=True)
        self.config = config
        self._step = 0          # the step of the next training loss (one per logged training loss)
        self._finished = False
        self._findings = []
        self.models = []        # [(model, optimizer, name)]
        self._t0 = time.perf_counter()

    # ---- the API ----
    def watch(self, model, optimizer=None, *args, name=None, **options):
        self.models.append((model, optimizer, name))
        try:
            self._backend.watch(self, model, optimizer, name)
        except Exception as error:  # as trainscope: a monitor that fails must not stop the training
            print(f"[{self._backend.tool}] watch failed: {type(error).__name__}: {error}", file=sys.stderr)
        return None

    def log(self, data, step=None):
        train_tag, eval_tag = split_losses(data)
        if eval_tag is not None:
            value = _number(data[eval_tag])
            if value is not None:
                self._backend.eval_log(self, max(self._step - 1, 0), value)
        if train_tag is not None:
            self._backend.train_log(self, self._step, data, train_tag)
            self._step += 1

    def data(self, source, steps=None):
        return _batches(source, steps)

    def log_classification(self, *args, **kwargs):
        pass

    def step(self):
        return _NullContext()

    def flush(self):
        pass

    @property
    def findings(self):
        return list(self._findings)

    def finish(self, status="finished", exit_reason=""):
        if self._finished:
            return
        self._finished = True
        crashed = status != "finished"
        try:
            self._findings = self._backend.finish(self, crashed) or []
        except Exception as error:
            print(f"[{self._backend.tool}] analysis failed: {type(error).__name__}: {error}", file=sys.stderr)
            self._findings = [{"error": f"{type(error).__name__}: {error}"}]
        out = {"tool": self._backend.tool, "status": status, "exit_reason": exit_reason, "steps": self._step,
               "seconds": time.perf_counter() - self._t0, "findings": self._findings}
        with open(os.path.join(self.dir, "peer_findings.json"), "w") as f:
            json.dump(out, f, indent=1, default=_json_default)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            self.finish("crashed", f"{exc_type.__name__}: {exc}")
        return False


def _json_default(value):
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except Exception:
        pass
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _batches(source, steps):
    try:
        iterator = iter(source)
    except TypeError:
        if not callable(source):
            raise

        def calls():
            while True:
                try:
                    yield source()
                except StopIteration:
                    return
        iterator = calls()
    if steps is None:
        return iterator

    def bounded():
        for i, batch in enumerate(iterator):
            if i >= steps:
                return
            yield batch
    return bounded()


def make_api(module_globals, backend_factory):
    """Fills a shim's trainscope module: init(), Run, __version__."""
    def init(logdir="runs", name=None, config=None, **options):
        return Run(backend_factory(), logdir, name, config, **options)
    module_globals["init"] = init
    module_globals["Run"] = Run
    module_globals["__version__"] = "shim"
