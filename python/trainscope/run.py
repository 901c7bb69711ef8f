"""A recorded run: the object ts.init() returns.

The hot path is C++ (trainscope._core.Recorder): run.log() hands the dict to it in one
call; plain numbers are queued there without touching Python objects again. Tensors,
numpy scalars and odd values come back to Python and are handled here. Nothing here
waits for disk, and nothing here raises into the training loop for a bad value: a bad
tag or value is reported once and skipped.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

from trainscope import _core
from trainscope._alerts import StopTraining, alert_callbacks, alert_rules_source
from trainscope._batches import Batches
from trainscope._process_exit import install_exit_handlers, live_runs

_LAST_STEP = (1 << 63) - 1


def init(logdir="runs", name=None, config=None, *, resume=False, flush_interval=1.0,
         queue_capacity=1 << 22, doctor=True, alerts=None, tensorboard=False, project=None):
    """Starts recording a run into <logdir>/<name>/trainscope.db and returns it.

    name: None makes one from the start time. config: any JSON-able dict (other values are
    stored as their str()). resume=True appends to an existing run of that name.
    doctor=True judges the run while it trains (on a background thread): findings are
    printed as they open, kept in run.findings and stored with the run.
    alerts: your alert rules (docs/doctor.md "Alert rules"): the path of a TOML rules
    file, or a list of rule dicts with the same keys. A bad rule raises ValueError here,
    naming the file (or alerts[i]) and the line.
    tensorboard: True mirrors the run's scalars and histograms live into
    <run dir>/tensorboard/, a directory name into <dir>/<run name>/, for
    `tensorboard --logdir` (docs/ingest.md).
    project: with TRAINSCOPE_SERVER (and TRAINSCOPE_TOKEN) set, the run is also forwarded to
    that team server under this project (default TRAINSCOPE_PROJECT) as it is written: the
    local file first, sent from a background thread, resumed after an outage (docs/server.md).
    """
    from trainscope.distributed import rank_layout
    given = logdir
    logdir, name = rank_layout(logdir, name)  # under torch.distributed: <logdir>/<name>/rank-<r>
    # On a team server, a rank's run is <name>/rank-<r> too (as below the logdir).
    relative = os.path.relpath(os.path.join(os.fspath(logdir), name or ""), os.fspath(given))
    forward_name = relative.replace(os.sep, "/") if name and not relative.startswith("..") else ""
    return Run(logdir, name, config, resume=resume, flush_interval=flush_interval,
               queue_capacity=queue_capacity, doctor=doctor, alerts=alerts, tensorboard=tensorboard,
               project=project, forward_name=forward_name)


class Run:
    """One training run being recorded. See ts.init()."""

    def __init__(self, logdir, name, config, *, resume, flush_interval, queue_capacity, doctor=True,
                 alerts=None, tensorboard=False, project=None, forward_name=""):
        config_json = json.dumps(config if config is not None else {}, default=str)
        command_line = " ".join([sys.executable] + sys.argv)
        rules_file, rules_text, rules_origin = alert_rules_source(alerts)
        if tensorboard not in (True, False, None) and not isinstance(tensorboard, (str, os.PathLike)):
            raise TypeError(f"tensorboard= takes True/False or a directory, not {type(tensorboard).__name__}")
        tensorboard_dir = "" if tensorboard in (True, False, None) else os.fspath(tensorboard)
        self._recorder = _core.Recorder(os.fspath(logdir), name or "", config_json, command_line,
                                        resume, queue_capacity, flush_interval, self._rank_meta(),
                                        doctor, alert_rules_file=rules_file, alert_rules_text=rules_text,
                                        alert_rules_origin=rules_origin or "alert rules",
                                        tensorboard=bool(tensorboard), tensorboard_dir=tensorboard_dir,
                                        project=project or "", forward_name=forward_name)
        self.tensorboard_path = self._recorder.tensorboard_path or None
        self.alerts = []          # every alert taken so far (dicts), oldest first
        self._has_rules = self._recorder.alert_rule_count > 0
        self._stop = None         # the StopTraining raised, once a "stop" alert fired
        self._failed_callbacks = set()
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
        self._module_timers = []  # run.watch(perf=True): trainscope.perf.watch_modules
        self._lr_tags = ()        # the opt/lr tags watch() logs
        self._user_lr_tags = set()  # those of them the script logs itself: watch() leaves them to it
        self._sampler = None      # the C++ system-metrics thread (watch())
        self._models = None       # watch.Models: the watched models' names and meta
        self._classification = {}
        live_runs.add(self)
        install_exit_handlers()

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
        if self._lr_tags:  # watch() logs these unless the script does (docs/watch.md)
            for tag in self._lr_tags:
                if tag in data and tag not in self._user_lr_tags:
                    self._user_lr_tags.add(tag)
        rest = self._recorder.log_dict(data, step)
        if rest is not None:
            self._log_slow(rest, step)
        if self._in_flight:
            self._collect_copies(wait=False)

    def _log_slow(self, items, step):
        alert_pending = False
        for key, value in items:
            if key is None:
                if value is None:  # an alert rule fired (see _poll_alerts)
                    alert_pending = True
                else:  # a tag the recorder refused: value is its message
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
        if alert_pending:
            # A log at `step` means every earlier step has ended: alerts of those are due.
            self._poll_alerts(step)

    # ---- alert rules (docs/doctor.md "Alert rules") ----

    def _step_ended(self, step):
        """The step clock's step end (watch(), data(), step()): alerts up to `step` are due."""
        if self._has_rules and self._recorder.alerts_pending:
            self._poll_alerts(step + 1)

    def _poll_alerts(self, before_step, boundary=True):
        """Takes the alerts of steps before before_step and does their Python actions.

        At a step boundary, "stop" raises StopTraining once the others are done; at the end
        of the run (boundary=False) only print and callback are left to do.
        """
        alerts = self._recorder.take_alerts(before_step)
        stop = None
        for alert in alerts:
            self.alerts.append(alert)
            actions = alert["actions"]
            if "print" in actions:
                print(f"trainscope: [{alert['severity']}] alert {alert['message']}", file=sys.stderr)
            if "callback" in actions:
                self._call_alert_callback(alert)
            if boundary and "pdb" in actions:
                self._alert_pdb(alert)
            if boundary and "stop" in actions and stop is None:
                stop = alert
        if stop is not None:
            self._stop = StopTraining(stop)  # finish() records the latest as the exit reason
            raise self._stop

    def _call_alert_callback(self, alert):
        name = alert["callback"]
        fn = alert_callbacks.get(name)
        if fn is None:
            if ("missing", name) not in self._failed_callbacks:
                self._failed_callbacks.add(("missing", name))
                print(f"trainscope: alert rule '{alert['rule']}' names callback {name!r}, but none is "
                      f"registered under that name (ts.on_alert({name!r}, fn)); skipped", file=sys.stderr)
            return
        try:
            fn(dict(alert))
        except Exception as error:  # a broken callback never reaches the training
            if name not in self._failed_callbacks:
                self._failed_callbacks.add(name)
                print(f"trainscope: alert callback {name!r} raised {type(error).__name__}: {error}; "
                      f"training goes on (reported once)", file=sys.stderr)

    @staticmethod
    def _alert_pdb(alert):
        where = f"alert rule '{alert['rule']}' at step {alert['step']}"
        try:
            interactive = sys.stdin is not None and sys.stdin.isatty()
        except (AttributeError, ValueError, OSError):
            interactive = False
        if not interactive:
            print(f"trainscope: {where} asked for pdb; skipped: stdin is not a terminal", file=sys.stderr)
            return
        import pdb
        # The user's frame: the first caller outside trainscope and torch.
        frame = sys._getframe(1)
        package = os.path.dirname(os.path.abspath(__file__))
        torch = sys.modules.get("torch")
        skip = [package] + ([os.path.dirname(os.path.abspath(torch.__file__))] if torch is not None else [])
        while frame.f_back is not None and any(os.path.abspath(frame.f_code.co_filename).startswith(p) for p in skip):
            frame = frame.f_back
        print(f"trainscope: {where}: {alert['message']}; entering pdb ('c' continues the training)",
              file=sys.stderr)
        # Skipping trainscope and torch makes pdb stop at the next line of the user's code.
        pdb.Pdb(skip=["trainscope", "trainscope.*", "torch", "torch.*"]).set_trace(frame)

    def _to_number(self, key, value, step):
        """A float for value, or None when it is deferred (device tensor) or unusable."""
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            # From now on log_dict reads host tensors of one element itself (recorder_bindings.cc).
            self._recorder.read_tensors_as(torch.Tensor)
            if value.numel() != 1:
                self._warn_once(("shape", key), f"{key}: a tensor of {value.numel()} elements is not a scalar; skipped")
                return None
            if value.is_cpu:
                return float(value.item())  # a loss that requires grad too: item() reads, no graph
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

    def _watched_models(self):
        if self._models is None:
            from trainscope._watch.models import Models
            self._models = Models(self._recorder)
        return self._models

    def watch(self, model, optimizer=None, every=1, histograms_every=100, activations=True, name=None,
              **options):
        """Records gradients, weights, updates, activations, lr, times and memory of a model.

        Args:
            model (torch.nn.Module): the model; its forward hooks see every training
                forward. A torch.compile'd model keeps everything but activations.
            optimizer (torch.optim.Optimizer, optional): the optimizer; its steps end the
                training steps, gradients are read just before each and weights after.
                Without one, an optimizer made later that holds the model's parameters is
                adopted (a library's Trainer); until then steps end at run.step(),
                run.data()'s next batch, or the next training forward after a backward.
                Several watched optimizers make one step per iteration (docs/watch.md
                "Several models").
            name (str, optional): the model's namespace in the tags (grad/<name>/<param>).
                The first model watched without one keeps the bare tags; a later one is
                named after its class. docs/watch.md "Several models".
            every (int): gradient statistics, lr and inputs every `every` steps. Default 1.
            histograms_every (int): exponent histograms every this many steps; 0: never.
                Default 100.
            activations (bool): per-module output statistics. Default True.
            activations_every (int): steps between measured forwards. Default 20 * every.
            weights_every (int): weight and update (w_t - w_{t-1}) statistics. Default
                10 * every.
            units_every (int): per-unit (row) gradient norms. Default histograms_every.
            dense_steps (int): the first steps that measure gradients, histograms, unit
                norms, weights and updates every step wherever their cadence is left at
                its default (one given here is kept from step 0). Default 50; 0: off.
            guard (bool): skip an optimizer step whose gradients are not finite. Default
                False.
            census_every (int): a census of live Python objects by type. Default 500.
            census_budget (float or None): a census is skipped while the censuses would
                take more than this share of the run's wall time. Default 0.01; None:
                every census_every steps whatever it costs.
            memory (bool): mem/rss and mem/cuda_* every step. Default True.
            inputs (bool): the model's float inputs and the labels' range. Default True.
            hot_gradients (bool or "auto"): gradient statistics inside backward while in
                cache (CPU, large tensors, optimizers outside torch.optim). Default "auto".
            system_interval (float): seconds between system metric samples; 0: off.
                Default 5.0.
            checks (bool): the model checks before the first step (ARCHITECTURE_WARNING,
                docs/doctor.md); loss_fn and batch_size help them. Default True.
            perf (bool): each leaf module's forward and backward time every step
                (perf/module/<name>/forward_s, backward_s; CPU only, from hooks: on an
                accelerator profile with run.profile()). Default False.
            flops: with perf, ts.count_flops(model, example_inputs) of one forward: adds
                perf/module/<name>/flops_per_second. Default None.

        Returns:
            The watcher, or None if it could not be set up (reported; training goes on).
            run.finish() removes its hooks. docs/watch.md describes every series.

        Example::

            run = trainscope.init("runs", "mnist")
            run.watch(model, optimizer, histograms_every=50)
            for x, y in run.data(loader):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                run.log({"train/loss": loss})
            run.finish()
        """
        from trainscope.watch import Watcher
        clock = self._step_clock()
        system_interval = options.pop("system_interval", 5.0)
        checks = options.pop("checks", True)
        loss_fn = options.pop("loss_fn", None)
        batch_size = options.pop("batch_size", None)
        module_perf = options.pop("perf", False)
        flops = options.pop("flops", None)
        self._watched_models().namespace(model, name)  # a bad or taken name: ValueError, the caller's
        try:
            watcher = Watcher(self, clock, model, optimizer, every=every, histograms_every=histograms_every,
                              activations=activations, name=name, **options)
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
        if module_perf:
            try:
                from trainscope.perf import watch_modules
                self._module_timers.append(watch_modules(self, model, flops))
            except Exception as error:
                self._warn_once("perf", f"per-module times are off: {error}")
        if checks:
            from trainscope.checks import watch_checks
            watch_checks(self, model, loss_fn=loss_fn, batch_size=batch_size)  # never raises
        return watcher

    def _add_finding(self, finding):
        """Stores a finding of the Python client (a DESIGN.md JSON dict) with the run,
        prints it as the online doctor prints its own, and keeps it for run.findings."""
        self._recorder.add_finding_json(json.dumps(finding, default=str))
        if not hasattr(self, "_client_findings"):
            self._client_findings = []
        self._client_findings.append(finding)
        location = f" in {finding['location']}" if finding.get("location") else ""
        print(f"trainscope: [{finding['severity']}] {finding['code']} at step {finding['step']}{location}: "
              f"{finding['summary']}", file=sys.stderr)

    def data(self, source, steps=None):
        """Yields the batches of source, recording the wait for each as time/data.

        source: any iterable (a DataLoader, a list, a generator such as
        `(get_batch(data, i) for i in range(0, n, bptt))`), or a batch function called
        with no arguments (`run.data(get_batch)`, `run.data(lambda: get_batch("train"))`):
        it is called once per batch, without end, until it raises StopIteration; `next()`
        on the result or `steps=` bounds it. steps: at most this many batches.
        Each step's batch is timed from the call to the batch's return.
        """
        return Batches(self, source, steps)

    def step(self):
        """`with run.step():` marks one training step explicitly."""
        from trainscope.watch import StepContext
        return StepContext(self._step_clock())

    def profile(self, steps=3, **options):
        """Profiles `steps` training steps with torch.profiler (after `wait` and `warmup` steps,
        1 each) and analyses the trace into run.findings (trainscope/profile.py, docs/traces.md)."""
        from trainscope.profile import Profile
        return Profile(self, steps=steps, **options).start()

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
        if self._stop is not None and status == "finished":
            status, exit_reason = "stopped", self._stop.reason
        error = self._recorder.close(status, exit_reason)
        # After close: the last write's drops are counted too (one count, by cause).
        dropped, drops, gaps = self._recorder.dropped, self._recorder.drops, self._recorder.gaps
        live_runs.discard(self)
        if self._has_rules:
            try:  # alerts of the last steps: reported, nothing left to stop
                self._poll_alerts(_LAST_STEP, boundary=False)
            except Exception as alert_error:
                print(f"trainscope: the last alerts were lost: {alert_error}", file=sys.stderr)
        self._summary = {"name": self.name, "dir": self.dir, "status": status,
                         "steps": self._step, "dropped": dropped, "drops": dict(drops),
                         "gaps": [list(gap) for gap in gaps], "error": error or None,
                         "findings": list(self.findings)}
        line = f"trainscope: run {self.name} {status} at step {self._step} -> {self.dir}"
        findings = self._summary["findings"]
        if findings:
            worst = {"critical": 0, "warning": 1, "info": 2}
            findings_sorted = sorted(findings, key=lambda f: (worst.get(f["severity"], 3), f["step"]))
            codes = ", ".join(dict.fromkeys(f["code"] for f in findings_sorted))
            line += f"; {len(findings)} findings: {codes} (trainscope diagnose {self.dir})"
        if dropped:
            causes = ", ".join(f"{count} {cause}" if len(drops) > 1 else cause for cause, count in drops.items())
            line += f" ({dropped} points dropped: {causes})"
        if gaps:
            line += " (steps lost: " + ", ".join(f"{first}-{last} {cause}" for first, last, cause in gaps) + ")"
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
        for timer in self._module_timers:
            try:
                timer.flush()
                timer.detach()
            except Exception as error:
                print(f"trainscope: last per-module times lost: {error}", file=sys.stderr)
        self._module_timers = []
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
        """The findings the online doctor has opened so far, then the client's own (model
        checks) not already among them by code and location (dicts, DESIGN.md JSON form)."""
        found = json.loads(self._recorder.live_findings_json())
        seen = {(f["code"], f["location"]) for f in found}
        return found + [f for f in getattr(self, "_client_findings", ()) if (f["code"], f["location"]) not in seen]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None or issubclass(exc_type, StopTraining):
            self.finish()
        else:
            self._recorder.set_meta("exception", f"{exc_type.__name__}: {exc}")
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
