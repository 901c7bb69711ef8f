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
         queue_capacity=1 << 22, doctor=True):
    """Starts recording a run into <logdir>/<name>/trainscope.db and returns it.

    name: None makes one from the start time. config: any JSON-able dict (other values are
    stored as their str()). resume=True appends to an existing run of that name.
    doctor=True judges the run while it trains (on a background thread): findings are
    printed as they open, kept in run.findings and stored with the run.
    """
    from trainscope.distributed import rank_layout
    logdir, name = rank_layout(logdir, name)  # under torch.distributed: <logdir>/<name>/rank-<r>
    return Run(logdir, name, config, resume=resume, flush_interval=flush_interval,
               queue_capacity=queue_capacity, doctor=doctor)


class Run:
    """One training run being recorded. See ts.init()."""

    def __init__(self, logdir, name, config, *, resume, flush_interval, queue_capacity, doctor=True):
        config_json = json.dumps(config if config is not None else {}, default=str)
        command_line = " ".join([sys.executable] + sys.argv)
        self._recorder = _core.Recorder(os.fspath(logdir), name or "", config_json, command_line,
                                        resume, queue_capacity, flush_interval, self._rank_meta(),
                                        doctor)
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
        self._clock = None        # watch.StepClock once watch()/data()/step() is used
        self._watchers = []
        self._sampler = None      # the C++ system-metrics thread (watch())
        self._classification = {}
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

    # ---- watching a PyTorch training (trainscope/watch.py) ----

    def _step_clock(self):
        if self._clock is None:
            from trainscope.watch import StepClock
            self._clock = StepClock(self)
        return self._clock

    def watch(self, model, optimizer=None, every=1, histograms_every=100, activations=True, **options):
        """Records gradients, weights, updates, activations, lr, times and memory of a model.

        every: gradient statistics, lr and inputs every `every` optimizer steps;
        histograms_every: exponent histograms and per-unit gradient norms; other options
        (activations_every, weights_every, units_every, accumulation_steps, guard,
        census_every, memory, inputs, system_interval) are described in docs/watch.md.
        Returns the watcher (None if it could not be set up: reported, training goes on);
        run.finish() removes its hooks.
        """
        from trainscope.watch import Watcher
        clock = self._step_clock()
        system_interval = options.pop("system_interval", 5.0)
        try:
            watcher = Watcher(self, clock, model, optimizer, every=every, histograms_every=histograms_every,
                              activations=activations, **options)
        except TypeError:
            raise  # a misspelt option is the caller's error, not a monitoring failure
        except Exception as error:
            print(f"trainscope: watch() failed, the model is not watched; training goes on ({error})",
                  file=sys.stderr)
            return None
        self._watchers.append(watcher)
        if self._sampler is None and system_interval:
            try:
                self._sampler = _core.SystemSampler(self._recorder, float(system_interval))
                self._sampler.set_step(self._step)
                clock.sampler = self._sampler
            except Exception as error:
                self._warn_once("sampler", f"system metrics are off: {error}")
        return watcher

    def data(self, iterable):
        """Yields from iterable, recording the wait for each batch as time/data."""
        from trainscope.watch import timed_data
        clock = self._step_clock()
        inspect = self._watchers[-1].inspect_batch if self._watchers else None
        return timed_data(self, clock, iterable, inspect)

    def step(self):
        """`with run.step():` marks one training step explicitly."""
        from trainscope.watch import StepContext
        return StepContext(self._step_clock())

    def log_classification(self, outputs, targets, prefix="val", num_classes=None, window=None, commit=False):
        """Accumulates predictions (logits or labels) against targets; see trainscope/metrics.py."""
        from trainscope.metrics import ClassificationAccumulator
        acc = self._classification.get(prefix)
        if acc is None:
            acc = self._classification[prefix] = ClassificationAccumulator(self, prefix, num_classes, window)
        try:
            acc.add(outputs, targets, self._step, commit=commit)
        except Exception as error:
            self._warn_once(("classification", prefix), f"log_classification({prefix!r}) failed: {error}")

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
        self._close_watch()
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
        findings = self._summary["findings"]
        if findings:
            worst = {"critical": 0, "warning": 1, "info": 2}
            findings_sorted = sorted(findings, key=lambda f: (worst.get(f["severity"], 3), f["step"]))
            codes = ", ".join(dict.fromkeys(f["code"] for f in findings_sorted))
            line += f"; {len(findings)} findings: {codes} (trainscope diagnose {self.dir})"
        if dropped:
            line += f" ({dropped} points dropped: the queue was full)"
        if error:
            line += f" (store error: {error})"
        print(line, file=sys.stderr)
        return self._summary

    def _close_watch(self):
        """Flushes classification windows, removes hooks, stops the sampler (never raises)."""
        for acc in list(self._classification.values()):
            try:
                acc.flush()
            except Exception as error:
                print(f"trainscope: classification metrics lost: {error}", file=sys.stderr)
        for watcher in self._watchers:
            try:
                watcher.close()
            except Exception as error:
                print(f"trainscope: could not remove the watch hooks: {error}", file=sys.stderr)
        self._watchers = []
        if self._clock is not None:
            try:
                self._clock.finish()
            except Exception as error:
                print(f"trainscope: last step times lost: {error}", file=sys.stderr)
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    @property
    def findings(self):
        """The findings the online doctor has opened so far (dicts, DESIGN.md JSON form)."""
        return json.loads(self._recorder.live_findings_json())

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
