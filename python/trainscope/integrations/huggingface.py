"""Hugging Face transformers: `Trainer(..., callbacks=[TrainscopeCallback()])` records the run.

At train begin the callback starts a run (ts.init) with the TrainingArguments and the
model's config as its config, and watches the model and the optimizer the Trainer made
(run.watch); every Trainer log (loss, learning_rate, grad_norm, eval_*, epoch) is recorded
under trainscope's tags at the Trainer's global_step; train end finishes the run. Whatever
the Trainer's logging_steps, the loss of every step (train/step_loss: the model's own
output.loss of each training forward) and the labels' range of every batch are recorded
too, so the doctor's loss and label checks see every step.
docs/integrations.md says what is recorded and why.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback

import trainscope as ts
from trainscope._tags import family_tag
from trainscope.integrations import STEP_LOSS_TAG, _FailureReporter, _loggable, _loss_of, _StepLoss

# Trainer log keys with a trainscope tag of their own (the doctor's roles: src/doctor/roles.cc).
_TRAINER_TAGS = {
    "loss": "train/loss",               # the mean over the last logging_steps steps
    "learning_rate": family_tag("opt", "lr"),
    "grad_norm": "train/grad_norm",     # before clipping; run.watch()'s grad/* see the clipped gradients
    "epoch": "train/epoch",
    "train_loss": "train/mean_loss",    # the final log's mean over the whole run, not a step's loss
    "total_flos": family_tag("perf", "total_flos"),
    "num_input_tokens_seen": "train/tokens_seen",
}
_SPEED_SUFFIXES = ("_runtime", "_samples_per_second", "_steps_per_second", "_tokens_per_second")
_SPLIT_PREFIXES = (("eval_", "val/"), ("test_", "test/"))
_METRIC_NAMES = {"accuracy": "acc"}  # val/acc is what the doctor calls the validation accuracy


def trainscope_tag(key):
    """The trainscope tag of a Trainer log key: eval_loss -> val/loss, loss -> train/loss, ..."""
    tag = _TRAINER_TAGS.get(key)
    if tag is not None:
        return tag
    if key.endswith(_SPEED_SUFFIXES):
        return family_tag("perf", key)
    for prefix, split in _SPLIT_PREFIXES:
        if key.startswith(prefix):
            metric = key[len(prefix):]
            return split + _METRIC_NAMES.get(metric, metric)
    return key if "/" in key else "train/" + key  # a key of the user's own self.log()


def _run_name(args):
    """args.run_name when the user set one (transformers 4 defaulted it to output_dir)."""
    name = getattr(args, "run_name", None)
    if not name or name == args.output_dir:
        return None
    return name.replace(os.sep, "-")


def _config(args, model):
    config = {}
    try:
        config["training_args"] = args.to_dict()
    except Exception:
        config["training_args"] = {k: str(v) for k, v in vars(args).items()}
    model_config = getattr(model, "config", None)
    if model_config is not None and hasattr(model_config, "to_dict"):
        config["model_config"] = model_config.to_dict()
    if model is not None:
        config["model"] = type(model).__name__
    return config


def _torch_optimizer(optimizer):
    """The torch optimizer inside accelerate's AcceleratedOptimizer (the Trainer's): the
    wrapper skips torch's Optimizer.__init__ (no step hooks of its own) and calls the inner
    step, so run.watch() measures there."""
    try:
        from accelerate.optimizer import AcceleratedOptimizer
    except ImportError:
        return optimizer
    while isinstance(optimizer, AcceleratedOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


class TrainscopeCallback(TrainerCallback):
    """Records a transformers Trainer run with trainscope.

    logdir: where the run goes (default <output_dir>/trainscope); name: the run's name
    (default args.run_name if set, else trainscope's own from the start time); config: merged
    over the recorded TrainingArguments and model config. watch: run.watch() the model and
    the optimizer (False: only the Trainer's logs are recorded); watch_options: keyword
    arguments for run.watch(). Other keyword arguments go to ts.init() (alerts, tensorboard,
    doctor, ...). `callback.run` is the trainscope Run of the last train().
    """

    def __init__(self, logdir=None, name=None, config=None, watch=True, watch_options=None, **init_options):
        self.logdir = logdir
        self.name = name
        self.extra_config = dict(config or {})
        self.watch = watch
        self.watch_options = dict(watch_options or {})
        self.init_options = init_options
        self.run = None
        self.watcher = None
        self._recording = False
        self._lr_from_watch = False
        self._epoch_step = None   # the step of the last train/epoch point
        self._step_loss = _StepLoss()
        self._hooks = []          # the model's forward hooks that take each step's loss and labels
        self._failures = _FailureReporter("TrainscopeCallback")

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self._recording:  # train() again (hyperparameter search): the last run ended without on_train_end
            self._finish()
        try:
            config = _config(args, model)
        except Exception as error:
            self._failures.report("config", error)
            config = {}
        config.update(self.extra_config)
        try:
            logdir = self.logdir if self.logdir is not None else os.path.join(args.output_dir, "trainscope")
            self.run = ts.init(logdir, self.name or _run_name(args), config, **self.init_options)
        except TypeError:
            raise  # a misspelt ts.init() option is the caller's error, not a monitoring failure
        except Exception as error:
            self._failures.report("run start", error)
            return
        self._recording = True
        self.watcher = None
        self._lr_from_watch = False
        self._epoch_step = None
        # The optimizer step that makes the Trainer's global_step g is trainscope's step g, so
        # a Trainer log (made at global_step) lands on the last step it describes, beside
        # run.watch()'s numbers of that step. Ts.init() starts at 0; a resumed Trainer later.
        self.run._step = state.global_step + 1
        if model is None:
            return
        if self.watch:
            self._watch(args, model, optimizer)
        try:  # after watch(): its forward hook starts the step these hooks' labels belong to
            self._hook_model(model)
        except Exception as error:
            self._failures.report("step loss", error)

    def _watch(self, args, model, optimizer):
        options = dict(self.watch_options)
        options.setdefault("accumulation_steps", args.gradient_accumulation_steps)
        optimizer = _torch_optimizer(optimizer)
        try:
            self.watcher = self.run.watch(model, optimizer, **options)  # None when it failed (reported)
        except Exception as error:
            self._failures.report("watch", error)
        # run.watch() records opt/lr from the optimizer at each step: the Trainer's
        # learning_rate is the same number (param_groups[0]["lr"] of that step).
        self._lr_from_watch = self.watcher is not None and optimizer is not None

    def _hook_model(self, model):
        """Forward hooks (with keyword arguments: the Trainer calls model(**batch)) that take
        the loss of each training forward and the range of its integer labels."""
        step_loss = self._step_loss

        def before(module, args, kwargs):
            if not module.training or "step loss" in self._failures.off:
                return None
            try:
                step_loss.summed = kwargs.get("num_items_in_batch") is not None
                labels = kwargs.get("labels")
                if self.watcher is not None and labels is not None:
                    self.watcher.inspect_batch({"labels": labels})
            except Exception as error:
                self._failures.report("step loss", error)
            return None

        def after(module, args, kwargs, output):
            if not module.training or "step loss" in self._failures.off:
                return None
            try:
                import torch
                if torch.is_grad_enabled() and not isinstance(output, torch.Tensor):
                    step_loss.add(_loss_of(output))
            except Exception as error:
                self._failures.report("step loss", error)
            return None

        self._hooks = [model.register_forward_pre_hook(before, with_kwargs=True),
                       model.register_forward_hook(after, with_kwargs=True)]

    def on_step_end(self, args, state, control, **kwargs):
        if not self._recording or "step loss" in self._failures.off:
            return
        try:
            loss = self._step_loss.take()
            if loss is not None:
                self.run.log({STEP_LOSS_TAG: loss}, step=state.global_step)
        except Exception as error:
            self._failures.report("step loss", error)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._recording or not logs or "log" in self._failures.off:
            return
        try:
            values = {}
            for key, value in logs.items():
                if key == "learning_rate" and self._lr_from_watch:
                    continue
                if key == "epoch":  # in every Trainer log (train, eval, the final one): one point per step
                    if state.global_step == self._epoch_step:
                        continue
                    self._epoch_step = state.global_step
                value = _loggable(value)
                if value is not None:
                    values[trainscope_tag(key)] = value
            self.run.log(values, step=state.global_step)
        except Exception as error:
            self._failures.report("log", error)

    def on_train_end(self, args, state, control, **kwargs):
        self._finish()

    def _finish(self):
        if not self._recording:
            return
        self._recording = False
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        try:
            self.run.finish()
        except Exception as error:
            self._failures.report("finish", error)
