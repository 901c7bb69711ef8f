"""The optimizer-step half of a Watcher (a part of its class, watcher.py): backward's end,
the gradient pass, the optimizer step's wrappers and hooks, the lr, and the weights and
updates.

- Gradients: before the real optimizer step (its step pre-hook on torch 2.x, a wrapper on
  torch 1.13 and in guard mode). On the host the pass overlaps the step for torch.optim's
  optimizers (they read gradients, never write them) and is waited for where the gradients
  next change (zero_grad, the next forward). Without an optimizer: at the step's end.
- Weights and updates (w_t - w_{t-1}): the pass of a sampled optimizer step runs at the next
  training forward, beside it, and is waited for before the next step changes the weights.

A part of the Watcher's class for the reason forward_capture.py gives: no frame more a step.
"""

from __future__ import annotations

import operator
import sys

import torch

from trainscope._watch import optimizers as optimizer_search
from trainscope._watch.executors import global_norm
from trainscope._watch.hooks import Hook, fused_amp_state
from trainscope._watch.plan import DTYPE_CODES


class StepPasses:
    """The Watcher's optimizer-step wrappers and its gradient and weight passes (see the
    module's docstring)."""

    def _init_step_state(self):
        """The state only the optimizer step's part reads (the Watcher's __init__ calls it)."""
        self._weight_tickets = []   # weight passes and snapshot copies in flight, until the weights next change
        self._optimizer_steps = 0   # real optimizer steps so far (a GradScaler skip is none)
        self._amp_scale = None      # a fused optimizer's GradScaler scale while its gradients are still scaled
        self._amp_skip = False      # a fused optimizer's step that its GradScaler skips (inf/NaN found)
        self._scaler_stepping = False  # inside GradScaler.step of this optimizer
        self._sentinel = None       # (param, grad object) after the last optimizer step
        self._backward_weight = None  # no optimizer: one value of the last parameter when the last backward began
        self._norm_level = None     # the gradient norm's recent level (exponential average)
        self._lr_pending = None     # (step, lr slots, [lr of each group]) until the step closes
        self._lr_slots = []         # (opt/lr tag, series id) of each param group
        self._grads_after_step = False  # optimizer.step(closure): the gradients exist after it
        self.without_grad = None    # meta params_without_grad of this model: none at every step looked at
        self._grad_checks = 0
        self._zeroed_id = None      # the series of train/grad_zeroed, once asked
        self._rss_id = None         # the series of mem/rss, once asked

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

    def _zeroed_series(self):
        found = self._zeroed_id
        if found is None:
            found = self._zeroed_id = self._series("train", "grad_zeroed")
        return found

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

    def _hot_totals(self, step, zeroed):
        """Logs the in-backward statistics if they are param.grad's (zeroed: the gradients
        were zeroed before this step's backward); returns totals or None."""
        if self._hot is None or self._hot_bad or self._force_device_path or self._scaler_stepping or not zeroed:
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
            # the bound method's wrapper gets step's own arguments: (closure) or closure=...
            skip = self._step_begin((args[0] if args else kwargs.get("closure")) is not None)
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
        if getattr(self.optimizer, "found_inf", None) is None:  # no GradScaler steps it fused: no frame
            self._amp_scale, self._amp_skip = None, False
        else:
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
        step = self.run._step
        if self._weights_due is not None or (self._snapshot_step != step - 1 and self.schedule.at(step).weights):
            # no training forward came since the last step: the jobs _weights_beside starts
            self._call_guarded("weights", self._weights_beside, step)
        if not skip:
            if self._weight_tickets:  # the pass and the snapshots read the weights from before this update
                self._wait_weights()
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
            if "weights" not in self.failures.off and self.schedule.at(self.run._step).weights:
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
            # One gradient object remembered: a new object at the next step means zeroed.
            self._zeroed = False
            self._sentinel = None
            for _, p in self.params:
                if p.grad is not None:
                    self._sentinel = (p, p.grad)
                    break
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
        zeroed = True  # read only where due.grads
        if due.grads:
            # Zeroed since the last optimizer step: zero_grad() ran, or the gradient object
            # held at its end is gone (set to None, a new one made).
            sentinel = self._sentinel
            zeroed = self._zeroed or sentinel is None or sentinel[0].grad is not sentinel[1]
            ids.append(self._zeroed_id or self._zeroed_series())
            values.append(1.0 if zeroed else 0.0)
            self._queue_lr(step)
        nonfinite = False
        if self._amp_skip:
            pass  # a fused step its GradScaler skips: no update's gradients, as when optimizer.step is not called
        elif (due.grads or self.guard) and self.plan is not None:
            totals = self._hot_totals(step, zeroed) if due.grads and self._amp_scale is None and self._hot is not None \
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
            rss_id = self._rss_id or self._series("mem", "rss")
            self._rss_id = rss_id
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

    def _queue_lr(self, step):
        groups = self.optimizer.param_groups
        if self._lr_pending is not None and self._lr_pending[0] != step:
            self._flush_lr()  # else this step's lr replaces the one its earlier optimizer step took
        if len(self._lr_slots) != len(groups):  # made again when a group is added
            self._name_lr_groups(len(groups))
        # Logged when the step closes (a scheduler may change lr before), and only where the
        # training script does not log that tag itself (README's run.log({"opt/lr": ...})
        # after optimizer.step()).
        self._lr_pending = (step, self._lr_slots, list(map(_LR_OF, groups)))

    def _name_lr_groups(self, count):
        tags = [self.tag("opt", "lr" if count == 1 else f"lr/{i}") for i in range(count)]
        self._lr_slots = [(tag, self._id(tag, "scalar")) for tag in tags]
        self.run._lr_tags += tuple(tag for tag in tags if tag not in self.run._lr_tags)

    def _flush_lr(self):
        """Logs the lr of the last optimizer step, less the tags the user logs."""
        pending, self._lr_pending = self._lr_pending, None
        if pending is None:
            return
        step, slots, lrs = pending
        user = self.run._user_lr_tags
        ids, values = [], []
        for (tag, series), lr in zip(slots, lrs):
            if lr is None or tag in user:
                continue
            if type(lr) is float or type(lr) is int:
                ids.append(series)
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

    def _weights_beside(self, step):
        """The last sampled step's weight pass, and the snapshot of the weights that step's
        update will change if its update is sampled: jobs beside the forward (or the step)."""
        self._submit_weight_pass()
        if self._snapshot_step != step - 1 and self.schedule.at(step).weights:
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


_LR_OF = operator.methodcaller("get", "lr")  # a param group's lr (None without one), read without a Python frame


def _closure_of(optimizer, args, kwargs):
    """The closure of an optimizer.step(closure) call, or None. torch 2.x's step hooks get
    the step's arguments with the optimizer first (step is called unbound); a wrapper of
    the bound method gets them without it."""
    if args and args[0] is optimizer:
        args = args[1:]
    return args[0] if args else kwargs.get("closure")
