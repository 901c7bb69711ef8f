"""The Watcher: the hooks and wrappers of one run.watch(model, optimizer) call, and when each
tensor family is measured. What is measured per step is the Schedule's (plan.py); how, an
executor's (executors.py: host or device, chosen by where the tensors are); this file only
says when, and holds the tickets of what is in flight.

- Gradients: before the real optimizer step (its step pre-hook on torch 2.x, a wrapper on
  torch 1.13 and in guard mode). On the host the pass overlaps the step for torch.optim's
  optimizers (they read gradients, never write them) and is waited for right after it.
  Without an optimizer: at the step's end.
- Weights and updates (w_t - w_{t-1}): the pass of a sampled optimizer step runs at the next
  training forward, beside it, and is waited for before the next step changes the weights.
- Activations and inputs: captured in forward hooks (attached only for measuring forwards):
  on the host one job per tensor, submitted in its hook and let go once done; on a device
  reduced in the hook and copied in one job at the forward's end. A statistic is dropped if
  a later op changed its tensor in place (that module is then measured at once).
- Labels: the integer targets' range (run.data() batches, else integer model inputs).

Several watched models (a GAN's G and D, a teacher and its student, an EMA copy) each have a
Watcher; their tags carry the model's namespace (models.py, series_tag), and the process's
series (time/, mem/, census/) are written once per step by the first of them.
"""

from __future__ import annotations

import collections
import json
import sys

import torch

from trainscope._watch.census import Census
from trainscope._watch.clock import phase_timer
from trainscope._watch.executors import DeviceExecutor, HostExecutor, global_norm
from trainscope._watch import optimizers as optimizer_search
from trainscope._watch.models import series_tag
from trainscope._watch.ops import OpsRecorder
from trainscope._watch.hooks import (BoundWrapper, Failures, GuardedHook, Hook, fused_amp_state, outside_graphs,
                                     start_self_time, step_hooks_may_nest, stop_self_time, unwatch_grad_scalers,
                                     watch_grad_scalers)
import trainscope.watch as facade  # first_tensor and unit_layout are looked up there per call: tests patch them
from trainscope._watch.plan import (CONTAINERS, DENSE_STEPS, DTYPE_CODES, INT_CODES, PLAIN, ParamPlan, Schedule,
                                    activation_kind)

_INT_DTYPES = tuple(INT_CODES)
# Module outputs held for one helper job at most (a forward's end submits the rest): a
# transformer's small outputs go in a few jobs, a CNN's large ones one a job, as before.
ACTIVATION_BATCH_BYTES = 2 << 20


class Watcher:
    """The hooks and wrappers of one run.watch(model, optimizer) call."""

    def __init__(self, run, clock, model, optimizer=None, *, every=1, histograms_every=100,
                 activations=True, activations_every=None, weights_every=None, units_every=None,
                 accumulation_steps=1, guard=False, census_every=500, census_budget=0.01, memory=True, inputs=True,
                 hot_gradients="auto", system_interval=5.0, dense_steps=None, name=None):
        self.run = run
        self.rec = run._recorder
        self.clock = clock
        self.model = model
        self.optimizer = optimizer
        self.closed = False
        self._models = run._watched_models()
        # "" for the first model watched without a name (bare tags), else its namespace.
        self.name = self._models.namespace(model, name)
        self.namespace = self.name + "/" if self.name else ""
        # The first open watcher writes the series of the process (time/, mem/, census/).
        self.primary = not any(not w.closed for w in self._models.watchers)
        # The first dense_steps steps measure in full what is sampled at its default cadence
        # (gradients, histograms, unit norms, weights and updates); a cadence the script set
        # is its choice from step 0. Activations keep theirs: measuring them makes every
        # module take torch's slow call path, and a non-finite gradient already makes the
        # next forward measured in full.
        every_given = None if every == 1 else every
        histograms_given = None if histograms_every == 100 else histograms_every
        every = max(1, int(every))
        histograms_every = max(1, int(histograms_every)) if histograms_every else 0
        self.schedule = Schedule(every, histograms_every,
                                 max(1, int(activations_every or 20 * every)),
                                 max(1, int(weights_every or 10 * every)),
                                 max(1, int(units_every or histograms_every or 100)),
                                 DENSE_STEPS if dense_steps is None else dense_steps,
                                 dense=[name for name, value in (("every", every_given),
                                                                 ("histograms_every", histograms_given),
                                                                 ("weights_every", weights_every),
                                                                 ("units_every", units_every)) if value is None])
        self.guard = bool(guard)
        self.memory = memory
        self.inputs = inputs
        self.failures = Failures()
        if self.primary:
            clock.self_time = start_self_time(clock.core)
            clock.census = Census(self._id, clock.self_time, census_every, census_budget)
        self.self_time = clock.self_time
        self.census = clock.census
        self._ids = {}
        # A torch.compile'd model (OptimizedModule) names its parameters "_orig_mod.<name>":
        # the tags use the model's own names, as its eager twin's and its activations' do.
        self.base = getattr(model, "_orig_mod", model)
        self.params = [(name, p) for name, p in self.base.named_parameters()
                       if p.requires_grad]
        self.plan = ParamPlan(self.params, self._id, self.tag) if self.params else None
        self._host = None           # HostExecutor, made when first needed (it starts the helper thread)
        self._device = DeviceExecutor(self.rec)
        # Tests: run the device path (torch reductions, packing, deferred copies) on CPU
        # tensors, so it is exercised where no GPU is.
        self._force_device_path = False
        # The gradient pass overlaps the optimizer step only for torch.optim's optimizers,
        # which read the gradients and never write them, and not in guard mode, which must
        # know before the step.
        self._overlap = (optimizer is not None and not guard
                         and type(optimizer).__module__.startswith("torch.optim"))
        # In flight, each owned by its ticket: the overlapped gradient pass (until the step
        # returns), the weight passes and snapshot copies (until the weights next change), the
        # last forward's activations (until committed), device copies (until they land).
        self._grad_ticket = None
        self._weight_tickets = []
        self._forward = []          # (executor, ticket, names, versions) of the last forward's activation jobs not logged yet
        self._inputs = []           # (name, host item, version) of this step's model inputs, for its gradient pass
        self._captured = []         # this forward's (name, item) reduced on the device, until its end
        self._act_batch = []        # this forward's (name, host item, version) not submitted yet (_capture)
        self._act_batch_bytes = 0
        self._act_batch_step = None
        self._device_tickets = collections.deque()
        self._rss_step = None       # the step whose RSS the helper logs with the gradient pass
        self._watch_id = None       # the series of time/watch, once asked
        self._label_ids = None      # the series of input/label_min and input/label_max, once asked
        self._weights_due = None    # (step, histogram): the last optimizer step's weight pass, to start
        self._snapshot_step = None  # the step whose post-update weights the snapshots hold
        self._optimizer_steps = 0   # real optimizer steps so far (a GradScaler skip is none)
        self._amp_scale = None      # a fused optimizer's GradScaler scale while its gradients are still scaled
        self._amp_skip = False      # a fused optimizer's step that its GradScaler skips (inf/NaN found)
        self._scaler_stepping = False  # inside GradScaler.step of this optimizer
        self._zeroed = True         # no optimizer step yet: nothing to accumulate into
        self._sentinel = None       # (param, grad object) after the last optimizer step
        self._backward_weight = None  # no optimizer: one value of the last parameter when the last backward began
        self._manual_zeroed = None  # no optimizer: this step's answer of _manual_grads_zeroed
        self._act_in_place = set()  # modules (and input tags) changed in place after capture: measured at once
        self._input_tags = {}       # model input name -> its input/<name> tag
        self._act_step = None       # the step this forward's activations are measured for (None: not)
        self._act_force = False     # after non-finite gradients, or a jump of the norm, the next forward is measured in full
        self._norm_level = None     # the gradient norm's recent level (exponential average)
        self._module_order = []
        self._order_recorded = False
        self._labels_from_data = False  # run.data() batches carry the targets
        # No watched optimizer: a backward of a training forward's output has completed
        # since the last step end (the next training forward or zero_grad then ends the step).
        self._backward_done = False
        self._lr_pending = None     # (step, [(tag, lr)]) until the step closes
        self._lr_tags = []          # opt/lr tag of each param group
        self._grads_after_step = False  # optimizer.step(closure): the gradients exist after it
        self._closure_forwards = 0  # forwards inside this optimizer.step(closure) so far
        self._stepping = False      # inside an optimizer.step(closure)
        self._training_mode = None  # the root module's .training at the last logged forward
        self._mode_step = None      # the last step whose first forward with gradients was seen
        self._input_elements = 0    # the elements of this step's training forwards' first tensors
        self._logged_elements = 0   # the last data/input_elements logged (logged when it changes)
        self._ops = None            # OpsRecorder while the first measured forward runs
        self._ops_done = False
        self._group_shape = None    # (groups, params) of the optimizer's param_groups when last described
        self.group_entries = []     # meta param_groups of this model's optimizer
        self.unoptimized = []       # meta unoptimized_params of this model
        self.without_grad = None    # meta params_without_grad of this model: none at every step looked at
        self._grad_checks = 0
        cuda = any(p.is_cuda for _, p in self.params[:1])
        if clock.timer is None:  # phases are the run's: one timer for every watched model
            clock.timer = phase_timer(clock, cuda)
        self.timer = clock.timer
        if cuda:
            clock.device_timed = True
        self._init_hot(hot_gradients, cuda)
        self._handles = []
        self._act_hooks = []        # (module, hook) pairs, attached for measuring forwards
        self._act_handles = []
        self._restore = []
        self.compiled = hasattr(model, "_orig_mod")
        self.activations = bool(activations)
        if self.compiled and activations != "force":
            # Hooks inside a compiled graph break it (or are traced once and never called):
            # the step-level numbers stay, per-module activations are off.
            self.activations = False
            print("trainscope: model is torch.compile'd: activation statistics are off "
                  "(gradients, weights, updates, lr, times and memory are still recorded)",
                  file=sys.stderr)
        s = self.schedule
        self.options = {
            "every": s.every, "histograms_every": s.histograms_every,
            "activations": self.activations, "activations_every": s.activations_every,
            "weights_every": s.weights_every, "units_every": s.units_every, "dense_steps": s.dense_steps,
            "accumulation_steps": int(accumulation_steps), "guard": self.guard,
            "compiled": self.compiled, "optimizer": type(optimizer).__name__ if optimizer else None}
        if self.primary:  # the first model's options (each model's are in meta "models")
            self.rec.set_meta("watch", json.dumps(self.options))
        self._install()
        self._describe_groups()
        self._models.add(self)
        if optimizer is None and self.params:
            # An optimizer made later (inside a library's Trainer) that holds these
            # parameters is adopted as if it had been passed (optimizers.py).
            optimizer_search.wait_for_optimizer(self)

    # ---- names and the facts recorded once (docs/watch.md "Several models", "Run meta") ----

    def tag(self, family, name):
        """The tag of one of this watch's series (every tag the watcher writes is made here)."""
        return series_tag(self.namespace, family, name)

    def describe(self):
        """The per-model meta maps, keys in this model's namespace ("D/main.0.weight"): what
        the doctor tells parameters apart by where their names say nothing (an nn.Sequential's
        "1.weight" is a BatchNorm's scale), and the facts that exclude causes (a float16
        parameter, one left on another device)."""
        ns = self.namespace
        return {"module_types": {ns + name: type(m).__name__ for name, m in self.base.named_modules() if name},
                "param_shapes": {ns + name: list(p.shape) for name, p in self.params},
                "param_dtypes": {ns + name: str(p.dtype).replace("torch.", "") for name, p in self.params},
                "param_devices": {ns + name: str(p.device) for name, p in self.params}}

    def model_entry(self):
        return {"name": self.name, "class": type(self.base).__name__,
                "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
                "params": sum(p.numel() for _, p in self.params), "tensors": len(self.params),
                "watch": dict(self.options, optimizer=type(self.optimizer).__name__ if self.optimizer else None)}

    def _describe_groups(self):
        """This model's optimizer's groups (names, initial lr) and, for every watched model, its
        trainable parameters that no watched optimizer holds."""
        names = {id(p): self.namespace + name for name, p in self.params}
        entries = []
        shape = None
        if self.optimizer is not None:
            groups = self.optimizer.param_groups
            shape = (len(groups), sum(len(g["params"]) for g in groups))
            for index, group in enumerate(groups):
                params = group["params"]
                lr = group.get("initial_lr", group.get("lr"))
                entries.append({"model": self.name, "optimizer": type(self.optimizer).__name__, "group": index,
                                "lr": float(lr) if isinstance(lr, (int, float)) else None,
                                "params": [names[id(p)] for p in params if id(p) in names],
                                "other_params": sum(1 for p in params if id(p) not in names)})
        self._group_shape = shape
        self.group_entries = entries
        self._refresh_unoptimized()

    def _refresh_unoptimized(self):
        held = set()
        for watcher in self._models.watchers + [self]:
            if watcher.optimizer is not None and not watcher.closed:
                for group in watcher.optimizer.param_groups:
                    held.update(id(p) for p in group["params"])
        for watcher in set(self._models.watchers + [self]):
            watcher.unoptimized = [watcher.namespace + name for name, p in watcher.params if id(p) not in held]

    def _check_groups(self):
        """At sampled steps: the optimizer's groups described again if their count or size
        changed (add_param_group, a layer unfrozen into a group)."""
        groups = self.optimizer.param_groups
        if (len(groups), sum(len(g["params"]) for g in groups)) != self._group_shape:
            self._describe_groups()
            self._models.write_models()

    def adopt(self, optimizer):
        """The optimizer a watch without one waited for (optimizers.py): from now on as if
        watch(model, optimizer) had been called."""
        if self.closed or self.optimizer is not None:
            return
        self.optimizer = optimizer
        self._overlap = not self.guard and type(optimizer).__module__.startswith("torch.optim")
        self.options["optimizer"] = type(optimizer).__name__
        self._install_optimizer()
        self._describe_groups()
        self._models.write_models()

    # ---- setup and teardown ----

    def _install(self):
        root = self.model
        self._handles.append(root.register_forward_pre_hook(self._guarded("forward", self._on_forward_begin)))
        self._handles.append(root.register_forward_hook(self._guarded("forward", self._on_forward_end)))
        if self.activations:
            # Hooks are attached only for the forwards that measure: a module with hooks
            # takes torch's slow call path, which on every step would cost more than the
            # measuring itself does on one step in twenty.
            self._act_hooks = [(module, self._activation_hook(name, module))
                               for name, module in self.base.named_modules()
                               if module is not self.base and not isinstance(module, CONTAINERS)]
        if self._hot is not None:
            for slot, (_, p) in enumerate(self.params):
                self._handles.append(p.register_hook(self._grad_hook(slot, p)))
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    self._handles.append(p.register_post_accumulate_grad_hook(self._grad_accumulated(slot)))
        self._install_optimizer()
        self._wrap(self.model, "zero_grad", self._zero_grad)
        self.inspect_batch = self._guarded("inputs", self._inspect_batch)  # run.data()'s batches
        self._backward_started_hook = self._guarded("backward", self._backward_started)
        self._backward_finished_hook = self._guarded("backward", self._backward_finished)
        self._listeners = [(self.clock.listeners, self._guarded("step end", self._on_step_end)),
                           (self.clock.close_listeners, self._guarded("lr", self._flush_lr)),
                           (self.clock.data_listeners, self._end_backward)]
        for listeners, listener in self._listeners:
            listeners.append(listener)

    def _install_optimizer(self):
        if self.optimizer is not None:
            self.clock.add_optimizer(self.optimizer)
            if not self.guard and hasattr(self.optimizer, "register_step_pre_hook") \
                    and not step_hooks_may_nest(self.optimizer):
                # torch 2.x: the optimizer's own step hooks. optimizer.step stays torch's, so
                # LR schedulers, pickling and a torch.compile'd step see nothing of ours.
                pre, post = outside_graphs(self._step_pre_hook), outside_graphs(self._step_post_hook)
                self._handles.append(self.optimizer.register_step_pre_hook(pre))
                self._handles.append(self.optimizer.register_step_post_hook(post))
            else:
                # torch 1.13 has no step hooks; guard mode must be able to skip the step; a
                # subclass's step would run the hooks once per class.
                self._wrap(self.optimizer, "step", self._optimizer_step)
            self._wrap(self.optimizer, "zero_grad", self._zero_grad)
            self._call_guarded("amp", watch_grad_scalers, self)  # a failure leaves the rest watched

    def _wrap(self, obj, method, wrapper):
        """Replaces obj.method by a BoundWrapper calling wrapper(original, ...)."""
        original = getattr(obj, method)
        own = method in getattr(obj, "__dict__", {})  # already an instance attribute?

        def call(bound_self, *args, **kwargs):
            if self.closed:  # finished runs record nothing more
                return original(*args, **kwargs)
            return wrapper(original, *args, **kwargs)

        call.__name__ = call.__qualname__ = method
        call.__wrapped__ = original
        setattr(obj, method, BoundWrapper(call, obj, method, original))
        self._restore.append((obj, method, original, own))

    def close(self):
        """Removes every hook and wrapper and logs what is still in flight."""
        if self._backward_done and self._owns_steps():
            self._backward_done = False
            self._call_guarded("step end", self.clock.end)  # the last step, without an optimizer
        self._detach_activation_hooks()
        if self._inputs:
            self._call_guarded("inputs", lambda: self._submit_inputs(self._take_inputs()))
        self._call_guarded("activations", self._flush_forward)
        self._call_guarded("gradients", self._finish_gradients)
        self._call_guarded("weights", self._submit_weight_pass)  # the last step's
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.optimizer is not None:
            unwatch_grad_scalers(self)
        self._call_guarded("lr", self._flush_lr)
        for listeners, listener in self._listeners:
            if listener in listeners:
                listeners.remove(listener)
        self.closed = True
        if self.primary:
            stop_self_time(self.self_time)
        optimizer_search.stop_waiting(self)
        self._call_guarded("functional ops", self._stop_ops)
        for obj, method, original, own in reversed(self._restore):
            try:
                if getattr(obj, method).__func__.__wrapped__ is original:
                    if own:
                        setattr(obj, method, original)
                    else:
                        delattr(obj, method)
            except AttributeError:
                pass  # wrapped again by someone else (an LR scheduler): ours stays, inert
        self._restore.clear()
        self._wait_weights()
        if self.plan is not None:
            self.plan.snapshots = [None] * len(self.plan)  # a copy of every parameter: not kept past the watch
        self._drain(wait=True)
        self.timer.collect(wait=True)

    def _call_guarded(self, part, fn, *args, **kwargs):
        """fn(*args, **kwargs), skipped once `part` failed, its failure reported, never raised
        (as a GuardedHook calls it; in C++, no hook made per call)."""
        return self.self_time.call(self.failures, part, fn, *args, **kwargs)

    def _guarded(self, part, fn):
        """fn as a hook for torch (or a listener) to call, guarded and timed (GuardedHook)."""
        return GuardedHook(fn, part, self.failures, self.self_time)

    def _id(self, tag, kind):
        key = (tag, kind)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self.rec.series(tag, kind)
        return found

    def _series(self, family, name, kind="scalar"):
        """_id(tag(family, name), kind), cached by its parts: no tag is put together per step."""
        key = (family, name, kind)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._id(self.tag(family, name), kind)
        return found

    def _helper(self):
        """The host executor's worker (tests pause it to make its passes late)."""
        return self._host_executor().worker

    def _host_executor(self):
        if self._host is None:
            self._host = HostExecutor(self.rec)
        return self._host

    def _executor(self, on_host):
        return self._host_executor() if on_host and not self._force_device_path else self._device

    def _planned(self):
        """The parameter plan, made again if a parameter changed shape, dtype or device."""
        if self.plan is not None and self.plan.changed():
            old = self.plan
            self.plan = ParamPlan(self.params, self._id, self.tag)
            self._models.describe_again(self)  # a dtype or device moved: meta param_dtypes, param_devices
            for i, (p, sig) in enumerate(zip(old.params, old.signature)):  # snapshots that still fit
                if (p.shape, p.dtype, p.device) == sig and old.snapshots[i] is not None:
                    self.plan.snapshots[i] = old.snapshots[i]
        return self.plan

    def _submit(self, call, *args):
        """call(executor, *args) on the plan's executor, planning again once if a tensor no
        longer fits it; returns (ticket or None, executor)."""
        plan = self.plan
        executor = self._executor(plan.on_host)
        ticket = call(executor, plan, *args)
        if ticket is None:
            plan = self._planned()
            executor = self._executor(plan.on_host)
            ticket = call(executor, plan, *args)
        return ticket, executor

    # ---- forward: inputs, timing, module order, activations ----

    def _on_forward_begin(self, module, args):
        # A training forward begins the next step; an evaluation (no_grad or eval mode)
        # right after optimizer.step() still belongs to the step that just ended. One under
        # no_grad is not measured: its inputs and activations would land on that step a
        # second time, and its time is not the training's forward.
        if self._act_batch or self._captured or self._forward:
            self._flush_forward()  # the last forward's, if no step came after it
        if self._grad_ticket is not None:  # before a backward can write the gradients it reads
            self._call_guarded("gradients", self._finish_gradients)
        if not torch.is_grad_enabled():
            self._act_step = None
            return
        if self._stepping:
            # Inside optimizer.step(closure): the step's first forward is measured, the
            # re-evaluations of a line search (LBFGS) are the same step's and are not.
            self._closure_forwards += 1
            if self._closure_forwards > 1:
                self._act_step = None
                return
        else:
            self.timer.stop("backward")  # the last micro-batch's, when gradients accumulate
        clock = self.clock
        if module.training:
            if self._backward_done:
                self._backward_done = False
                if self._owns_steps():
                    clock.end()  # the step of the last backward (docs/watch.md "Steps")
            if clock.pending or clock.step_started is None:
                clock.begin()
            if not self._ops_done:
                self._call_guarded("functional ops", self._start_ops)
        # The work of the step: the elements of each training forward's first tensor (an RL
        # loop's forwards per episode, a batch's tokens), what THROUGHPUT_DROP divides by;
        # the process's series, so the first model's only.
        if self.primary:
            first = args[0] if args else None
            self._input_elements += first.numel() if isinstance(first, torch.Tensor) else _leading_numel(args)
        step = self.run._step
        first_forward = self._mode_step != step
        if first_forward:  # the step's first forward with gradients
            self._mode_step = step
            if module.training is not self._training_mode:
                self._log_mode(module.training)
        due = self.schedule.at(step)
        if self.optimizer is not None and module.training and not self._stepping \
                and "weights" not in self.failures.off:
            # Beside the forward and backward (they read the parameters and do not change
            # them): the last sampled step's weight pass, and the copy of the weights this
            # step's optimizer will update (_weight_jobs_due, inline).
            if self._weights_due is not None or (due.weights and self._snapshot_step != step - 1):
                self._call_guarded("weights", self._weights_beside, step)
        if self.activations and (due.activations or self._act_force or not self._order_recorded):
            self._act_step = step if (due.activations or self._act_force) else None
            self._act_force = False
            if not self._act_handles:
                self._act_handles = [m.register_forward_hook(h) for m, h in self._act_hooks]
        else:
            self._act_step = None
        # The step's first forward only: a loop that calls the model once per environment step
        # or micro-batch would measure the same kind of input hundreds of times a step.
        if self.inputs and due.inputs and first_forward and "inputs" not in self.failures.off:
            try:
                self._log_inputs(args, step)
            except Exception as error:
                self.failures.report("inputs", error)
        if not self._stepping:  # inside a step(closure) the time is the optimizer's
            self.timer.start("forward")

    def _on_forward_end(self, module, args, output):
        if self._ops is not None:
            self._call_guarded("functional ops", self._stop_ops)
        if not self._stepping:
            self.timer.stop("forward")
        if self._act_handles and self.schedule.activations_every > 1:  # measured every step: the hooks stay
            self._detach_activation_hooks()
        if self._act_batch:
            self._submit_activation_batch()
        if self._captured:
            self._submit_forward()
        if not self._order_recorded and self._module_order:
            self._order_recorded = True
            self._models.add_module_order([self.namespace + name for name in dict.fromkeys(self._module_order)])
        if torch.is_grad_enabled() and not self._stepping:
            out = facade._first_tensor(output)
            if out is not None and out.requires_grad:
                # Backward is timed from here to the next optimizer step, forward, batch
                # fetch or step end: the loss and whatever the loop does before the step
                # (clipping, unscaling) count with it. A hook on the output and an autograd
                # callback would time backward alone, but cost ~0.4 ms a step here.
                self.timer.start("backward")
                if self.optimizer is None and module.training and not self.clock.optimizer_owned:
                    # No optimizer step to end backward and the step: the end of this
                    # output's backward is seen by an autograd callback.
                    out.register_hook(self._backward_started_hook)

    def _log_mode(self, training):
        """train/mode_training: the root module's mode (train()/eval()) in the step's first
        forward with gradients, when it differs from the last one logged. An evaluation
        (under no_grad, or a second forward of the same step) is not the step's mode: a
        script that evaluates inside every iteration would otherwise toggle it twice a step."""
        self._training_mode = training
        self.rec.log_scalar(self.tag("train", "mode_training"), 1.0 if training else 0.0, self.run._step)

    def _start_ops(self):
        """The functional ops of the first measured training forward (meta functional_ops):
        one forward under a torch function mode, then off for the rest of the run."""
        self._ops_done = True
        if not self.compiled and OpsRecorder.available():
            self._ops = OpsRecorder(self.self_time)
            self._ops.start()

    def _stop_ops(self):
        ops, self._ops = self._ops, None
        if ops is not None:
            ops.stop()
            self._models.add_functional_ops(ops.names)

    def _detach_activation_hooks(self):
        for handle in self._act_handles:
            handle.remove()
        self._act_handles = []

    def _activation_hook(self, name, module):
        tag = self.tag("act", name)
        kind = activation_kind(module)

        def measure(mod, args, output):
            if not self._order_recorded:
                self._module_order.append(name)
            if self._act_step is not None:
                out = facade._first_tensor(output)
                if out is not None and out.is_floating_point():
                    self._capture(name, tag, out, kind, self.schedule.at(self._act_step).histogram)
            return None

        return self._guarded("activations", measure)

    def _capture(self, name, tag, tensor, kind, histogram, flat=False):
        """Measures a module output (or model input) of a measuring forward.

        On the host it joins the forward's batch, a helper job once ACTIVATION_BATCH_BYTES
        are held or the forward ends: the helper reads it while the forward goes on, and the
        tensor is let go at the first later hook that finds the job done. An output autograd
        does not keep (a BatchNorm's before its ReLU) then lives a few modules longer, not
        until the optimizer step: held that long, the CNN benchmark's allocator returned and
        re-faulted ~10 MB more per step, +10 % of its step time (docs/benchmarks.md). On a
        device it is reduced now, and the forward's rows go to the host in one copy at its end.
        A module a later op changed in place before is measured at once (its values after its
        hook are gone by then)."""
        executor = self._host if tensor.is_cpu and self._host is not None and not self._force_device_path \
            else self._executor(tensor.is_cpu)
        series = self._ids.get((tag, "tensor_stats"))
        if series is None:
            series = self._id(tag, "tensor_stats")
        item = executor.capture(series, tensor, kind, histogram, flat)
        if item is None:
            return
        if executor.on_device:
            self._captured.append((name, item))
            return
        if flat and self._overlap and name not in self._act_in_place:
            # A model input goes with the step's gradient pass (one hand-off a step), read
            # there if no op changed it in place since (_take_inputs).
            self._inputs.append((name, item, tensor._version))
            return
        if name in self._act_in_place:
            executor.activations(self.run._step, [item]).log_activations([True])
            return
        if not self._act_batch:
            self._act_batch_step = self.run._step  # the outputs' step, whenever the batch is submitted
        self._act_batch.append((name, item, tensor._version))
        self._act_batch_bytes += tensor.numel() * tensor.element_size()
        if self._act_batch_bytes >= ACTIVATION_BATCH_BYTES:
            self._submit_activation_batch()

    def _submit_activation_batch(self):
        """The module outputs captured since the last job, as one job of the helper: each job
        wakes it (20-60 us of the training thread on a VM), and a transformer's 45 small
        outputs a step were 45 wakes. ACTIVATION_BATCH_BYTES bounds what is held meanwhile."""
        batch, self._act_batch, self._act_batch_bytes = self._act_batch, [], 0
        executor = self._host_executor()
        ticket = executor.activations(self._act_batch_step, [item for _, item, _ in batch])
        self._commit_activations(finished_only=True)
        self._forward.append((executor, ticket, [name for name, _, _ in batch], [v for _, _, v in batch]))

    def _take_inputs(self):
        """The captured model inputs as captured: [(name, host item)]; one a later op changed
        in place is dropped and measured at capture from then on."""
        inputs, self._inputs = self._inputs, []
        kept = []
        for name, item, version in inputs:
            if item[1]._version == version:
                kept.append((name, item))
            else:
                self._act_in_place.add(name)
        return kept

    def _submit_inputs(self, inputs):
        """Captured inputs no gradient pass took: a job of their own, logged with the forward's."""
        if inputs:
            host = self._host_executor()
            ticket = host.activations(self.run._step, [item for _, item in inputs])
            self._forward.append((host, ticket, [name for name, _ in inputs], [item[1]._version for _, item in inputs]))

    def _submit_forward(self):
        """At the forward's end: the rows reduced on the device go to the host in one copy."""
        captured, self._captured = self._captured, []
        try:
            ticket = self._device.activations(self.run._step, [item for _, item in captured])
            self._forward.append((self._device, ticket, [name for name, _ in captured], None))
        except Exception as error:
            self.failures.report("activations", error)

    def _commit_activations(self, finished_only=False):
        """Logs the activation statistics of the last forward (finished_only: of the host
        jobs already done, letting their tensors go).

        A statistic is dropped when a later op changed its tensor in place (its version moved
        since the module's hook: an in-place ReLU after a conv, say), since the pass may have
        read the changed values; that module is measured in its hook from then on."""
        forward, self._forward = self._forward, []
        for entry in forward:
            executor, ticket, names, versions = entry
            if executor.on_device:  # reduced in the hook, in stream order: logged when the copy lands
                self._device_tickets.append(ticket)
            elif finished_only and (self._forward or not ticket.done()):
                self._forward.append(entry)  # the helper runs jobs in order: none after it is done
            else:
                keep = [t._version == v for t, v in zip(ticket.kept, versions)]
                for name, same in zip(names, keep):
                    if not same:
                        self._act_in_place.add(name)
                ticket.log_activations(keep)

    def _flush_forward(self):
        """Submits the captured forward and logs the statistics of every pending one."""
        if self._act_batch:
            self._submit_activation_batch()
        if self._captured:
            self._submit_forward()
        if self._forward:
            self._commit_activations()

    # ---- inputs and labels ----

    def _log_inputs(self, args, step):
        for index, value in enumerate(args):
            if isinstance(value, torch.Tensor):
                self._log_input(str(index), value, step)
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, torch.Tensor):
                        self._log_input(str(key), item, step)

    def _log_input(self, name, tensor, step):
        if tensor.is_floating_point():
            tag = self._input_tags.get(name)
            if tag is None:
                tag = self._input_tags[name] = self.tag("input", name)
            self._capture(tag, tag, tensor, PLAIN, False, flat=True)  # measured with the forward's activations
        elif tensor.dtype in _INT_DTYPES and tensor.numel() and not self._labels_from_data:
            self.log_label_range(tensor, step)

    def log_label_range(self, tensor, step):
        code = INT_CODES.get(tensor.dtype)
        if tensor.is_cpu and code is not None and tensor.layout is torch.strided:
            # The C++ scan: torch.aminmax's dispatch path is cold at a step's start (0.35 ms
            # measured in the training loop, against 12 us warm).
            ids = self._label_ids
            if ids is None:
                ids = self._label_ids = (self._series("input", "label_min"), self._series("input", "label_max"))
            self.rec.log_int_range(ids[0], ids[1], step, tensor.data_ptr(), tensor.size(), tensor.stride(), code)
        elif not tensor.is_cpu:  # on its device; the values go with the run's deferred copies
            lo, hi = torch.aminmax(tensor.detach())
            self.run.log({self.tag("input", "label_min"): lo, self.tag("input", "label_max"): hi}, step=step)

    def _inspect_batch(self, batch):
        """run.data(): the label range of integer tensors in the batch (targets)."""
        step = self.run._step
        if not self.inputs or not self.schedule.at(step).inputs:
            return
        targets = None
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            targets = batch[-1]
        elif isinstance(batch, dict):
            for key in ("labels", "label", "targets", "target", "y"):
                if key in batch:
                    targets = batch[key]
                    break
        if isinstance(targets, torch.Tensor) and not targets.is_floating_point() and targets.numel() \
                and targets.dtype != torch.bool:
            self._labels_from_data = True  # the model's integer inputs are then not labels
            self.log_label_range(targets, step)

    # ---- backward ----

    def _owns_steps(self):
        """True when nothing else marks step ends: no watched optimizer, run.step() or run.data()."""
        clock = self.clock
        return not (clock.explicit or clock.optimizer_owned or clock.data_owned)

    def _backward_started(self, grad):
        if not self.closed:
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_finished_hook)
            if self.optimizer is None and self._manual_zeroed is None and self.params:
                self._manual_zeroed = self._manual_grads_zeroed()
        return None

    def _manual_grads_zeroed(self):
        """No optimizer (a hand-made update): were the gradients zeroed since the last
        backward? Asked as this backward begins, from one value of the last parameter (two
        reads, no tensor made): a zero_grad() call, gradients set to None, or that gradient
        value 0 (grad.zero_() by hand) count as zeroed. None when it cannot be told: the
        first backward, or that weight has not moved since the last one (the micro-batches of
        an accumulation). A value that happens to be 0 reads as zeroed: a miss, never an alarm."""
        p = self.params[-1][1]
        weight = p.detach().reshape(-1)[0].item()
        last, self._backward_weight = self._backward_weight, weight
        if last is None:
            return None
        if self._zeroed or p.grad is None or p.grad.reshape(-1)[0].item() == 0:
            return True
        return False if weight != last else None

    def _backward_finished(self):
        if self.closed:
            return
        self.timer.stop("backward")
        self._backward_done = True

    def _end_backward(self):
        """run.data() fetches a batch: a backward timed since the last forward ends here."""
        if self.timer.is_open("backward"):
            self._call_guarded("forward", self.timer.stop, "backward")

    # ---- gradients while they are hot (a special path: see docs/watch.md) ----

    def _init_hot(self, hot_gradients, cuda):
        """Gradient statistics taken inside backward, while each gradient is in cache (CPU only)."""
        self._hot = None
        self._hot_bad = False
        self._hot_versions = {}  # slot -> param.grad's version right after backward gave it this gradient
        self.hot_steps = 0  # optimizer steps whose gradient statistics came from inside backward
        if hot_gradients == "auto":
            # A hook per parameter costs ~10 us of Python in backward; reading a gradient
            # that has left the cache costs more than that only for large tensors, and only
            # when that read is on the training thread: an overlapped pass (torch.optim)
            # reads them on the helper thread during the step instead.
            sizes = [p.numel() for _, p in self.params]
            hot_gradients = not self._overlap and bool(sizes) and sum(sizes) / len(sizes) >= 65536
        if hot_gradients and self.optimizer is not None and not cuda and self.params:
            from trainscope import _core
            self._hot = _core.GradCollector(len(self.params))
            self._hot_ids = [self._id(self.tag("grad", n), "tensor_stats") for n, _ in self.params]
            self._hot_unit_ids = [self._id(self.tag("grad_units", n), "vector") if p.dim() >= 2 else 0
                                  for n, p in self.params]

    def _grad_hook(self, slot, param):
        """A parameter hook: the statistics of the gradient it receives, computed while the
        backward op that produced it has just left it in cache. They are used at the optimizer
        step only if they equal param.grad's (one gradient per parameter since zeroing)."""
        code = DTYPE_CODES.get(param.dtype)
        rows = param.shape[0] if param.dim() >= 2 else 0

        def hook(grad):
            if self.closed or self._hot_bad or "gradients" in self.failures.off:
                return None
            due = self.schedule.at(self.run._step)
            if not due.grads:
                return None
            self.self_time.enter()
            try:
                if code is None or grad.dtype != param.dtype or grad.layout != torch.strided \
                        or grad.device.type != "cpu" or not grad.is_contiguous():
                    self._hot_bad = True  # read param.grad at the step instead
                    return None
                self._hot.add(slot, grad.data_ptr(), grad.numel(), code, due.histogram, rows if due.units else 0)
                # param.grad's version once this gradient is in it (torch 1.13: accumulated
                # in place into a zeroed one, or the gradient itself); torch 2.1+ reads it
                # after accumulation (_grad_accumulated) instead.
                existing = param.grad
                self._hot_versions[slot] = grad._version if existing is None else existing._version + 1
            except Exception as error:
                self._hot_bad = True
                self.failures.report("gradients", error)
            finally:
                self.self_time.leave()
            return None

        return Hook(hook)

    def _grad_accumulated(self, slot):
        def hook(param):
            if self._hot is not None and param.grad is not None:
                self._hot_versions[slot] = param.grad._version
        return Hook(hook)

    def _hot_totals(self, step):
        """Logs the in-backward statistics if they are param.grad's; returns totals or None."""
        if self._hot is None or self._hot_bad or self._force_device_path or self._scaler_stepping \
                or not self._grads_were_zeroed():
            return None
        versions = self._hot_versions
        for slot, (count, (_, p)) in enumerate(zip(self._hot.seen(), self.params)):
            if count > 1 or (count == 0 and p.grad is not None):
                return None  # accumulated over several backwards, or a gradient we did not see
            if count == 1 and (p.grad is None or p.grad._version != versions.get(slot)):
                return None  # changed in place since backward (clip_grad_norm_, unscale_): read it now
        self.hot_steps += 1
        return self._hot.log(self.rec, step, self._hot_ids, self._hot_unit_ids)

    # ---- optimizer step: gradients before, weights and updates after ----

    def _zero_grad(self, original, *args, **kwargs):
        if self._grad_ticket is not None:  # the gradient pass reads what this zeroes
            self._call_guarded("gradients", self._finish_gradients)
        if self._backward_done:
            self._backward_done = False
            if self._owns_steps():
                # Without an optimizer, zeroing the gradients after a backward ends the step
                # (before they are gone: the gradient statistics are taken at the step end).
                self._call_guarded("step end", self.clock.end)
        self._zeroed = True  # after the step end, which marks the gradients of a loop with no optimizer
        return original(*args, **kwargs)

    def _optimizer_step(self, original, *args, **kwargs):
        """The wrapper around optimizer.step (torch 1.13, guard mode)."""
        self.self_time.enter()
        try:
            skip = self._step_begin(_closure_of(self.optimizer, args, kwargs) is not None)
            result = None
            if skip:
                self.rec.log_scalar(self.tag("guard", "skipped_step"), 1.0, self.run._step)
                print(f"trainscope: guard skipped optimizer step {self.run._step}: non-finite gradients",
                      file=sys.stderr)
            else:
                self.self_time.leave()  # the optimizer's own work is not trainscope's cost
                try:
                    result = original(*args, **kwargs)
                finally:
                    self.self_time.enter()
                    self._step_returned()
                self._after_real_step()
            self._close_step()
            return result
        finally:
            self.self_time.leave()

    def _step_pre_hook(self, optimizer, args, kwargs):
        """optimizer.register_step_pre_hook (torch 2.x): what the wrapper does before the step."""
        if self.closed:
            return None
        self.self_time.enter()
        try:
            # never True: guard mode wraps the step instead
            self._step_begin(_closure_of(optimizer, args, kwargs) is not None)
        finally:
            self.self_time.leave()
        return None

    def _step_post_hook(self, optimizer, args, kwargs):
        """optimizer.register_step_post_hook (torch 2.x): what the wrapper does after the step."""
        if self.closed:
            return
        self.self_time.enter()
        try:
            self._step_returned()
            self._after_real_step()
            self._close_step()
        finally:
            self.self_time.leave()

    def _step_begin(self, closure=False):
        """Before the real step: gradients, lr, the weights it will change; True when guard
        mode skips the step. With a closure (optimizer.step(closure): LBFGS) the gradients
        are made inside the step: they are read when it returns (_step_returned), and the
        step begins here (its forwards are inside it)."""
        if self._grad_ticket is not None:  # the last step raised before its post-hook
            self._call_guarded("gradients", self._finish_gradients)
        self._stepping = False
        clock = self.clock
        if len(clock.optimizers) > 1:  # else optimizer_step_begins has nothing to do
            clock.optimizer_step_begins(self.optimizer)
        # The step begins here if nothing began it since the last one ended: a closure's
        # forwards are inside the step, and a loop that calls model.forward() itself (the
        # forward-forward example's layers) runs no forward hook.
        if clock.pending or clock.step_started is None:
            clock.begin()
        self.timer.stop("backward")
        self._amp_scale, self._amp_skip = fused_amp_state(self.optimizer)
        if self._act_batch or self._captured or self._forward:
            self._call_guarded("activations", self._flush_forward)
        skip = False
        if closure:
            self._grads_after_step = True
        else:
            try:
                if "gradients" not in self.failures.off:
                    skip = self._before_update()
            except Exception as error:
                self.failures.report("gradients", error)
                skip = False
        if self._weight_jobs_due(self.run._step):  # no training forward came since the last step
            self._call_guarded("weights", self._weights_beside, self.run._step)
        if not skip:
            self._wait_weights()  # the pass and the snapshots read the weights from before this update
            self.timer.start("optimizer")
            if closure:
                self._stepping = True
                self._closure_forwards = 0
        return skip

    def _step_returned(self):
        """Right after the real step, even one that raised: its time, the overlapped pass.
        After a step(closure): the gradients the step used, which its closure made (for
        LBFGS, of its last evaluation: the gradients it leaves in param.grad), and whether
        they were zeroed (a zero_grad inside the closure counts)."""
        self.timer.stop("optimizer")
        self._stepping = False
        self._optimizer_steps += 1
        n = self._optimizer_steps
        if n & (n - 1) == 0 or n % 1024 == 0:  # steps 1, 2, 4, ... 1024, then every 1024th: a loop over parameters
            self._call_guarded("gradients", self._note_params_without_grad)
        # The overlapped gradient pass is not waited for here: the helper reads the gradients
        # until the loop next zeroes them or begins a forward (_finish_gradients there), so
        # the step's end never waits for the helper to wake up.
        if self._grads_after_step:
            self._call_guarded("gradients", self._finish_gradients)
            self._grads_after_step = False
            self._call_guarded("gradients", self._before_update)
            self._call_guarded("gradients", self._finish_gradients)

    def _after_real_step(self):
        try:
            if self.guard:
                self.rec.log_scalar(self.tag("guard", "skipped_step"), 0.0, self.run._step)
            if "weights" not in self.failures.off:
                self._after_update()
        except Exception as error:
            self.failures.report("weights", error)

    def _close_step(self):
        """The optimizer step (or a GradScaler's skip of it) ends the training step."""
        try:
            if self._hot is not None:
                self._hot.reset()
                self._hot_versions.clear()
                self._hot_bad = False
            self._mark_grads()
            if optimizer_search._global_hook and optimizer_search.pending_removal():
                optimizer_search.settle()
            self.clock.optimizer_stepped(self.optimizer)  # the step's end, once every optimizer stepped
        except Exception as error:
            self.failures.report("step end", error)

    # ---- torch.amp.GradScaler ----

    def _scaler_step(self, original, scaler, optimizer, args, kwargs):
        """GradScaler.step(optimizer) of the watched optimizer: records the loss scale its
        gradients were multiplied by (amp/loss_scale) and whether it skipped the step
        (amp/overflow_skip: 1 skipped, 0 not; what the doctor's FP16_OVERFLOW reads). A
        skipped step still ends the training step: optimizer.step is not called then."""
        scale = None
        if scaler.is_enabled() and "amp" not in self.failures.off:
            self.self_time.enter()
            try:
                found = getattr(scaler, "_scale", None)
                # A copy: update() changes the scale in place, and on a device it is logged later.
                scale = found.detach().clone() if isinstance(found, torch.Tensor) else None
            except Exception as error:
                self.failures.report("amp", error)
            finally:
                self.self_time.leave()
        stepped_before = self._optimizer_steps
        # The gradients measured inside backward were scaled; unscale_ changed them in place.
        self._scaler_stepping = True
        try:
            result = original(scaler, optimizer, *args, **kwargs)
        finally:
            self._scaler_stepping = False
        if scale is not None:
            self._call_guarded("amp", self._after_scaler_step, scaler, optimizer, scale, stepped_before)
        return result

    def _after_scaler_step(self, scaler, optimizer, scale, stepped_before):
        stepped = self._optimizer_steps != stepped_before
        state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer)) or {}
        found_inf = list(state.get("found_inf_per_device", {}).values())
        if found_inf:  # 0-d tensors where they were computed: no sync (a device's go with run.log's copies)
            skipped = found_inf[0].to(torch.float32) if len(found_inf) == 1 else \
                sum(f.to(scale.device, torch.float32) for f in found_inf)
            skipped = (skipped > 0).to(torch.float32)
        else:
            skipped = 0.0 if stepped else 1.0
        step = self.run._step
        self.run.log({self.tag("amp", "loss_scale"): scale, self.tag("amp", "overflow_skip"): skipped}, step=step)
        if not stepped:  # no optimizer.step, no hook: the step ends here
            self._close_step()

    def _before_update(self):
        """Gradient statistics, lr, grad_zeroed; returns True when guard mode skips the step."""
        step = self.run._step
        due = self.schedule.at(step)
        ids, values = [], []  # this step's scalars, logged in one call (by the helper, with its pass)
        if due.grads:
            ids.append(self._series("train", "grad_zeroed"))
            values.append(1.0 if self._grads_were_zeroed() else 0.0)
            self._queue_lr(step)
        nonfinite = False
        if self._amp_skip:
            pass  # a fused step its GradScaler skips: no update's gradients, as when optimizer.step is not called
        elif (due.grads or self.guard) and self.plan is not None:
            totals = self._hot_totals(step) if due.grads and self._amp_scale is None and self._hot is not None \
                else None
            if totals is not None:
                ids.append(self.plan.norm_id)
                values.append(global_norm(*totals))
            else:
                ticket, executor = self._gradient_pass(step, due, ids, values, always_norm=True)
                ids = None
                if self.guard:  # must know now (on a device: one synchronising copy, as GradScaler makes)
                    totals = ticket.wait()
                elif executor.on_device:
                    self._device_tickets.append(ticket)
                elif self._overlap:
                    self._grad_ticket = ticket  # beside the optimizer step; waited when it returns
                else:
                    totals = ticket.wait()  # an optimizer from elsewhere may write the gradients
            if totals is not None:
                nonfinite = self._note_gradient_totals(*totals)
        if ids:
            self.rec.log_scalar_ids(ids, values, step)
        return self.guard and nonfinite

    def _gradient_pass(self, step, due, scalar_ids=(), scalar_values=(), always_norm=False):
        """Submits the statistics of every gradient (and the step's scalars); (ticket, executor)."""
        scaled = None
        if self._amp_scale is not None:
            # A fused optimizer's GradScaler left the gradients scaled (the step unscales
            # them itself): the statistics are of unscaled copies.
            inverse = 1.0 / self._amp_scale.double()
            scaled = [None if g is None else (g.double() * inverse).to(g.dtype) for g in self.plan.gradients()]
        rss_id = 0
        if self.memory and self.primary and self.plan.on_host and self._overlap:  # read on the helper too (see _on_step_end)
            rss_id = self._series("mem", "rss")
            self._rss_step = step
        inputs = self._take_inputs() if self._inputs else ()
        host = self._host
        if scaled is None and host is not None and self.plan.on_host and not self._force_device_path:
            # The usual step, straight to the host executor (_submit's way, without its frames).
            ticket = host.gradients(step, self.plan, due.histogram, due.units, always_norm, scalar_ids,
                                    scalar_values, rss_id, inputs)
            if ticket is not None:
                return ticket, host

        def stats(ex, plan):
            if scaled is None and not ex.on_device:  # the parameters' .grad, read by the C++ core
                return ex.gradients(step, plan, due.histogram, due.units, always_norm, scalar_ids, scalar_values,
                                    rss_id, inputs)
            items = [item for _, item in inputs]
            grads = plan.gradients() if scaled is None else scaled
            norm_id = plan.norm_id if always_norm or any(g is not None for g in grads) else 0
            if ex.on_device:
                return ex.stats(step, plan, grads, due.histogram, due.units, norm_id, scalar_ids, scalar_values, rss_id)
            return ex.stats(step, plan, grads, due.histogram, due.units, norm_id, scalar_ids, scalar_values, rss_id,
                            items)
        ticket, executor = self._submit(stats)
        if executor.on_device:
            self._submit_inputs(inputs)
        if ticket is None:  # a gradient that fits no plan (of another dtype than its parameter)
            raise ValueError("a gradient's dtype or size differs from its parameter's")
        if executor.on_device and rss_id:
            self._rss_step = None
        return ticket, executor

    def _finish_gradients(self):
        """Waits for the overlapped gradient pass (which logs the global norm)."""
        ticket, self._grad_ticket = self._grad_ticket, None
        if ticket is not None:
            self._note_gradient_totals(*ticket.wait())

    def _note_gradient_totals(self, sum_squares, nan, inf):
        """Denser when a statistic moves: after non-finite gradients, or a gradient norm 10x
        its recent level (an exponential average), the next forward is measured in full, so
        the doctor sees the layers at the jump rather than at the next sampled step (20
        later by default). True when a gradient was not finite."""
        level = self._norm_level
        if nan or inf:
            self._act_force = True
            return True
        norm = sum_squares ** 0.5
        if level is not None and norm > 10 * level:
            self._act_force = True
        self._norm_level = norm if level is None else 0.9 * level + 0.1 * norm
        return False

    def _note_params_without_grad(self):
        """meta params_without_grad: trainable parameters whose .grad was None at every
        optimizer step looked at, from the third on (a .detach() or a branch never taken on
        their way to the loss), while others had one."""
        without = {name for name, p in self.params if p.grad is None}
        if len(without) == len(self.params):
            return  # no gradient at all at this step (cleared before it): says nothing of the paths
        before = self.without_grad
        self.without_grad = without if before is None else before & without
        self._grad_checks += 1
        if self._grad_checks >= 3 and (self._grad_checks == 3 or self.without_grad != before):
            self._models.write_params_without_grad()

    def _mark_grads(self):
        """Remembers one gradient object: a new object at the next step means zeroed (set to None)."""
        self._zeroed = False
        for _, p in self.params:
            if p.grad is not None:
                self._sentinel = (p, p.grad)
                return
        self._sentinel = None

    def _grads_were_zeroed(self):
        if self._zeroed or self._sentinel is None:
            return True
        p, grad = self._sentinel
        return p.grad is not grad

    def _queue_lr(self, step):
        groups = self.optimizer.param_groups
        lrs = []
        if self._lr_pending is not None and self._lr_pending[0] != step:
            self._flush_lr()  # else this step's lr replaces the one its earlier optimizer step took
        tags = self._lr_tags
        if len(tags) != len(groups):  # the groups' opt/lr tags, made again when a group is added
            tags = self._lr_tags = [self.tag("opt", "lr" if len(groups) == 1 else f"lr/{i}") for i in range(len(groups))]
        for tag, group in zip(tags, groups):
            lr = group.get("lr")
            if lr is None:
                continue
            if tag not in self.run._lr_tags:
                self.run._lr_tags += (tag,)
            lrs.append((tag, lr))
        # Logged when the step closes, and only where the training script does not log
        # that tag itself (README's run.log({"opt/lr": ...}) after optimizer.step()).
        self._lr_pending = (step, lrs)

    def _flush_lr(self):
        """Logs the lr of the last optimizer step, less the tags the user logs."""
        pending, self._lr_pending = self._lr_pending, None
        if pending is None:
            return
        step, lrs = pending
        user = self.run._user_lr_tags
        ids, values = [], []
        for tag, lr in lrs:
            if tag in user:
                continue
            if type(lr) is float or type(lr) is int:
                ids.append(self._id(tag, "scalar"))
                values.append(lr)
            else:  # a tensor LR (capturable optimizers): run.log's deferred copy
                self.run.log({tag: lr}, step=step)
        if ids:
            self.rec.log_scalar_ids(ids, values, step)

    # ---- weights, updates and their snapshots ----

    def _after_update(self):
        step = self.run._step
        due = self.schedule.at(step)
        if not due.weights:
            return
        if self.optimizer is not None:
            # Deferred to the next training forward, where on the host the helper thread
            # reads the weights while forward and backward run (_submit_weight_pass). The
            # update is then the change up to that forward: the step's, and any the loop
            # made after it (a WGAN's clamp), which a pass right after the step would race.
            self._weights_due = (step, due.histogram)
            self._snapshot_step = step
            return
        self._weight_pass(step, due.histogram, wait=True)

    def _submit_weight_pass(self):
        """Starts the weight pass deferred from the last sampled optimizer step (the next
        optimizer step waits for it)."""
        if self._weights_due is not None:
            (step, histogram), self._weights_due = self._weights_due, None
            self._weight_pass(step, histogram, wait=False)

    def _weight_pass(self, step, histogram, wait):
        if self.plan is None:
            return
        self._planned().make_missing_snapshots()  # a parameter replaced by one of another size: updates from now
        ticket, executor = self._submit(lambda ex, plan: ex.weights(step, plan, histogram))
        self._snapshot_step = step
        self._keep_weight_ticket(ticket, executor, wait)

    def _weight_jobs_due(self, step):
        """Whether _weights_beside(step) has a job to start."""
        return self._weights_due is not None or (self.schedule.weights_at(step) and self._snapshot_step != step - 1)

    def _weights_beside(self, step):
        """The last sampled step's weight pass, and the snapshot of the weights that step's
        update will change if its update is sampled: jobs beside the forward (or the step)."""
        self._submit_weight_pass()
        if self.schedule.weights_at(step) and self._snapshot_step != step - 1:
            self._refresh_snapshots(wait=False)
            self._snapshot_step = step - 1

    def _refresh_snapshots(self, wait):
        """Copies the weights into the snapshots: on the host beside the forward (the
        optimizer step waits for the copy before the weights change)."""
        if self.plan is None:
            return
        self._planned()
        ticket, executor = self._submit(lambda ex, plan: ex.snapshot(plan))
        self._keep_weight_ticket(ticket, executor, wait)

    def _keep_weight_ticket(self, ticket, executor, wait):
        if ticket is None:
            return
        if wait:
            ticket.wait()
        elif executor.on_device:
            self._device_tickets.append(ticket)
        else:
            self._weight_tickets.append(ticket)

    def _wait_weights(self):
        """Waits for the helper's snapshot copies and weight passes (before the weights change)."""
        tickets, self._weight_tickets = self._weight_tickets, []
        for ticket in reversed(tickets):  # the last done means all done: they run in order
            ticket.wait()

    # ---- end of step: no-optimizer passes, device copies, memory, census ----

    def _on_step_end(self, step):
        self.timer.stop("backward")
        if self._act_batch or self._captured or self._forward:
            self._flush_forward()
        if self._inputs:
            self._submit_inputs(self._take_inputs())
        due = self.schedule.at(step)
        zeroed_ids, zeroed_values = (), ()
        if self.optimizer is None and self.plan is not None:
            zeroed, self._manual_zeroed = self._manual_zeroed, None
            self._zeroed = False  # the next step's zero_grad() is its own
            if zeroed is not None and due.grads:  # logged with the gradient pass, in its one call
                zeroed_ids, zeroed_values = [self._series("train", "grad_zeroed")], [float(zeroed)]
        if self.optimizer is None and due.grads and self.plan is not None:
            # No optimizer to hook: the gradients of this step's backward, now.
            ticket, _ = self._gradient_pass(step, due, zeroed_ids, zeroed_values)
            ticket.wait()
            # Weights changed by the user's own update: compare with the snapshot taken at
            # the end of the previous step, and take one before each sampled step.
            if due.weights and self._snapshot_step == step - 1:
                self._after_update()
            if self.schedule.weights_at(step + 1):
                self._refresh_snapshots(wait=True)
                self._snapshot_step = step
        if self.optimizer is not None and due.weights:
            self._check_groups()
        if self._device_tickets:
            self._drain(wait=False)
        if not self.primary:  # the process's series are the first model's to write
            return
        if self.timer.pending:
            self.timer.collect(wait=False)
        ids, values = [], []
        census = self.census
        if self.memory:
            ids, values = census.memory(with_rss=self._rss_step != step)
        if census.every and step % census.every == 0 and census.due(step):  # due()'s first test, without its frame
            census_ids, counts = census.take(step)
            ids += census_ids
            values += counts
        watch_id = self._watch_id
        if watch_id is None:
            watch_id = self._watch_id = self._series("time", "watch")
        ids.append(watch_id)
        values.append(self.self_time.take())
        elements, self._input_elements = self._input_elements, 0
        if elements and elements != self._logged_elements:
            self._logged_elements = elements
            ids.append(self._series("data", "input_elements"))
            values.append(float(elements))
        self.rec.log_scalar_ids(ids, values, step)

    def _drain(self, wait=False):
        """Logs the device statistics whose copy to the host has landed."""
        tickets = self._device_tickets
        while tickets and (wait or tickets[0].done()):
            tickets.popleft().wait()


def _leading_numel(args):
    """The element count of the first tensor among a forward's arguments (0 if none)."""
    for value in args:
        if isinstance(value, torch.Tensor):
            return value.numel()
        if isinstance(value, dict):
            for item in value.values():
                if isinstance(item, torch.Tensor):
                    return item.numel()
    return 0


def _closure_of(optimizer, args, kwargs):
    """The closure of an optimizer.step(closure) call, or None. torch 2.x's step hooks get
    the step's arguments with the optimizer first (step is called unbound); a wrapper of
    the bound method gets them without it."""
    if args and args[0] is optimizer:
        args = args[1:]
    return args[0] if args else kwargs.get("closure")
