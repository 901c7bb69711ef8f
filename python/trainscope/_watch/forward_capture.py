"""The forward half of a Watcher (a part of its class, watcher.py): the forward hooks, when
a forward is measured, the capture of module outputs and model inputs, and the labels' range.

- Activations and inputs: captured in forward hooks (attached only for measuring forwards):
  on the host the outputs go to the helper in batches, each let go once done; a model input
  goes with the step's gradient job; on a device each is reduced in the hook and the rows are
  copied in one job at the forward's end. A statistic is dropped if a later op changed its
  tensor in place (that module is then measured at once).
- Labels: the integer targets' range (run.data() batches, else integer model inputs).

The Watcher's parts are classes it inherits from, not objects it holds: the hooks run every
step, and a call through a part object would be one more Python frame on the training thread
(docs/watch.md, "The training thread's budget"). The state they share is the Watcher's,
declared in its __init__.
"""

from __future__ import annotations

import torch

import trainscope.watch as facade  # first_tensor is looked up there per call: tests patch it
from trainscope._watch.ops import OpsRecorder
from trainscope._watch.plan import DTYPE_BYTES, INT_CODES, PLAIN, activation_kind

_INT_DTYPES = tuple(INT_CODES)
# Module outputs held for one helper job at most (a forward's end submits the rest): a
# transformer's small outputs go in a few jobs, a CNN's large ones one a job.
ACTIVATION_BATCH_BYTES = 2 << 20


class ForwardCapture:
    """The Watcher's forward hooks and what they capture (see the module's docstring)."""

    def _init_forward_state(self):
        """The state only the forward's part reads (the Watcher's __init__ calls it)."""
        self._act_batch_bytes = 0   # what _act_batch holds
        self._act_batch_step = None  # the step of the outputs in _act_batch
        self._label_ids = None      # the series of input/label_min and input/label_max, once asked
        self._act_in_place = set()  # modules (and input tags) changed in place after capture: measured at once
        self._input_tags = {}       # model input name -> its input/<name> tag
        self._act_step = None       # the step this forward's activations are measured for (None: not)
        self._module_order = []     # module names in the order their forward ended (meta module_order)
        self._order_recorded = False
        self._labels_from_data = False  # run.data() batches carry the targets
        self._training_mode = None  # the root module's .training at the last logged forward
        self._mode_step = None      # the last step whose first forward with gradients was seen
        self._ops = None            # OpsRecorder while the first measured forward runs
        self._ops_done = False
        self._act_handles = []      # the activation hooks attached for a measuring forward

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
            out = output if isinstance(output, torch.Tensor) else facade._first_tensor(output)
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
                if out is not None:  # a floating one is measured (_capture)
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
        record = item[0]  # (series, address, numel, dtype code, ...): executors.py
        self._act_batch_bytes += record[2] * DTYPE_BYTES[record[3]]
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
        ids = self._label_ids
        if ids is None:
            ids = self._label_ids = (self._series("input", "label_min"), self._series("input", "label_max"))
        # A host tensor: the C++ scan, in place (torch.aminmax's dispatch path is cold at a
        # step's start: 0.35 ms measured in the training loop, against 12 us warm).
        if code is not None and self.rec.log_label_range(ids[0], ids[1], step, tensor, code, torch.strided):
            return
        if not tensor.is_cpu:  # on its device; the values go with the run's deferred copies
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
