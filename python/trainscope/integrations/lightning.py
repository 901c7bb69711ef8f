"""Lightning: `Trainer(logger=TrainscopeLogger("runs"), callbacks=[TrainscopeWatch()])`.

TrainscopeLogger records what the LightningModule logs (self.log) and its hyperparameters
(the run's config); TrainscopeWatch calls run.watch(pl_module, optimizer) when the fit loop
starts, so gradients, weights, updates, activations and step times are recorded too, with
the loss training_step returns at every step (train/step_loss) and each batch's label
range, whatever log_every_n_steps.
Works with `lightning` and with the older `pytorch_lightning` package. docs/integrations.md
says what is recorded and why.
"""

from __future__ import annotations

import json
import os
import sys
import time

try:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import Logger
except ImportError:
    from pytorch_lightning.callbacks import Callback
    from pytorch_lightning.loggers import Logger

import trainscope as ts
from trainscope.integrations import STEP_LOSS_TAG, _FailureReporter, _loggable, _loss_of, _StepLoss

# Lightning's finalize() status -> trainscope's run status.
_STATUS = {"success": "finished", "finished": "finished", "failed": "crashed"}


def _shared_run_name():
    """A run name in trainscope's form, the same on every rank (rank 0's, as ts.init() does),
    made before the run starts because Lightning puts checkpoints under logger.name."""
    name = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() & 0xffff:04x}"
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        box = [name]
        dist.broadcast_object_list(box, src=0)
        name = box[0]
    return name


class TrainscopeLogger(Logger):
    """A Lightning logger that records into a trainscope run (<logdir>/<name>/trainscope.db).

    Metric names go to trainscope unchanged ("train/loss", "val_loss", ...: the doctor's
    roles recognise the usual spellings), except Lightning's own "epoch", which becomes
    train/epoch. The run starts at the first hyperparameters, metrics or `experiment` use,
    with config = the hyperparameters merged over `config`. Other keyword arguments go to
    ts.init() (alerts, tensorboard, doctor, ...). `logger.experiment` is the trainscope Run.
    """

    def __init__(self, logdir="runs", name=None, config=None, **init_options):
        super().__init__()
        self.logdir = os.fspath(logdir)
        self._name = name
        self.extra_config = dict(config or {})
        self.init_options = init_options
        self._hyperparams = {}
        self._epoch_step = None   # the step of the last train/epoch point
        self._run = None
        self._finished = False
        self._failures = _FailureReporter("TrainscopeLogger")

    # ---- what Lightning asks of a logger ----

    @property
    def name(self):
        if self._name is None:
            self._name = _shared_run_name()
        return self._name

    @property
    def version(self):
        return ""  # one run per name: checkpoints go to <logdir>/<name>/checkpoints

    @property
    def save_dir(self):
        return self.logdir

    @property
    def root_dir(self):
        return self.logdir

    @property
    def log_dir(self):
        return os.path.join(self.logdir, self.name)

    @property
    def experiment(self):
        """The trainscope Run (started on first use; None if it could not start: reported)."""
        if self._run is None and "run start" not in self._failures.off:
            self._start()
        return self._run

    def log_hyperparams(self, params, *args, **kwargs):
        params = vars(params) if hasattr(params, "__dict__") and not isinstance(params, dict) else dict(params or {})
        self._hyperparams.update(params)
        if self._run is None:
            self._start()
            return
        # Lightning touches `experiment` at setup, before it logs the hyperparameters: they
        # become the config of the run that already started.
        try:
            config = {**self._hyperparams, **self.extra_config}
            self._run._recorder.set_meta("config", json.dumps(config, default=str))
            self._run.config = config
        except Exception as error:
            self._failures.report("log_hyperparams", error)

    def log_metrics(self, metrics, step=None):
        if self._finished:  # trainer.test() after trainer.fit(): the same run goes on
            self._start()
        run = self.experiment
        if run is None or "log_metrics" in self._failures.off:
            return
        try:
            values = {}
            for key, value in metrics.items():
                value = _loggable(value)
                if value is None:
                    continue
                if key == "epoch":  # Lightning adds it to every log call: one point per step
                    if step is not None and step == self._epoch_step:
                        continue
                    self._epoch_step = step
                    key = "train/epoch"
                values[key] = value
            run.log(values, step=step)
        except Exception as error:
            self._failures.report("log_metrics", error)

    def save(self):
        pass  # the recorder's writer thread flushes by itself (each second)

    def finalize(self, status):
        if self._run is None or self._finished:
            return
        self._finished = True
        try:
            self._run.finish(_STATUS.get(status, status))
        except Exception as error:
            self._failures.report("finish", error)

    # ---- the run ----

    def _start(self):
        """Starts the run, or continues it after finalize() (trainer.test() after trainer.fit())."""
        resume = self._run is not None
        config = {**self._hyperparams, **self.extra_config}
        try:
            self._run = ts.init(self.logdir, self.name, config, resume=resume, **self.init_options)
            self._finished = False
        except TypeError:
            raise  # a misspelt ts.init() option is the caller's error, not a monitoring failure
        except Exception as error:
            self._failures.report("run start", error)
            self._run = None


class TrainscopeWatch(Callback):
    """Calls run.watch(pl_module, optimizer) on the TrainscopeLogger's run when the fit loop
    starts (after the sanity validation, so its forwards are not counted as training).

    Keyword arguments go to run.watch() (every, histograms_every, ...: docs/watch.md).
    """

    def __init__(self, **watch_options):
        self.watch_options = watch_options
        self.watcher = None
        self._run = None
        self._unwrap_closure = None
        self._step_loss = _StepLoss()
        self._failures = _FailureReporter("TrainscopeWatch")

    def on_train_start(self, trainer, pl_module):
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TrainscopeLogger)), None)
        if logger is None:
            self._failures.report("watch", RuntimeError("no TrainscopeLogger among the Trainer's loggers"))
            return
        run = logger.experiment
        if run is None:
            return
        optimizers = list(trainer.optimizers)
        optimizer = optimizers[0] if optimizers else None
        if len(optimizers) > 1:
            print(f"trainscope: {len(optimizers)} optimizers; run.watch() counts the steps of the first",
                  file=sys.stderr)
        # trainscope's step = Lightning's logging step (optimizer steps so far), also after a resume.
        if trainer.global_step > run._step:
            run._step = trainer.global_step
        options = dict(self.watch_options)
        options.setdefault("accumulation_steps", trainer.accumulate_grad_batches)
        try:
            self.watcher = run.watch(pl_module, optimizer, **options)
        except TypeError:
            raise
        except Exception as error:
            self._failures.report("watch", error)
            return
        self._run = run
        if self.watcher is not None and optimizer is not None:
            try:
                self._unwrap_closure = _closure_first(optimizer)
            except Exception as error:
                self._failures.report("closure", error)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # The step begins with the batch: Lightning calls training_step(), not the module's
        # forward, so run.watch()'s forward hook (which begins steps in a plain loop) fires
        # only when training_step calls self(...). The first micro-batch of an optimizer step
        # begins it; the watched optimizer step ends it.
        if self.watcher is None:
            return
        if batch_idx % max(1, trainer.accumulate_grad_batches) == 0:
            try:
                self._run._step_clock().begin()
            except Exception as error:
                self._failures.report("step begin", error)
        try:  # the batch's integer targets, as run.data() takes them
            self.watcher.inspect_batch(batch)
        except Exception as error:
            self._failures.report("labels", error)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # The loss of every step, whatever log_every_n_steps: training_step's returned loss
        # (Lightning hands it here detached), averaged over the step's micro-batches.
        if self.watcher is None or "step loss" in self._failures.off:
            return
        try:
            self._step_loss.add(_loss_of(outputs))
            if (batch_idx + 1) % max(1, trainer.accumulate_grad_batches) == 0:
                loss = self._step_loss.take()
                if loss is not None:
                    self._run.log({STEP_LOSS_TAG: loss})  # the step the optimizer step just ended
        except Exception as error:
            self._failures.report("step loss", error)

    def on_train_end(self, trainer, pl_module):
        self._teardown()

    def on_exception(self, trainer, pl_module, exception):
        self._teardown()

    def _teardown(self):
        if self._unwrap_closure is not None:
            self._unwrap_closure()
            self._unwrap_closure = None


def _closure_first(optimizer):
    """Makes optimizer.step(closure) run the closure before the (watched) step.

    Lightning's automatic optimisation calls optimizer.step(closure=...) with forward and
    backward inside the closure, so run.watch()'s wrapper would see the gradients before
    they exist. For torch's own single-closure optimizers, step(closure) is "loss = closure()
    under enable_grad, then step()", so calling them in that order here is the same update.
    Others (LBFGS calls the closure repeatedly; SAM-style optimizers twice) are left alone.
    Returns the function that undoes it.
    """
    import torch

    cls = type(optimizer)
    if not cls.__module__.startswith("torch.optim") or isinstance(optimizer, torch.optim.LBFGS):
        print(f"trainscope: {cls.__name__}.step(closure) is left as it is: run.watch() sees its gradients "
              f"only when the optimizer is stepped without a closure", file=sys.stderr)
        return None
    watched_step = optimizer.step  # run.watch()'s wrapper

    def step(closure=None, **kwargs):
        if closure is None:
            return watched_step(**kwargs)
        with torch.enable_grad():
            loss = closure()
        watched_step(**kwargs)
        return loss

    optimizer.step = step

    def undo():
        if optimizer.__dict__.get("step") is step:
            optimizer.step = watched_step
    return undo
