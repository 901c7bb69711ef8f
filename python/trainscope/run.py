"""A recorded run: the object ts.init() returns.

The hot path is C++ (trainscope._core.Recorder): run.log() hands the dict to it in one
call; plain numbers are queued there without touching Python objects again. Tensors,
numpy scalars and odd values come back to Python and are handled here. Nothing here
waits for disk, and nothing here raises into the training loop for a bad value: a bad
tag or value is reported once and skipped.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import warnings
import weakref

from trainscope import _core

_live_runs: "weakref.WeakSet[Run]" = weakref.WeakSet()
_exit_reason: list[str] = []  # why the interpreter is going down, if not cleanly


def init(logdir="runs", name=None, config=None, *, resume=False, flush_interval=1.0,
         queue_capacity=1 << 22):
    """Starts recording a run into <logdir>/<name>/trainscope.db and returns it.

    name: None makes one from the start time. config: any JSON-able dict (other values are
    stored as their str()). resume=True appends to an existing run of that name.
    """
    return Run(logdir, name, config, resume=resume, flush_interval=flush_interval,
               queue_capacity=queue_capacity)


class Run:
    """One training run being recorded. See ts.init()."""

    def __init__(self, logdir, name, config, *, resume, flush_interval, queue_capacity):
        config_json = json.dumps(config if config is not None else {}, default=str)
        command_line = " ".join([sys.executable] + sys.argv)
        self._recorder = _core.Recorder(os.fspath(logdir), name or "", config_json, command_line,
                                        resume, queue_capacity, flush_interval, self._rank_meta())
        self.name = self._recorder.name
        self.dir = self._recorder.run_dir
        self.config = config
        # The step of the next log() call without an explicit step. It advances by one per
        # call until something marks step boundaries (run.step(), watch()).
        self._step = 0
        self._auto_step = True
        self._deferred = []      # (tag, step, device tensor) waiting to be copied together
        self._in_flight = []     # (tags, steps, host buffer, event) copies not yet complete
        self._warned = set()
        self._finished = False
        self.findings = []
        _live_runs.add(self)
        _install_exit_handlers()

    # ---- logging ----

    def log(self, data, step=None):
        """Records {tag: value} at `step` (default: the current step).

        Values: int, float, bool, numpy scalars, torch scalars and 0-d tensors. A tensor on
        an accelerator is copied to the host later, with its neighbours, without a sync.
        """
        if step is None:
            step = self._step
            if self._auto_step:
                self._step = step + 1
        elif self._auto_step and step >= self._step:
            self._step = step + 1
        rest = self._recorder.log_dict(data, step)
        if rest is not None:
            self._log_slow(rest, step)
        if self._in_flight:
            self._collect_copies(wait=False)

    def _log_slow(self, items, step):
        for key, value in items:
            if key is None:  # a tag the recorder refused: value is its message
                self._warn_once(value, value)
                continue
            if not isinstance(key, str):
                self._warn_once(("key", type(key)), f"tag {key!r} is not a str; skipped")
                continue
            number = self._to_number(key, value, step)
            if number is not None:
                reason = self._recorder.log_scalar(key, number, step)
                if reason:
                    self._warn_once(key, reason)
        if len(self._deferred) >= 256:
            self._start_copies()

    def _to_number(self, key, value, step):
        """A float for value, or None when it is deferred (device tensor) or unusable."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            if value.numel() != 1:
                self._warn_once(("shape", key), f"{key}: a tensor of {value.numel()} elements is not a scalar; skipped")
                return None
            if value.device.type == "cpu":
                return float(value.detach().reshape(()).item())
            self._deferred.append((key, step, value.detach().reshape(())))
            return None
        try:
            return float(value)  # numpy scalars, Decimal, Fraction, ...
        except (TypeError, ValueError):
            self._warn_once(("type", key), f"{key}: a {type(value).__name__} is not a number; skipped")
            return None

    def _start_copies(self):
        """Copies deferred device scalars to the host in one transfer, without waiting."""
        if not self._deferred:
            return
        import torch
        deferred, self._deferred = self._deferred, []
        by_device = {}
        for key, step, tensor in deferred:
            by_device.setdefault(tensor.device, []).append((key, step, tensor))
        for device, items in by_device.items():
            stacked = torch.stack([t.to(torch.float64) for _, _, t in items])
            pinned = device.type == "cuda"
            host = torch.empty(stacked.shape, dtype=torch.float64, pin_memory=pinned)
            host.copy_(stacked, non_blocking=pinned)
            event = None
            if pinned:
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(device))
            self._in_flight.append(([k for k, _, _ in items], [s for _, s, _ in items], host, event))

    def _collect_copies(self, wait):
        still = []
        for keys, steps, host, event in self._in_flight:
            if event is not None and not event.query():
                if not wait:
                    still.append((keys, steps, host, event))
                    continue
                event.synchronize()
            for key, step, value in zip(keys, steps, host.tolist()):
                self._recorder.log_scalar(key, value, step)
        self._in_flight = still

    def _warn_once(self, key, message):
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"trainscope: {message}", stacklevel=4)

    # ---- lifecycle ----

    def flush(self):
        """Blocks until everything logged so far is in the store (readers see it)."""
        self._start_copies()
        self._collect_copies(wait=True)
        self._recorder.flush()

    def finish(self, status="finished", exit_reason=""):
        """Flushes, closes the run and prints a one-line summary on stderr."""
        if self._finished:
            return self._summary
        self._finished = True
        try:
            self._start_copies()
            self._collect_copies(wait=True)
        except Exception as error:  # a broken device must not lose the rest of the run
            exit_reason = exit_reason or f"copying device values failed: {error}"
        dropped = self._recorder.dropped
        error = self._recorder.close(status, exit_reason)
        _live_runs.discard(self)
        self._summary = {"name": self.name, "dir": self.dir, "status": status,
                         "steps": self._step, "dropped": dropped, "error": error or None,
                         "findings": list(self.findings)}
        line = f"trainscope: run {self.name} {status} at step {self._step} -> {self.dir}"
        if dropped:
            line += f" ({dropped} points dropped: the queue was full)"
        if error:
            line += f" (store error: {error})"
        print(line, file=sys.stderr)
        return self._summary

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            self.finish("crashed", exc_type.__name__)
        return False

    @staticmethod
    def _rank_meta():
        """Rank and world size when torch.distributed is up (never imports torch)."""
        torch = sys.modules.get("torch")
        meta = {}
        try:
            dist = torch.distributed if torch is not None else None
            if dist is not None and dist.is_available() and dist.is_initialized():
                meta = {"rank": str(dist.get_rank()), "world_size": str(dist.get_world_size())}
        except Exception:
            pass
        return meta


# ---- ending cleanly: normal exit, uncaught exception, SIGINT, SIGTERM ----

_handlers_installed = False


def _finish_all(status, reason):
    for run in list(_live_runs):
        try:
            run.finish(status, reason)
        except Exception as error:
            print(f"trainscope: could not close run {run.name}: {error}", file=sys.stderr)


def _at_exit():
    if _exit_reason:
        _finish_all("crashed", _exit_reason[0])
    else:
        _finish_all("finished", "")


def _install_exit_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_at_exit)

    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        _exit_reason.append(exc_type.__name__)  # KeyboardInterrupt for Ctrl-C
        previous_hook(exc_type, exc, tb)

    sys.excepthook = excepthook

    # SIGTERM ends Python without atexit; close the runs, then die of the signal as asked.
    # Only where nobody else handles it, and only from the main thread (Python's rule).
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def _on_sigterm(signum, frame):
    _finish_all("crashed", "SIGTERM")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
