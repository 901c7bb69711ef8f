"""The Watcher: the hooks and wrappers of one run.watch(model, optimizer) call, and when each
tensor family is measured. What is measured per step is the Schedule's (plan.py); how, an
executor's (executors.py: host or device, chosen by where the tensors are); this class says
when, and holds the tickets of what is in flight.

Its parts: this file (setting up, naming, installing and removing the hooks, the step's end),
forward_capture.py (the forward hooks: activations, model inputs, labels) and step_passes.py
(the optimizer step: gradients before it, weights and updates after it, the lr).

Several watched models (a GAN's G and D, a teacher and its student, an EMA copy) each have a
Watcher; their tags carry the model's namespace (models.py, series_tag), and the process's
series (time/, mem/, census/) are written once per step by the first of them.
"""

from __future__ import annotations

import collections
import json
import sys

from trainscope._watch.census import Census
from trainscope._watch.clock import phase_timer
from trainscope._watch.executors import DeviceExecutor, HostExecutor
from trainscope._watch.forward_capture import ACTIVATION_BATCH_BYTES, ForwardCapture  # noqa: F401 (tests read it here)
from trainscope._watch import optimizers as optimizer_search
from trainscope._watch.models import series_tag
from trainscope._watch.hooks import (BoundWrapper, Failures, GuardedHook, outside_graphs, start_self_time,
                                     step_hooks_may_nest, stop_self_time, unwatch_grad_scalers, watch_grad_scalers)
from trainscope._watch.plan import CONTAINERS, DENSE_STEPS, ParamPlan, Schedule
from trainscope._watch.step_passes import StepPasses


class Watcher(ForwardCapture, StepPasses):
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
        self.schedule = _schedule(every, histograms_every, activations_every, weights_every, units_every,
                                  dense_steps)
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
        self._forward = []          # (executor, ticket, names, versions) of the last forward's activation jobs not logged yet
        self._inputs = []           # (name, host item, version) of this step's model inputs, for its gradient pass
        self._captured = []         # this forward's (name, item) reduced on the device, until its end
        self._act_batch = []        # this forward's (name, host item, version) not submitted yet (_capture)
        self._device_tickets = collections.deque()
        self._rss_step = None       # the step whose RSS the helper logs with the gradient pass
        self._watch_id = None       # the series of time/watch, once asked
        self._weights_due = None    # (step, histogram): the last optimizer step's weight pass, to start
        self._snapshot_step = None  # the step whose post-update weights the snapshots hold
        self._zeroed = True         # no optimizer step yet: nothing to accumulate into
        self._manual_zeroed = None  # no optimizer: this step's answer of _manual_grads_zeroed
        self._act_force = False     # after non-finite gradients, or a jump of the norm, the next forward is measured in full
        # No watched optimizer: a backward of a training forward's output has completed
        # since the last step end (the next training forward or zero_grad then ends the step).
        self._backward_done = False
        self._closure_forwards = 0  # forwards inside this optimizer.step(closure) so far
        self._stepping = False      # inside an optimizer.step(closure)
        self._input_elements = 0    # the elements of this step's training forwards' first tensors
        self._logged_elements = 0   # the last data/input_elements logged (logged when it changes)
        self._group_shape = None    # (groups, params) of the optimizer's param_groups when last described
        self.group_entries = []     # meta param_groups of this model's optimizer
        self.unoptimized = []       # meta unoptimized_params of this model
        cuda = any(p.is_cuda for _, p in self.params[:1])
        if clock.timer is None:  # phases are the run's: one timer for every watched model
            clock.timer = phase_timer(clock, cuda)
        self.timer = clock.timer
        if cuda:
            clock.device_timed = True
        self._init_hot(hot_gradients, cuda)
        self._init_forward_state()
        self._init_step_state()
        self._handles = []
        self._act_hooks = []        # (module, hook) pairs, attached for measuring forwards
        self._restore = []
        self._set_options(activations, accumulation_steps)
        self._install()
        self._describe_groups()
        self._models.add(self)
        if optimizer is None and self.params:
            # An optimizer made later (inside a library's Trainer) that holds these
            # parameters is adopted as if it had been passed (optimizers.py).
            optimizer_search.wait_for_optimizer(self)

    def _set_options(self, activations, accumulation_steps):
        """Whether module outputs are measured (not in a compiled model, unless forced), and
        self.options, this model's watch meta (the first model writes it as meta watch)."""
        self.compiled = hasattr(self.model, "_orig_mod")
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
            "compiled": self.compiled, "optimizer": type(self.optimizer).__name__ if self.optimizer else None}
        if self.primary:  # the first model's options (each model's are in meta "models")
            self.rec.set_meta("watch", json.dumps(self.options))

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
        setattr(obj, method, BoundWrapper(call, obj, method, original, self, wrapper))
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
                zeroed_ids, zeroed_values = [self._zeroed_id or self._zeroed_series()], [float(zeroed)]
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
        census = self.census
        ids, values = census.memory(with_rss=self._rss_step != step) if self.memory else ([], [])
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


def _schedule(every, histograms_every, activations_every, weights_every, units_every, dense_steps):
    """The Schedule of watch()'s cadences. The first dense_steps steps measure in full what is
    sampled at its default cadence (gradients, histograms, unit norms, weights and updates); a
    cadence the script set is its choice from step 0. Activations keep theirs: measuring them
    makes every module take torch's slow call path, and a non-finite gradient already makes
    the next forward measured in full."""
    every_given = None if every == 1 else every
    histograms_given = None if histograms_every == 100 else histograms_every
    every = max(1, int(every))
    histograms_every = max(1, int(histograms_every)) if histograms_every else 0
    return Schedule(every, histograms_every,
                    max(1, int(activations_every or 20 * every)),
                    max(1, int(weights_every or 10 * every)),
                    max(1, int(units_every or histograms_every or 100)),
                    DENSE_STEPS if dense_steps is None else dense_steps,
                    dense=[name for name, value in (("every", every_given),
                                                    ("histograms_every", histograms_given),
                                                    ("weights_every", weights_every),
                                                    ("units_every", units_every)) if value is None])
