"""run.watch(), run.data(), run.step(): what a PyTorch training loop gets by adding two lines.

Where the numbers come from (docs/watch.md says more):

- Gradients: before the real optimizer step, in its step pre-hook (torch 2.x), or in a
  wrapper around optimizer.step() (torch 1.13, and guard mode, which must be able to skip
  it). Weights and updates (w_t - w_{t-1}): after it. Without an optimizer, both at the
  end of each step (run.step() exit, or the next batch of run.data()).
- Activations: forward hooks on every module but the root and pure containers.
- On CPU the C++ core reads each tensor's memory in place (data_ptr, numel, dtype) and
  computes every statistic and the exponent histogram in one pass, without the GIL. On an
  accelerator the reductions run there (one flat buffer per step, segment reductions),
  are packed into one small tensor and copied to the host without blocking; they are
  logged when the copy has landed (a step or two later, with their own step number).
- No .item() per parameter, ever.

The monitor never stops the training: any error inside trainscope is reported once on
stderr (and as a warning), the part that failed is switched off, and training goes on.
"""

from __future__ import annotations

import collections
import copy
import gc
import json
import sys
import time
import traceback
import types
import warnings

import torch

# torch 1.13 calls scatter_reduce "beta"; its amin/amax are what the device path needs.
warnings.filterwarnings("ignore", message=r"scatter_reduce\(\) is in beta")

# dtype codes of src/watch/tensor_passes.h
_DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}
_INT_CODES = {torch.int64: 0, torch.int32: 1, torch.int16: 2, torch.int8: 3, torch.uint8: 4}  # watch_bindings.cc

_RELU_FAMILY = (torch.nn.ReLU, torch.nn.ReLU6)
_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)

# Activation kinds of watch_bindings.cc
_PLAIN, _DEAD_UNITS, _TANH, _SIGMOID = 0, 1, 2, 3

# The clock of time/watch (trainscope's own time per step): wall time. The overhead
# benchmark sets time.thread_time to measure the training thread's CPU instead, which
# other processes on a shared machine do not inflate.
self_clock = time.perf_counter

# Columns of the packed per-tensor statistics (device path).
_NUMEL, _NAN, _INF, _ZEROS, _MIN, _MAX, _SUM, _SUMSQ = range(8)
_HIST_BINS = 128
_MIN_EXPONENT = -64


def _first_tensor(value):
    """The first tensor in a module's output (a tensor, a tuple/list, a dict), or None."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, torch.Tensor):
                return item
    if isinstance(value, dict):
        for item in value.values():
            if isinstance(item, torch.Tensor):
                return item
    return None


def _unit_layout(shape):
    """(outer, units, inner) of an activation: channels of NCHW/NCDHW, else the last dim."""
    if len(shape) >= 4:
        inner = 1
        for d in shape[2:]:
            inner *= d
        return shape[0], shape[1], inner
    if len(shape) == 0:
        return 1, 1, 1
    outer = 1
    for d in shape[:-1]:
        outer *= d
    return outer, shape[-1], 1


class _Failures:
    """Reports each failing part once and remembers it is off."""

    def __init__(self):
        self.off = set()
        self.count = 0

    def report(self, part, error):
        self.count += 1
        if part in self.off:
            return
        self.off.add(part)
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        message = (f"trainscope: {part} failed and is switched off; training goes on ({text})")
        print(message, file=sys.stderr)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class StepClock:
    """Step boundaries and per-step phase times for one Run.

    A step ends (end()) at an optimizer step, at the exit of `with run.step()`, or, when
    nothing else marks steps, when run.data() fetches the next batch. The step number
    advances lazily at the next begin() (the next batch, forward or run.step()), so that
    run.log(loss) written after optimizer.step() still lands on the step it belongs to.
    """

    def __init__(self, run):
        self.run = run
        run._auto_step = False
        self.pending = False
        self.explicit = False          # run.step() is in use
        self.optimizer_owned = False   # a watched optimizer marks step ends
        self.data_owned = False        # run.data() marks step ends (no optimizer, no run.step())
        self.step_started = None
        self.phase_seconds = collections.defaultdict(float)
        self.spans = []                # (step, phase, start wall time, seconds) until the step closes
        self._time_ids = {}            # phase -> series id of time/<phase>
        self.listeners = []            # callables(step) at the end of each step
        self.data_listeners = []       # callables() before run.data() fetches a batch
        self.close_listeners = []      # callables() when a step closes (the next begins, or the run ends)
        self.sampler = None
        self.device_timed = False      # a watcher times its phases with CUDA events

    @property
    def step(self):
        return self.run._step

    def begin(self, started=None):
        """Starts the next step if the last one ended; started: its perf_counter start."""
        if self.pending:
            self.pending = False
            for listener in list(self.close_listeners):
                listener()
            now = time.perf_counter() if started is None else started
            # The last step ends where this one starts: a batch's wait is this step's only.
            self._close_step(self.run._step, now)
            self.run._step += 1
            self.step_started = now
            if self.sampler is not None:
                self.sampler.set_step(self.run._step)
        elif self.step_started is None:  # the run's first step: it starts with its batch's wait
            self.step_started = time.perf_counter() if started is None else started

    def end(self):
        if self.pending:
            return
        self.pending = True
        step = self.run._step
        for listener in list(self.listeners):
            listener(step)
        self.run._step_ended(step)  # alert rules: a step boundary (run.py)

    def add_phase(self, phase, start_wall, seconds, step=None):
        # Kept until the step closes and logged there in one call: a recorder call between
        # forward and backward finds its code paths cold (~0.1 ms each on the dev VM).
        step = self.run._step if step is None else step
        self.spans.append((step, phase, start_wall, seconds))
        if step == self.run._step:
            self.phase_seconds[phase] += seconds
        else:  # a device timing that landed late: its own step's time/<phase>
            self.run._recorder.log_scalar("time/" + phase, seconds, step)

    def _time_id(self, phase):
        found = self._time_ids.get(phase)
        if found is None:
            found = self._time_ids[phase] = self.run._recorder.series("time/" + phase, "scalar")
        return found

    def _close_step(self, step, ended=None):
        rec = self.run._recorder
        if self.spans:
            steps, phases, starts, durations = zip(*self.spans)
            self.spans.clear()
            rec.log_spans(steps, phases, starts, durations)
        ids, values = [], []
        for phase, seconds in self.phase_seconds.items():
            ids.append(self._time_id(phase))
            values.append(seconds)
        if self.step_started is not None:
            seconds = (time.perf_counter() if ended is None else ended) - self.step_started
            ids.append(self._time_id("step"))
            values.append(seconds)
            if not self.device_timed:
                # time/step = data + forward + backward + optimizer + other (the rest of the
                # loop: logging, the user's own work). On an accelerator the phases are
                # device times that land later: no "other" there.
                ids.append(self._time_id("other"))
                values.append(max(0.0, seconds - sum(self.phase_seconds.values())))
        self.phase_seconds.clear()
        if ids:
            rec.log_scalar_ids(ids, values, step)

    def finish(self):
        for listener in list(self.close_listeners):
            listener()
        if self.step_started is not None or self.phase_seconds:
            self._close_step(self.run._step)
            self.step_started = None


class StepContext:
    """`with run.step():` an explicit step boundary."""

    def __init__(self, clock):
        self.clock = clock

    def __enter__(self):
        self.clock.explicit = True
        self.clock.begin()
        return self.clock.run._step

    def __exit__(self, exc_type, exc, tb):
        self.clock.end()
        return False


def timed_data(run, clock, iterable, inspect):
    """Yields the batches of iterable, recording the wait for each as time/data."""
    iterator = iter(iterable)
    first = True
    if not clock.explicit and not clock.optimizer_owned:
        clock.data_owned = True
    while True:
        if not first and not clock.explicit and not clock.optimizer_owned:
            clock.end()
        for listener in clock.data_listeners:
            listener()
        wall = time.time()
        started = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        waited = time.perf_counter() - started
        clock.begin(started)  # the wait belongs to the step that uses the batch
        clock.add_phase("data", wall, waited)
        first = False
        if inspect is not None:
            inspect(batch)
        yield batch


class PhaseTimer:
    """Times forward/backward/optimizer: monotonic clock on CPU, CUDA events on a GPU.

    A CUDA phase is measured on the device between two events; it is logged once its end
    event has completed (checked at step ends, never waited for), with its own step.
    """

    def __init__(self, clock, cuda):
        self.clock = clock
        self.cuda = cuda
        self.open = {}
        self.pending = []  # (step, phase, wall, start event, end event)

    def start(self, phase):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.open[phase] = (time.time(), event)
        else:
            self.open[phase] = (time.time(), time.perf_counter())

    def stop(self, phase):
        opened = self.open.pop(phase, None)
        if opened is None:
            return
        wall, start = opened
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pending.append((self.clock.step, phase, wall, start, end))
        else:
            self.clock.add_phase(phase, wall, time.perf_counter() - start)

    def collect(self, wait=False):
        still = []
        for item in self.pending:
            step, phase, wall, start, end = item
            if not end.query():
                if not wait:
                    still.append(item)
                    continue
                end.synchronize()
            self.clock.add_phase(phase, wall, start.elapsed_time(end) / 1000.0, step=step)
        self.pending = still


class Watcher:
    """The hooks and wrappers of one run.watch(model, optimizer) call."""

    def __init__(self, run, clock, model, optimizer=None, *, every=1, histograms_every=100,
                 activations=True, activations_every=None, weights_every=None, units_every=None,
                 accumulation_steps=1, guard=False, census_every=500, memory=True, inputs=True,
                 hot_gradients="auto", system_interval=5.0):
        self.run = run
        self.rec = run._recorder
        self.clock = clock
        self.model = model
        self.optimizer = optimizer
        self.every = max(1, int(every))
        self.histograms_every = max(1, int(histograms_every)) if histograms_every else 0
        self.activations_every = max(1, int(activations_every or 20 * self.every))
        self.weights_every = max(1, int(weights_every or 10 * self.every))
        self.units_every = max(1, int(units_every or self.histograms_every or 100))
        self.guard = bool(guard)
        self.census_every = int(census_every or 0)
        self.memory = memory
        self.inputs = inputs
        self.failures = _Failures()
        # A torch.compile'd model (OptimizedModule) names its parameters "_orig_mod.<name>":
        # the tags use the model's own names, as its eager twin's and its activations' do.
        self.params = [(name, p) for name, p in getattr(model, "_orig_mod", model).named_parameters()
                       if p.requires_grad]
        self._optimizer_steps = 0   # real optimizer steps so far (a GradScaler skip is none)
        self._amp_scale = None      # a fused optimizer's GradScaler scale while its gradients are still scaled
        self._amp_skip = False      # a fused optimizer's step that its GradScaler skips (inf/NaN found)
        self._scaler_stepping = False  # inside GradScaler.step of this optimizer
        self._ids = {}
        self._snapshots = {}        # param name -> previous weights (w_{t-1})
        self._snapshot_step = None  # the step whose post-update weights the snapshots hold
        self._zeroed = True         # no optimizer step yet: nothing to accumulate into
        self._sentinel = None       # (param, grad object) after the last optimizer step
        self._pending_copies = []   # device stats on their way to the host
        self._plan = None           # the CPU gradient pass's per-parameter constants
        self._wplan = None          # the CPU weight/update pass's (and snapshot copy's)
        # The CPU gradient pass runs on a helper thread while the optimizer steps: only for
        # torch.optim's optimizers, which read the gradients and never write them, and not
        # in guard mode, which must know before the step.
        self._overlap = (optimizer is not None and not guard
                         and type(optimizer).__module__.startswith("torch.optim"))
        self._worker = None         # the helper thread (_core.StatsWorker), made when first needed
        self._in_flight = None      # (step, gradients kept alive) while the helper reads them
        self._worker_plan = None    # the gradient plan the helper holds
        self._rss_step = None       # the step whose RSS the helper logs with the gradient pass
        self._weights_due = None    # (step, histogram): the last optimizer step's weight/update pass, to start
        self._weights_ticket = 0    # the helper's last snapshot copies or weight pass (StatsWorker.wait_for)
        self._worker_wplan = None   # the weight plan the helper holds
        self._act_captured = []     # this forward's tensors for the helper, with their layouts (_capture)
        self._act_in_flight = []    # (module name, output, its version) until committed
        self._act_in_place = set()  # modules whose output a later op changed in place: measured at once
        self._inputs_held = []      # (series id, tag, input, its version, step) for the gradient pass's job
        self._act_pending = []      # device activation stats of this step
        self._module_order = []
        self._order_recorded = False
        self._act_step = None
        self._census_types = set()
        self._labels_from_data = False  # run.data() batches carry the targets
        # No watched optimizer: a backward of a training forward's output has completed
        # since the last step end (the next training forward or zero_grad then ends the step).
        self._backward_done = False
        self._lr_pending = None     # (step, [(tag, lr)]) until the step closes
        # After non-finite gradients, the next forward records every activation (between
        # sampled steps too), so the first non-finite producer can be named.
        self._act_force = False
        cuda = any(p.is_cuda for _, p in self.params[:1])
        self._cpu_activations = not cuda  # measured on the helper thread after the forward
        self._cuda_available = torch.cuda.is_available()  # asked once: per step it is a cold call
        self.timer = PhaseTimer(clock, cuda)
        if cuda:
            clock.device_timed = True
        # Gradients measured inside backward while in cache (see _grad_hook); CPU only.
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
        self._hot_requested = bool(hot_gradients) and optimizer is not None and not cuda
        self._handles = []
        self._step_listener = None
        self._act_hooks = []        # (module, hook) pairs, attached for measuring forwards
        self._act_handles = []
        self._restore = []
        self.closed = False
        # Tests: run the accelerator path (torch reductions, packing, deferred copies) on
        # CPU tensors, so it is exercised where no GPU is.
        self._force_device_path = False
        self._depth = 0
        self._entered = 0.0
        self._self_seconds = 0.0
        self._gc_started = None
        self._own_gc = False
        gc.callbacks.append(self._on_gc)
        self.compiled = hasattr(model, "_orig_mod")
        self.activations = bool(activations)
        if self.compiled and activations != "force":
            # Hooks inside a compiled graph break it (or are traced once and never called):
            # the step-level numbers stay, per-module activations are off.
            self.activations = False
            print("trainscope: model is torch.compile'd: activation statistics are off "
                  "(gradients, weights, updates, lr, times and memory are still recorded)",
                  file=sys.stderr)
        self.rec.set_meta("watch", json.dumps({
            "every": self.every, "histograms_every": self.histograms_every,
            "activations": self.activations, "activations_every": self.activations_every,
            "weights_every": self.weights_every, "units_every": self.units_every,
            "accumulation_steps": int(accumulation_steps), "guard": self.guard,
            "compiled": self.compiled, "optimizer": type(optimizer).__name__ if optimizer else None}))
        self._install()

    # ---- setup ----

    def _install(self):
        root = self.model
        self._handles.append(root.register_forward_pre_hook(self._guarded("forward", self._on_forward_begin)))
        self._handles.append(root.register_forward_hook(self._guarded("forward", self._on_forward_end)))
        if self.activations:
            # Hooks are attached only for the forwards that measure: a module with hooks
            # takes torch's slow call path, which on every step would cost more than the
            # measuring itself does on one step in twenty.
            base = getattr(root, "_orig_mod", root)
            self._act_hooks = [(module, self._activation_hook(name, module)) for name, module in base.named_modules()
                               if module is not base and not isinstance(module, _CONTAINERS)]
        if self._hot_requested and self.params:
            from trainscope import _core
            self._hot = _core.GradCollector(len(self.params))
            self._hot_ids = [self._id("grad/" + n, "tensor_stats") for n, _ in self.params]
            self._hot_unit_ids = [self._id("grad_units/" + n, "vector") if p.dim() >= 2 else 0
                                  for n, p in self.params]
            for slot, (_, p) in enumerate(self.params):
                self._handles.append(p.register_hook(self._grad_hook(slot, p)))
                if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                    self._handles.append(p.register_post_accumulate_grad_hook(self._grad_accumulated(slot)))
        if self.optimizer is not None:
            self.clock.optimizer_owned = True
            if not self.guard and hasattr(self.optimizer, "register_step_pre_hook") \
                    and not _step_hooks_may_nest(self.optimizer):
                # torch 2.x: the optimizer's own step hooks. optimizer.step stays torch's, so
                # LR schedulers, pickling and a torch.compile'd step see nothing of ours.
                pre, post = _outside_graphs(self._step_pre_hook), _outside_graphs(self._step_post_hook)
                self._handles.append(self.optimizer.register_step_pre_hook(pre))
                self._handles.append(self.optimizer.register_step_post_hook(post))
            else:
                # torch 1.13 has no step hooks; guard mode must be able to skip the step; a
                # subclass's step would run the hooks once per class.
                self._wrap(self.optimizer, "step", self._optimizer_step)
            self._wrap(self.optimizer, "zero_grad", self._zero_grad)
            self._guarded("amp", _watch_grad_scalers)(self)  # a failure leaves the rest watched
        self._wrap(self.model, "zero_grad", self._zero_grad)
        self._backward_started_hook = self._guarded("backward", self._backward_started)
        self._backward_finished_hook = self._guarded("backward", self._backward_finished)
        self._step_listener = self._guarded("step end", self._on_step_end)
        self.clock.listeners.append(self._step_listener)
        self._lr_listener = self._guarded("lr", self._flush_lr)
        self.clock.close_listeners.append(self._lr_listener)
        self._data_listener = self._guarded("forward", self._end_backward)
        self.clock.data_listeners.append(self._data_listener)

    def _wrap(self, obj, method, wrapper):
        """Replaces obj.method by a _BoundWrapper calling wrapper(original, ...)."""
        original = getattr(obj, method)
        own = method in getattr(obj, "__dict__", {})  # already an instance attribute?

        def call(bound_self, *args, **kwargs):
            if self.closed:  # finished runs record nothing more
                return original(*args, **kwargs)
            return wrapper(original, *args, **kwargs)

        call.__name__ = call.__qualname__ = method
        call.__wrapped__ = original
        setattr(obj, method, _BoundWrapper(call, obj, method, original))
        self._restore.append((obj, method, original, own))

    def _detach_activation_hooks(self):
        for handle in self._act_handles:
            handle.remove()
        self._act_handles = []

    def close(self):
        """Removes every hook and wrapper and logs what is still in flight."""
        if self._backward_done and self._owns_steps():
            self._backward_done = False
            self._guarded("step end", self.clock.end)()  # the last step, without an optimizer
        self._detach_activation_hooks()
        try:
            self._submit_activations()
            self._commit_activations()
            self._finish_gradients()
        except Exception as error:
            self.failures.report("gradients", error)
        if self._inputs_held:
            self._guarded("inputs", self._measure_held_inputs)()
            self._inputs_held = []
        try:
            if "weights" not in self.failures.off:
                self._submit_weight_pass()  # the last step's
        except Exception as error:
            self.failures.report("weights", error)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.optimizer is not None:
            _unwatch_grad_scalers(self)
        self._lr_listener()
        if self._lr_listener in self.clock.close_listeners:
            self.clock.close_listeners.remove(self._lr_listener)
        if self._step_listener in self.clock.listeners:
            self.clock.listeners.remove(self._step_listener)
        if self._data_listener in self.clock.data_listeners:
            self.clock.data_listeners.remove(self._data_listener)
        self.closed = True
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
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
        if self._worker is not None:
            self._worker.wait_all()  # a snapshot copy or weight pass may still be in flight
        self._snapshots.clear()  # a copy of every parameter: not kept past the watch
        self._wplan = self._worker_wplan = None
        self._drain(wait=True)
        self.timer.collect(wait=True)

    def _guarded(self, part, fn):
        """fn as a hook: skipped once `part` failed, its failure reported, never raised."""
        def run_guarded(*args, **kwargs):
            if part in self.failures.off:
                return None
            self._enter()
            try:
                return fn(*args, **kwargs)
            except Exception as error:  # the monitor never kills the training
                self.failures.report(part, error)
                return None
            finally:
                self._leave()
        return _Hook(run_guarded)

    # Its own cost: wall time spent inside trainscope's hooks and wrappers (outermost
    # calls only), logged per step as time/watch, so a user sees what watching costs.
    # Python's cyclic garbage collections that start while a hook runs are left out: they
    # come when the whole program's allocations (mostly torch's tensors) cross a threshold,
    # and a full one takes milliseconds, which would be charged to whichever hook was
    # unlucky (measured: 0.3 ms per step charged to the model's forward hook alone).
    def _on_gc(self, phase, info):
        if self._own_gc:
            return
        if phase == "start":
            self._gc_started = self_clock() if self._depth else None
        elif self._gc_started is not None:
            self._self_seconds -= self_clock() - self._gc_started
            self._gc_started = None

    def _enter(self):
        self._depth += 1
        if self._depth == 1:
            self._entered = self_clock()

    def _leave(self):
        self._depth -= 1
        if self._depth == 0:
            self._self_seconds += self_clock() - self._entered

    def _take_self_seconds(self):
        now = self_clock()
        seconds = self._self_seconds + (now - self._entered if self._depth else 0.0)
        self._self_seconds = 0.0
        if self._depth:
            self._entered = now
        return seconds

    def _id(self, tag, kind):
        key = (tag, kind)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self.rec.series(tag, kind)
        return found

    def _due(self, every):
        return self.clock.step % every == 0

    # ---- forward: inputs, timing, module order ----

    def _on_forward_begin(self, module, args):
        # A training forward begins the next step; an evaluation (no_grad or eval mode)
        # right after optimizer.step() still belongs to the step that just ended. One under
        # no_grad is not measured: its inputs and activations would land on that step a
        # second time, and its time is not the training's forward.
        if self._act_captured or self._act_in_flight:  # the last forward's, if no step came after it
            self._submit_activations()
            self._commit_activations()
        if not torch.is_grad_enabled():
            self._act_step = None
            return
        self._end_backward()  # the last micro-batch's, when gradients accumulate
        if module.training:
            if self._backward_done:
                self._backward_done = False
                if self._owns_steps():
                    self.clock.end()  # the step of the last backward (docs/watch.md "Steps")
            self.clock.begin()
        step = self.clock.step
        if self.optimizer is not None and module.training and "weights" not in self.failures.off:
            # On the helper thread while the forward and backward run (they read the
            # parameters and do not change them): the last sampled step's weight/update
            # pass, and the copy of the weights this step's optimizer will update.
            try:
                self._submit_weight_pass()
                if self._due(self.weights_every) and self._snapshot_step != step - 1:
                    self._refresh_snapshots(beside=True)
                    self._snapshot_step = step - 1
            except Exception as error:
                self.failures.report("weights", error)
        if self.activations and (self._due(self.activations_every) or self._act_force or not self._order_recorded):
            self._act_step = step if (self._due(self.activations_every) or self._act_force) else None
            self._act_force = False
            if not self._act_handles:
                self._act_handles = [m.register_forward_hook(h) for m, h in self._act_hooks]
        else:
            self._act_step = None
        if self.inputs and self._due(self.every) and "inputs" not in self.failures.off:
            try:
                if self._inputs_held:  # the last forward's, if no optimizer step took them
                    self._measure_held_inputs()
                self._log_inputs(args)
            except Exception as error:
                self.failures.report("inputs", error)
        self.timer.start("forward")

    def _on_forward_end(self, module, args, output):
        self.timer.stop("forward")
        if self.activations_every > 1:  # measured every step: the hooks stay
            self._detach_activation_hooks()
        if self._act_captured:
            self._submit_activations()
        if not self._order_recorded and self._module_order:
            self._order_recorded = True
            self.rec.set_meta("module_order", json.dumps(list(dict.fromkeys(self._module_order))))
        if torch.is_grad_enabled():
            out = _first_tensor(output)
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

    def _owns_steps(self):
        """True when nothing else marks step ends: no watched optimizer, run.step() or run.data()."""
        clock = self.clock
        return not (clock.explicit or clock.optimizer_owned or clock.data_owned)

    def _backward_started(self, grad):
        if not self.closed:
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_finished_hook)
        return None

    def _backward_finished(self):
        if self.closed:
            return
        self.timer.stop("backward")
        self._backward_done = True

    def _measure_activation(self, name, tag, kind, out, step):
        """One module's output statistics, now (on CPU) or reduced on its device."""
        if not out.is_floating_point() or out.dtype not in _DTYPE_CODES or out.is_sparse:
            return
        out = out.detach()
        histogram = bool(self.histograms_every) and self._due(self.histograms_every)
        if out.device.type == "cpu" and not self._force_device_path:
            if not out.is_contiguous():
                out = out.contiguous()
            outer, units, inner = _unit_layout(tuple(out.shape))
            self.rec.log_activation(self._id(tag, "tensor_stats"), step, out.data_ptr(), out.numel(),
                                    _DTYPE_CODES[out.dtype], outer, units, inner, kind, histogram)
        else:
            self._act_pending.append((tag, _device_activation(out, kind, histogram)))

    def _capture(self, name, tag, kind, out, step, histogram, flat=False):
        """Keeps a CPU tensor for the helper thread's pass, with what that pass needs of it
        (flat: no unit layout, for a tensor that is no module's output)."""
        code = _DTYPE_CODES.get(out.dtype)  # floating dtypes only
        if code is None or out.layout is not torch.strided:
            return
        shape = tuple(out.shape)
        # A strided output (an attention output is a transpose) is gathered by the helper.
        strides = () if out.is_contiguous() else out.stride()
        outer, units, inner = (1, out.numel(), 1) if flat else _unit_layout(shape)
        self._act_captured.append((name, out, out._version, self._id(tag, "tensor_stats"), step, out.data_ptr(),
                                   outer * units * inner, code, outer, units, inner, kind, histogram, shape, strides))

    def _submit_activations(self):
        """At the forward's end: the captured tensors go to the helper thread, in one job."""
        captured, self._act_captured = self._act_captured, []
        if not captured:
            return
        try:
            (names, outs, versions, ids, steps, ptrs, numels, codes, outers, units, inners, kinds, histograms,
             shapes, strides) = zip(*captured)
            # One forward's tensors: its inputs and its sampled outputs share its step.
            self._helper().submit_activations(steps[0], ids, ptrs, numels, codes, outers, units, inners, kinds,
                                              histograms, shapes, strides)
            self._act_in_flight.extend(zip(names, outs, versions))
        except Exception as error:
            self.failures.report("activations", error)

    def _commit_activations(self):
        """Logs the activation statistics computed on the helper thread during the forward.

        A statistic is dropped when a later op changed its tensor in place (its version moved
        since the module's hook: an in-place ReLU after a conv, say), since the pass may have
        read the changed values; that module is measured in its hook from then on."""
        if not self._act_in_flight:
            return
        in_flight, self._act_in_flight = self._act_in_flight, []
        keep = []
        for name, out, version in in_flight:
            same = out._version == version
            keep.append(same)
            if not same:
                self._act_in_place.add(name)
        # Waits for the passes first: only then may the tensors go (in_flight holds them until
        # this returns; freed earlier, a pass still queued would read reused memory).
        self._worker.commit_activations(keep)

    def _end_backward(self):
        self.timer.stop("backward")

    def _log_inputs(self, args):
        step = self.clock.step
        for index, value in enumerate(args):
            if isinstance(value, torch.Tensor):
                self._log_input(str(index), value, step)
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, torch.Tensor):
                        self._log_input(str(key), item, step)

    def _log_input(self, name, tensor, step):
        if tensor.is_floating_point():
            tag = "input/" + name
            cpu = tensor.is_cpu and not self._force_device_path
            plain = cpu and tensor.dtype in _DTYPE_CODES and tensor.layout is torch.strided and tensor.is_contiguous()
            if plain and self._overlap and tag not in self._act_in_place:
                # Measured by the helper thread in the gradient pass's job at the optimizer
                # step (_submit_gradients), or at once if no such job takes it.
                self._inputs_held.append((self._id(tag, "tensor_stats"), tag, tensor, tensor._version, step))
            elif self._cpu_activations and cpu and tag not in self._act_in_place:
                self._capture(tag, tag, _PLAIN, tensor, step, False, flat=True)  # measured beside the forward
            else:
                self._tensor_stats(step, [(tag, tensor.detach())], histogram=False)
        elif tensor.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8) and tensor.numel() \
                and not self._labels_from_data:
            self.log_label_range(tensor, step)

    def _held_inputs(self):
        """The held inputs, less those the forward changed in place (their values before it
        are gone: not measured this step, and measured in the pre-hook from then on)."""
        held, self._inputs_held = self._inputs_held, []
        kept = []
        for series, tag, tensor, version, step in held:
            if tensor._version == version:
                kept.append((series, tensor, step))
            else:
                self._act_in_place.add(tag)
        return kept

    def _measure_held_inputs(self):
        """The held inputs, at once (no gradient pass on the helper thread took them)."""
        for series, tensor, step in self._held_inputs():
            numel = tensor.numel()
            self.rec.log_activation(series, step, tensor.data_ptr(), numel, _DTYPE_CODES[tensor.dtype], 1, numel, 1,
                                    _PLAIN, False)

    def log_label_range(self, tensor, step):
        code = _INT_CODES.get(tensor.dtype)
        if tensor.is_cpu and code is not None and tensor.layout is torch.strided:
            # The C++ scan: torch.aminmax's dispatch path is cold at a step's start (0.35 ms
            # measured in the training loop, against 12 us warm).
            self.rec.log_int_range(self._id("input/label_min", "scalar"), self._id("input/label_max", "scalar"),
                                   step, tensor.data_ptr(), tensor.size(), tensor.stride(), code)
            return
        lo, hi = torch.aminmax(tensor.detach())
        if tensor.is_cpu:
            self.rec.log_scalar_ids([self._id("input/label_min", "scalar"), self._id("input/label_max", "scalar")],
                                    [int(lo), int(hi)], step)
        else:  # a device tensor goes with the run's deferred copies
            self.run.log({"input/label_min": lo, "input/label_max": hi}, step=step)

    def inspect_batch(self, batch):
        """run.data(): the label range of integer tensors in the batch (targets)."""
        if not self.inputs or "inputs" in self.failures.off or not self._due(self.every):
            return
        self._enter()
        try:
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
                self.log_label_range(targets, self.clock.step)
        except Exception as error:
            self.failures.report("inputs", error)
        finally:
            self._leave()

    # ---- activations ----

    def _activation_hook(self, name, module):
        tag = "act/" + name
        if isinstance(module, _RELU_FAMILY):
            kind = _DEAD_UNITS
        elif isinstance(module, torch.nn.Tanh):
            kind = _TANH
        elif isinstance(module, torch.nn.Sigmoid):
            kind = _SIGMOID
        else:
            kind = _PLAIN

        def hook(mod, args, output):
            if not self._order_recorded:
                self._module_order.append(name)
            step = self._act_step
            if step is None or "activations" in self.failures.off:
                return None
            self._enter()
            try:
                out = _first_tensor(output)
                if out is None:
                    return None
                if name not in self._act_in_place and self._cpu_activations and not self._force_device_path:
                    # Measured after the forward, on the helper thread while backward runs
                    # (_submit_activations): here only its layout, while the tensor is hot,
                    # and its version, which a later in-place op would change.
                    self._capture(name, tag, kind, out, step, bool(self.histograms_every) and
                                  self._due(self.histograms_every))
                    return None
                self._measure_activation(name, tag, kind, out, step)
            except Exception as error:
                self.failures.report("activations", error)
            finally:
                self._leave()
            return None

        return _Hook(hook)

    # ---- gradients while they are hot ----

    def _grad_hook(self, slot, param):
        """A parameter hook: the statistics of the gradient it receives, computed while the
        backward op that produced it has just left it in cache. They are used at the optimizer
        step only if they equal param.grad's (one gradient per parameter since zeroing)."""
        code = _DTYPE_CODES.get(param.dtype)
        rows = param.shape[0] if param.dim() >= 2 else 0

        def hook(grad):
            if self.closed or self._hot_bad or "gradients" in self.failures.off or not self._due(self.every):
                return None
            self._enter()
            try:
                if code is None or grad.dtype != param.dtype or grad.layout != torch.strided \
                        or grad.device.type != "cpu" or not grad.is_contiguous():
                    self._hot_bad = True  # read param.grad at the step instead
                    return None
                histogram = bool(self.histograms_every) and self._due(self.histograms_every)
                self._hot.add(slot, grad.data_ptr(), grad.numel(), code, histogram,
                              rows if self._due(self.units_every) else 0)
                # param.grad's version once this gradient is in it (torch 1.13: accumulated
                # in place into a zeroed one, or the gradient itself); torch 2.1+ reads it
                # after accumulation (_grad_accumulated) instead.
                existing = param.grad
                self._hot_versions[slot] = grad._version if existing is None else existing._version + 1
            except Exception as error:
                self._hot_bad = True
                self.failures.report("gradients", error)
            finally:
                self._leave()
            return None

        return _Hook(hook)

    def _grad_accumulated(self, slot):
        def hook(param):
            if self._hot is not None and param.grad is not None:
                self._hot_versions[slot] = param.grad._version
        return _Hook(hook)

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

    # ---- optimizer step: grads before, weights and updates after ----

    def _zero_grad(self, original, *args, **kwargs):
        self._zeroed = True
        if self._backward_done:
            self._backward_done = False
            if self._owns_steps():
                # Without an optimizer, zeroing the gradients after a backward ends the step
                # (before they are gone: the gradient statistics are taken at the step end).
                self._guarded("step end", self.clock.end)()
        return original(*args, **kwargs)

    def _optimizer_step(self, original, *args, **kwargs):
        self._enter()
        try:
            return self._optimizer_step_timed(original, *args, **kwargs)
        finally:
            self._leave()

    def _optimizer_step_timed(self, original, *args, **kwargs):
        """The wrapper around optimizer.step (torch 1.13, guard mode)."""
        skip = self._step_begin()
        result = None
        if skip:
            self.rec.log_scalar("guard/skipped_step", 1.0, self.clock.step)
            print(f"trainscope: guard skipped optimizer step {self.clock.step}: non-finite gradients",
                  file=sys.stderr)
        else:
            self._leave()  # the optimizer's own work is not trainscope's cost
            try:
                result = original(*args, **kwargs)
            finally:
                self._enter()
                self._step_returned()
            self._after_real_step()
        self._close_step()
        return result

    def _step_pre_hook(self, optimizer, args, kwargs):
        """optimizer.register_step_pre_hook (torch 2.x): what the wrapper does before the step."""
        if self.closed:
            return None
        self._enter()
        try:
            self._step_begin()  # never True: guard mode wraps the step instead
        finally:
            self._leave()
        return None

    def _step_post_hook(self, optimizer, args, kwargs):
        """optimizer.register_step_post_hook (torch 2.x): what the wrapper does after the step."""
        if self.closed:
            return
        self._enter()
        try:
            self._step_returned()
            self._after_real_step()
            self._close_step()
        finally:
            self._leave()

    def _step_begin(self):
        """Before the real step: gradients, lr, the weights it will change; True when guard
        mode skips the step."""
        if self._in_flight is not None:  # the last step raised before its post-hook
            self._guarded("gradients", self._finish_gradients)()
        self._end_backward()
        self._amp_scale, self._amp_skip = _fused_amp_state(self.optimizer)
        skip = False
        try:
            self._commit_activations()
        except Exception as error:
            self.failures.report("activations", error)
        try:
            if "gradients" not in self.failures.off:
                skip = self._before_update()
        except Exception as error:
            self.failures.report("gradients", error)
            skip = False
        try:
            if "weights" not in self.failures.off:
                self._submit_weight_pass()  # no training forward came since the last step
                # The update of a sampled step needs the weights from just before it.
                if self._due(self.weights_every) and self._snapshot_step != self.clock.step - 1:
                    self._refresh_snapshots()
                    self._snapshot_step = self.clock.step - 1
        except Exception as error:
            self.failures.report("weights", error)
        if not skip:
            self._wait_weights()  # the pass and the snapshots read the weights from before this update
            self.timer.start("optimizer")
        return skip

    def _step_returned(self):
        """Right after the real step, even one that raised: its time, the overlapped pass."""
        self.timer.stop("optimizer")
        self._optimizer_steps += 1
        try:
            self._finish_gradients()
        except Exception as error:
            self.failures.report("gradients", error)

    def _after_real_step(self):
        try:
            if self.guard:
                self.rec.log_scalar("guard/skipped_step", 0.0, self.clock.step)
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
            self.clock.end()
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
            self._enter()
            try:
                found = getattr(scaler, "_scale", None)
                # A copy: update() changes the scale in place, and on a device it is logged later.
                scale = found.detach().clone() if isinstance(found, torch.Tensor) else None
            except Exception as error:
                self.failures.report("amp", error)
            finally:
                self._leave()
        stepped_before = self._optimizer_steps
        # The gradients measured inside backward were scaled; unscale_ changed them in place.
        self._scaler_stepping = True
        try:
            result = original(scaler, optimizer, *args, **kwargs)
        finally:
            self._scaler_stepping = False
        if scale is not None:
            self._guarded("amp", self._after_scaler_step)(scaler, optimizer, scale, stepped_before)
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
        step = self.clock.step
        self.run.log({"amp/loss_scale": scale, "amp/overflow_skip": skipped}, step=step)
        if not stepped:  # no optimizer.step, no hook: the step ends here
            self._close_step()

    def _gradient_stats(self, step, histogram, units, sync=False):
        """Logs the statistics of every gradient; returns (sum of squares, nan, inf) or None."""
        plan = self._cpu_plan()
        ptrs = self._cpu_gradient_pointers(plan) if plan is not None else None
        if ptrs is None:  # on an accelerator, or an unusual gradient: the general path
            return self._tensor_stats(step, [("grad/" + n, g) for n, g in self._grads()], histogram=histogram,
                                      units=units, sync=sync)
        return self.rec.log_tensor_stats_many(step, plan.ids, ptrs, plan.numels, plan.codes,
                                              plan.rows if units else [], plan.unit_ids if units else [],
                                              histogram)

    def _submit_gradients(self, step, histogram, units, scalar_ids, scalar_values):
        """Starts the CPU gradient pass on the helper thread, to overlap the optimizer step;
        the helper also logs the step's scalars (ids, values). False when the gradients need
        the general path (then nothing is logged)."""
        plan = self._cpu_plan()
        keep = []
        ptrs = self._cpu_gradient_pointers(plan, keep) if plan is not None else None
        if ptrs is None:
            return False
        worker = self._helper()
        if self._worker_plan is not plan:
            worker.set_gradient_plan(plan.ids, plan.numels, plan.codes, plan.rows, plan.unit_ids)
            self._worker_plan = plan
        rss_id = 0
        if self.memory:  # read on the helper too (see _on_step_end)
            rss_id = self._id("mem/rss", "scalar")
            self._rss_step = step
        input_ids, input_ptrs, input_numels, input_codes = [], [], [], []
        if self._inputs_held and "inputs" not in self.failures.off \
                and all(held[4] == step for held in self._inputs_held):  # this step's forward's
            for series, tensor, _ in self._held_inputs():
                input_ids.append(series)
                input_ptrs.append(tensor.data_ptr())
                input_numels.append(tensor.numel())
                input_codes.append(_DTYPE_CODES[tensor.dtype])
                keep.append(tensor)
        worker.submit_gradient_pass(step, ptrs, histogram, units, scalar_ids, scalar_values, rss_id,
                                    input_ids, input_ptrs, input_numels, input_codes)
        self._in_flight = (step, keep)
        return True

    def _helper(self):
        if self._worker is None:
            from trainscope import _core
            self._worker = _core.StatsWorker(self.rec)
        return self._worker

    def _finish_gradients(self):
        """Waits for the overlapped gradient pass and logs the global norm."""
        if self._in_flight is None:
            return
        try:
            if self._worker.finish_gradient_pass(self._id("grad/global_norm", "scalar")):
                self._act_force = True  # non-finite gradients
        finally:
            self._in_flight = None  # the gradients may go now

    def _cpu_plan(self):
        """What the CPU gradient pass needs of each parameter, computed once (None: not all on CPU).

        Per step only the gradients' addresses are then read: a few attribute reads per
        parameter instead of building every list anew (0.05 ms instead of 0.7 ms for 78).
        """
        if self._plan is None:
            self._plan = False
            if not self._force_device_path and self.params and all(p.is_cpu for _, p in self.params):
                kept = [(n, p) for n, p in self.params if p.dtype in _DTYPE_CODES]
                self._plan = types.SimpleNamespace(
                    tensors=[(p, p.dtype, p.numel()) for _, p in kept],
                    ids=[self._id("grad/" + n, "tensor_stats") for n, _ in kept],
                    numels=[p.numel() for _, p in kept],
                    codes=[_DTYPE_CODES[p.dtype] for _, p in kept],
                    rows=[p.shape[0] if p.dim() >= 2 else 0 for _, p in kept],
                    unit_ids=[self._id("grad_units/" + n, "vector") if p.dim() >= 2 else 0 for n, p in kept])
        return self._plan or None

    def _cpu_gradient_pointers(self, plan, keep=None):
        """data_ptr() of each gradient (0: none), or None when one is not a dense contiguous
        CPU tensor of its parameter's planned dtype and size (the model moved, a sparse
        gradient, a parameter replaced by one of another size, ...).
        keep: a list that receives the gradients, to hold them alive."""
        ptrs = []
        strided = torch.strided
        for p, dtype, numel in plan.tensors:
            g = p.grad
            if g is None:
                ptrs.append(0)
            elif g.is_cpu and g.layout is strided and g.dtype is dtype and g.is_contiguous() and g.numel() == numel:
                ptrs.append(g.data_ptr())
                if keep is not None:
                    keep.append(g)
            else:
                self._plan = None  # plan again next time (the parameters may have changed)
                return None
        return ptrs

    def _grads(self):
        out = []
        for name, p in self.params:
            g = p.grad
            if g is None or g.is_sparse or g.dtype not in _DTYPE_CODES:
                continue
            out.append((name, g.detach()))
        return out

    def _mark_grads(self):
        """Remembers one gradient object: a new object at the next step means zeroed (set to None)."""
        self._zeroed = False
        for _, p in self.params:
            if p.grad is not None:
                self._sentinel = (p, p.grad)
                return
        self._sentinel = None

    def _grads_were_zeroed(self):
        if self._zeroed:
            return True
        if self._sentinel is None:
            return True
        p, grad = self._sentinel
        return p.grad is not grad

    def _before_update(self):
        """Gradient statistics, lr, grad_zeroed; returns True when guard mode skips the step."""
        step = self.clock.step
        due = self._due(self.every)
        nonfinite = False
        ids, values = [], []  # this step's scalars, logged in one call
        if due:
            ids.append(self._id("train/grad_zeroed", "scalar"))
            values.append(1.0 if self._grads_were_zeroed() else 0.0)
            groups = self.optimizer.param_groups
            lrs = []
            self._flush_lr()
            for index, group in enumerate(groups):
                lr = group.get("lr")
                if lr is None:
                    continue
                tag = "opt/lr" if len(groups) == 1 else f"opt/lr/{index}"
                if tag not in self.run._lr_tags:
                    self.run._lr_tags += (tag,)
                lrs.append((tag, lr))
            # Logged when the step closes, and only where the training script does not log
            # that tag itself (README's run.log({"opt/lr": ...}) after optimizer.step()).
            self._lr_pending = (step, lrs)
        if self._amp_skip:
            pass  # a fused step its GradScaler skips: no update's gradients, as when optimizer.step is not called
        elif due and self._amp_scale is not None:
            # A fused optimizer's GradScaler left the gradients scaled (the step unscales
            # them itself): the statistics are of unscaled copies.
            histogram = bool(self.histograms_every) and self._due(self.histograms_every)
            inverse = 1.0 / self._amp_scale.double()
            scaled = [("grad/" + n, (g.double() * inverse).to(g.dtype)) for n, g in self._grads()]
            totals = self._tensor_stats(step, scaled, histogram=histogram, units=self._due(self.units_every))
            if totals is not None:
                ids.append(self._id("grad/global_norm", "scalar"))
                values.append(_global_norm(*totals))
        elif due or self.guard:
            totals = self._hot_totals(step) if due else None
            if totals is None:
                histogram = bool(self.histograms_every) and self._due(self.histograms_every)
                units = self._due(self.units_every)
                if self._overlap and self._submit_gradients(step, histogram, units, ids, values):
                    ids = None  # the helper logs them with its pass
                else:
                    totals = self._gradient_stats(step, histogram, units, sync=self.guard)
            if totals is not None:
                sumsq, nan, inf = totals
                ids.append(self._id("grad/global_norm", "scalar"))
                values.append(_global_norm(sumsq, nan, inf))
                nonfinite = bool(nan or inf)
                if nonfinite:
                    self._act_force = True
        if ids:
            self.rec.log_scalar_ids(ids, values, step)
        if self._inputs_held:  # no gradient pass on the helper took them
            self._guarded("inputs", self._measure_held_inputs)()
            self._inputs_held = []
        return self.guard and nonfinite

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

    def _weight_plan(self):
        """What the CPU weight/update pass needs of each parameter, computed once the
        snapshots exist (None: not all parameters are on CPU, or one has no snapshot)."""
        if self._wplan is None:
            self._wplan = False
            kept = [(n, p) for n, p in self.params if p.dtype in _DTYPE_CODES]
            snaps = [self._snapshots.get(n) for n, _ in kept]
            if kept and not self._force_device_path and all(p.is_cpu for _, p in kept) \
                    and all(s is not None and s.is_cpu and s.is_contiguous() for s in snaps):
                self._wplan = types.SimpleNamespace(
                    tensors=[(p, p.dtype, p.numel()) for _, p in kept],
                    snapshots=snaps,  # held: the pass writes into them
                    weight_ids=[self._id("weight/" + n, "tensor_stats") for n, _ in kept],
                    update_ids=[self._id("update/" + n, "tensor_stats") for n, _ in kept],
                    ratio_ids=[self._id("update_ratio/" + n, "scalar") for n, _ in kept],
                    previous=[s.data_ptr() for s in snaps],
                    bytes=[p.numel() * p.element_size() for _, p in kept],
                    numels=[p.numel() for _, p in kept], codes=[_DTYPE_CODES[p.dtype] for _, p in kept])
        return self._wplan or None

    def _cpu_weight_pointers(self, plan):
        """data_ptr() of each planned parameter, or None when one is no longer a contiguous
        CPU tensor of its planned dtype and size (then the plan is made again)."""
        ptrs = []
        for p, dtype, numel in plan.tensors:
            if not (p.is_cpu and p.dtype is dtype and p.is_contiguous() and p.numel() == numel):
                self._wplan = None
                return None
            ptrs.append(p.data_ptr())
        return ptrs

    def _refresh_snapshots(self, beside=False):
        """Copies the weights into the snapshots; beside: the CPU copies on the helper thread,
        which the optimizer-step wrapper waits for before the weights change."""
        from trainscope import _core
        plan = self._weight_plan()
        current = self._cpu_weight_pointers(plan) if plan is not None else None
        if current is not None:  # copies done by one C++ call (not a torch op per tensor)
            if beside:
                self._weights_ticket = self._helper().submit_copies(plan.previous, current, plan.bytes)
            else:
                self._wait_weights()
                _core.copy_many(plan.previous, current, plan.bytes)
            return
        self._wait_weights()
        self._wplan = None  # snapshots may be made below
        dst, src, nbytes = [], [], []
        with torch.no_grad():
            for name, p in self.params:
                if p.dtype not in _DTYPE_CODES:
                    continue
                snap = self._snapshots.get(name)
                if snap is None or snap.shape != p.shape or snap.dtype != p.dtype or snap.device != p.device:
                    self._snapshots[name] = p.detach().clone(memory_format=torch.contiguous_format)
                elif p.is_cpu and p.is_contiguous() and not self._force_device_path:
                    dst.append(snap.data_ptr())
                    src.append(p.data_ptr())
                    nbytes.append(p.numel() * p.element_size())
                else:
                    snap.copy_(p.detach())
        if dst and beside:
            self._weights_ticket = self._helper().submit_copies(dst, src, nbytes)
        elif dst:
            _core.copy_many(dst, src, nbytes)

    def _wait_weights(self):
        """Waits for the helper's snapshot copies and weight pass (before the weights change)."""
        if self._weights_ticket:
            ticket, self._weights_ticket = self._weights_ticket, 0
            self._worker.wait_for(ticket)

    def _after_update(self):
        step = self.clock.step
        if not self._due(self.weights_every):
            return
        histogram = bool(self.histograms_every) and self._due(self.histograms_every)
        if self.optimizer is not None:
            # Deferred to the next training forward, where on CPU the helper thread reads the
            # weights while forward and backward run (_submit_weight_pass). The update is
            # then the change up to that forward: the step's, and any the loop made after
            # it (a WGAN's clamp), which a pass right after the step would race with.
            self._weights_due = (step, histogram)
            self._snapshot_step = step
            return
        self._weight_stats_now(step, histogram)

    def _submit_weight_pass(self):
        """Starts the weight/update pass deferred from the last sampled optimizer step on the
        helper thread (the next optimizer step waits for it)."""
        if self._weights_due is None:
            return
        step, histogram = self._weights_due
        self._weights_due = None
        plan = self._weight_plan()
        current = self._cpu_weight_pointers(plan) if plan is not None else None
        if current is None:  # on an accelerator, or the parameters changed since (moved, replaced)
            self._weight_stats_now(step, histogram)
            return
        worker = self._helper()
        if self._worker_wplan is not plan:
            worker.set_weight_plan(plan.weight_ids, plan.update_ids, plan.ratio_ids, plan.previous, plan.numels,
                                   plan.codes)
            self._worker_wplan = plan
        self._weights_ticket = worker.submit_weight_pass(step, current, histogram)

    def _weight_stats_now(self, step, histogram):
        """The weight/update pass on this thread (and half on the helper, on CPU)."""
        plan = self._weight_plan()
        current = self._cpu_weight_pointers(plan) if plan is not None else None
        if current is not None:  # in two halves, on the helper and on this thread
            self._helper().weight_update_pass(step, plan.weight_ids, plan.update_ids, plan.ratio_ids,
                                              current, plan.previous, plan.numels, plan.codes, histogram)
            self._snapshot_step = step
            return
        cpu, device = [], []
        for name, p in self.params:
            snap = self._snapshots.get(name)
            if snap is None or p.dtype not in _DTYPE_CODES:
                continue
            on_host = p.device.type == "cpu" and not self._force_device_path
            (cpu if on_host else device).append((name, p.detach(), snap))
        if cpu:
            ids_w, ids_u, ids_r, cur, prev, numels, dtypes, keep = [], [], [], [], [], [], [], []
            for name, w, snap in cpu:
                if not w.is_contiguous():
                    w = w.contiguous()
                keep.append(w)
                ids_w.append(self._id("weight/" + name, "tensor_stats"))
                ids_u.append(self._id("update/" + name, "tensor_stats"))
                ids_r.append(self._id("update_ratio/" + name, "scalar"))
                cur.append(w.data_ptr())
                prev.append(snap.data_ptr())
                numels.append(w.numel())
                dtypes.append(_DTYPE_CODES[w.dtype])
            self.rec.log_weight_update_many(step, ids_w, ids_u, ids_r, cur, prev, numels, dtypes, histogram)
        if device:
            with torch.no_grad():
                updates = [w - snap for _, w, snap in device]
                names = [n for n, _, _ in device]
                self._tensor_stats(step, [("weight/" + n, w) for n, w, _ in device], histogram=histogram)
                self._tensor_stats(step, [("update/" + n, u) for n, u in zip(names, updates)], histogram=histogram,
                                   ratio_names=names, weights=[w for _, w, _ in device])
                for _, w, snap in device:
                    snap.copy_(w)
        self._snapshot_step = step

    # ---- statistics of many tensors: in place on CPU, packed on a device ----

    def _tensor_stats(self, step, named, histogram, units=False, sync=False, ratio_names=None, weights=None):
        """Logs TensorStats of each (tag, tensor); returns (sum of squares, nan, inf) when known now."""
        host = not self._force_device_path
        cpu = [(t, x) for t, x in named if host and x.device.type == "cpu"]
        dev = [(t, x) for t, x in named if not (host and x.device.type == "cpu")]
        totals = [0.0, 0, 0]
        if cpu:
            ids, ptrs, numels, dtypes, rows, unit_ids, keep = [], [], [], [], [], [], []
            for tag, x in cpu:
                if not x.is_contiguous():
                    x = x.contiguous()
                keep.append(x)
                ids.append(self._id(tag, "tensor_stats"))
                ptrs.append(x.data_ptr())
                numels.append(x.numel())
                dtypes.append(_DTYPE_CODES[x.dtype])
                if units:
                    if x.dim() >= 2 and tag.startswith("grad/"):
                        rows.append(x.shape[0])
                        unit_ids.append(self._id("grad_units/" + tag[5:], "vector"))
                    else:
                        rows.append(0)
                        unit_ids.append(0)
            sumsq, nan, inf = self.rec.log_tensor_stats_many(step, ids, ptrs, numels, dtypes, rows, unit_ids,
                                                             histogram)
            totals = [sumsq, nan, inf]
        if dev:
            result = self._device_stats(step, dev, histogram, units, sync, ratio_names, weights)
            if result is None:
                return None
            totals = [totals[0] + result[0], totals[1] + result[1], totals[2] + result[2]]
        return tuple(totals)

    def _device_stats(self, step, named, histogram, units, sync, ratio_names, weights):
        packed, layout = pack_device_stats([x for _, x in named], histogram, units,
                                           weights=weights)
        tags = [t for t, _ in named]
        if sync:  # guard mode must know now: one synchronising copy, as AMP's GradScaler does
            host = packed.to("cpu")
            return self._log_packed(step, tags, host, layout, histogram, units, ratio_names)
        host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=torch.cuda.is_available())
        host.copy_(packed, non_blocking=True)
        event = None
        if packed.device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(packed.device))
        self._pending_copies.append((step, tags, host, event, layout, histogram, units, ratio_names))
        return None

    def _log_packed(self, step, tags, host, layout, histogram, units, ratio_names):
        stats, hist, unit_norms, ratios = unpack_device_stats(host, layout)
        ids = [self._id(t, "tensor_stats") for t in tags]
        self.rec.log_packed_stats(step, ids, stats.tolist(), hist.tolist() if hist is not None else [])
        if unit_norms is not None:
            for tag, norms in zip(tags, unit_norms):
                if norms is not None and tag.startswith("grad/"):
                    self.rec.log_vector_id(self._id("grad_units/" + tag[5:], "vector"), step, norms.tolist())
        if ratios is not None and ratio_names is not None:
            self.rec.log_scalar_ids([self._id("update_ratio/" + n, "scalar") for n in ratio_names],
                                    ratios.tolist(), step)
        sumsq = float(stats[:, _SUMSQ].sum())
        return sumsq, int(stats[:, _NAN].sum()), int(stats[:, _INF].sum())

    def _drain(self, wait=False):
        """Logs the device statistics whose copy to the host has completed."""
        still = []
        for item in self._pending_copies:
            step, tags, host, event, layout, histogram, units, ratio_names = item
            if event is not None and not event.query():
                if not wait:
                    still.append(item)
                    continue
                event.synchronize()
            result = self._log_packed(step, tags, host, layout, histogram, units, ratio_names)
            if tags and tags[0].startswith("grad/"):
                self.rec.log_scalar("grad/global_norm", _global_norm(*result), step)
        self._pending_copies = still

    # ---- end of step: memory, census, device activations, late copies ----

    def _on_step_end(self, step):
        self._end_backward()
        self._commit_activations()
        if self._inputs_held:  # a step without an optimizer step
            self._guarded("inputs", self._measure_held_inputs)()
            self._inputs_held = []
        if self.optimizer is None and self._due(self.every):
            # No optimizer to wrap: the gradients of this step's backward, now.
            histogram = bool(self.histograms_every) and self._due(self.histograms_every)
            totals = self._gradient_stats(step, histogram, self._due(self.units_every))
            if totals is not None and any(p.grad is not None for _, p in self.params):
                self.rec.log_scalar("grad/global_norm", _global_norm(*totals), step)
            # Weights changed by the user's own update: compare with the snapshot taken at
            # the end of the previous step, and take one before each sampled step.
            if self._due(self.weights_every) and self._snapshot_step == step - 1:
                self._after_update()
            if (step + 1) % self.weights_every == 0:
                self._refresh_snapshots()
                self._snapshot_step = step
        if self._act_pending:
            acts, self._act_pending = self._act_pending, []
            stacked = torch.stack([a for _, a in acts])
            host = stacked.to("cpu")  # once per sampled step, at its end
            ids = [self._id(tag, "tensor_stats") for tag, _ in acts]
            rows = host[:, :10].tolist()
            hists = host[:, 10:].tolist() if host.shape[1] > 10 else []
            self.rec.log_packed_stats(step, ids, rows, hists)
        if self._pending_copies:
            self._drain(wait=False)
        if self.timer.pending:
            self.timer.collect(wait=False)
        ids, values = [], []
        if self.memory:
            if self._rss_step != step:
                ids.append(self._id("mem/rss", "scalar"))
                values.append(float(_core_rss()))
            if self._cuda_available and torch.cuda.is_initialized():
                for tag, read in (("mem/cuda_allocated", torch.cuda.memory_allocated),
                                  ("mem/cuda_reserved", torch.cuda.memory_reserved),
                                  ("mem/cuda_peak", torch.cuda.max_memory_allocated)):
                    ids.append(self._id(tag, "scalar"))
                    values.append(float(read()))
        if self.census_every and step % self.census_every == 0:
            self._census(step)
        ids.append(self._id("time/watch", "scalar"))
        values.append(self._take_self_seconds())
        self.rec.log_scalar_ids(ids, values, step)

    def _census(self, step):
        # Live objects only: garbage in reference cycles would otherwise be counted until the
        # collector happens to run, and hide (or fake) a per-step growth. This collection is
        # trainscope's own cost (_on_gc leaves it in time/watch).
        self._own_gc = True
        try:
            gc.collect()
        finally:
            self._own_gc = False
        counts = collections.Counter()
        for obj in gc.get_objects():
            t = type(obj)
            counts[t] += 1
        named = {}
        for t, n in counts.items():
            module = getattr(t, "__module__", "") or ""
            name = t.__qualname__ if module in ("builtins", "") else f"{module}.{t.__qualname__}"
            named[name] = named.get(name, 0) + n
        top = sorted(named.items(), key=lambda kv: -kv[1])[:30]
        self._census_types.update(name for name, _ in top)
        self._census_types.add("torch.Tensor")
        self._census_types.add("torch.nn.parameter.Parameter")
        for name in self._census_types:
            self.rec.log_scalar("census/" + name, float(named.get(name, 0)), step)


class _Hook:
    """A hook trainscope attaches to the user's modules and parameters.

    A copy of a watched model is not watched: copy.deepcopy and pickling (torch.save(model))
    make an inert hook of it, where a closure would fail to pickle ("Can't pickle local
    object") or, deep-copied, feed the copy's forwards to the original's watcher. Loading
    a model saved while watched needs trainscope importable, as it needs the model's class.
    """

    __slots__ = ("fn",)
    __torch_unserializable__ = True  # a parameter's hooks are dropped when it is saved: no warning

    def __init__(self, fn=None):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return None if self.fn is None else self.fn(*args, **kwargs)

    def __reduce__(self):
        return _Hook, ()

    def __deepcopy__(self, memo):
        return _Hook()


class _BoundWrapper:
    """What Watcher._wrap puts in place of obj.method (model.zero_grad, optimizer.step on
    torch 1.13): it looks like a bound method (__self__, __func__: LR schedulers wrap
    optimizer.step in turn and read them), and a copy or a pickled object gets its class's
    plain method back, bound to the copy; a bound method of a closure would carry the
    original object into the copy (a deep copy's zero_grad() zeroed the original's
    gradients)."""

    def __init__(self, func, obj, name, original):
        self.__func__ = func
        self.__self__ = obj
        self.__wrapped__ = original
        self.__name__ = name
        # Keep the marks other wrappers left (_with_counter: torch 1.13 schedulers;
        # _wrapped_by_lr_sched: torch 2.x), which they read on the method.
        for mark in ("_with_counter", "_wrapped_by_lr_sched"):
            if getattr(original, mark, False):
                setattr(self, mark, True)

    def __call__(self, *args, **kwargs):
        return self.__func__(self.__self__, *args, **kwargs)

    def __reduce__(self):
        return getattr, (self.__self__, self.__name__)

    def __deepcopy__(self, memo):
        return getattr(copy.deepcopy(self.__self__, memo), self.__name__)


def _step_hooks_may_nest(optimizer):
    """torch 2.x runs an optimizer's step hooks around each step() of its class chain: a
    subclass whose step calls super().step() (class MyAdam(Adam)) runs them twice a step."""
    own_steps = [cls for cls in type(optimizer).__mro__
                 if "step" in cls.__dict__ and cls is not torch.optim.Optimizer]
    return len(own_steps) > 1


def _outside_graphs(hook):
    """hook, run eagerly even inside a torch.compile'd optimizer step (torch._dynamo.disable):
    traced, its calls into _core would each break the graph (the compiled Adam step became
    9 graphs instead of 1, measured). Only when dynamo is loaded already (torch.compile was
    called): importing it costs ~1 s, too much for every watch()."""
    dynamo = sys.modules.get("torch._dynamo")
    disable = getattr(dynamo, "disable", None)
    return disable(hook) if disable is not None else hook


def _fused_amp_state(optimizer):
    """(scale, skipped) when a GradScaler steps a fused optimizer (torch 2.x optimizers with
    `_step_supports_amp_scaling`): it calls optimizer.step with the gradients still scaled
    (unless unscale_ ran), `optimizer.grad_scale` and `optimizer.found_inf` set, and the
    step unscales and skips itself. (None, False) otherwise."""
    found_inf = getattr(optimizer, "found_inf", None)
    if not isinstance(found_inf, torch.Tensor):
        return None, False
    scale = getattr(optimizer, "grad_scale", None)
    skipped = bool(found_inf.item())  # a sync on a device, as GradScaler's unfused path makes each step
    return (scale if isinstance(scale, torch.Tensor) else None), skipped


# GradScaler.step is wrapped on its class while a watched optimizer exists: the user calls
# scaler.step(optimizer) on a scaler watch() was never told about. Unwatched optimizers go
# straight through.
_scaler_watchers = {}   # id(optimizer) -> Watcher
_scaler_originals = []  # (class, its own step) while patched


def _grad_scaler_classes():
    """torch's GradScaler classes that define step themselves (torch.amp's in 2.x, which
    torch.cuda.amp's subclasses; torch.cuda.amp's in 1.13)."""
    found = []
    for owner in (getattr(torch, "amp", None), getattr(torch.cuda, "amp", None), getattr(torch.cpu, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if isinstance(cls, type) and "step" in cls.__dict__ and cls not in found:
            found.append(cls)
    return found


def _watch_grad_scalers(watcher):
    _scaler_watchers[id(watcher.optimizer)] = watcher
    if _scaler_originals:
        return
    for cls in _grad_scaler_classes():
        original = cls.__dict__["step"]
        cls.step = _scaler_step_of(original)
        _scaler_originals.append((cls, original))


def _scaler_step_of(original):
    def step(scaler, optimizer, *args, **kwargs):
        watcher = _scaler_watchers.get(id(optimizer))
        if watcher is None or watcher.closed or watcher.optimizer is not optimizer:
            return original(scaler, optimizer, *args, **kwargs)
        return watcher._scaler_step(original, scaler, optimizer, args, kwargs)

    step.__wrapped__ = original
    step.__doc__ = original.__doc__
    return step


def _unwatch_grad_scalers(watcher):
    if _scaler_watchers.get(id(watcher.optimizer)) is watcher:
        del _scaler_watchers[id(watcher.optimizer)]
    if not _scaler_watchers:
        for cls, original in _scaler_originals:
            cls.step = original
        _scaler_originals.clear()


def _global_norm(sum_squares, nan, inf):
    """The norm of all gradients from their totals: NaN if any was NaN, else Inf if any was Inf."""
    return float("nan") if nan else (float("inf") if inf else sum_squares ** 0.5)


def _core_rss():
    from trainscope import _core
    return _core.rss_bytes()


# ---- device reductions (any torch device; CPU tensors in tests) ----

def pack_device_stats(tensors, histogram, units, weights=None):
    """Every statistic of every tensor, reduced where the tensors live, in one float64 tensor.

    Layout of the result (one flat tensor, one copy to the host):
      [P x 8]   numel, nan, inf, zeros, min, max, sum, sum of squares (finite values)
      [P x 128] exponent histograms, when histogram
      row norms of every tensor with 2+ dims, concatenated, when units
      [P]       ||tensor|| / ||weights[i]||, when weights are given (update ratios)
    The layout tuple tells unpack_device_stats where each part is.
    """
    device = tensors[0].device
    flat = torch.cat([t.reshape(-1) for t in tensors])
    sizes = [t.numel() for t in tensors]
    p = len(tensors)
    seg = torch.repeat_interleave(torch.arange(p, device=device), torch.tensor(sizes, device=device))
    finite = torch.isfinite(flat)
    x = torch.where(finite, flat, torch.zeros((), dtype=flat.dtype, device=device)).to(torch.float64)
    nan = torch.zeros(p, dtype=torch.float64, device=device).index_add_(0, seg, torch.isnan(flat).to(torch.float64))
    inf = torch.zeros(p, dtype=torch.float64, device=device).index_add_(0, seg, torch.isinf(flat).to(torch.float64))
    zeros = torch.zeros(p, dtype=torch.float64, device=device).index_add_(0, seg, (flat == 0).to(torch.float64))
    total = torch.zeros(p, dtype=torch.float64, device=device).index_add_(0, seg, x)
    sumsq = torch.zeros(p, dtype=torch.float64, device=device).index_add_(0, seg, x * x)
    big = torch.tensor(float("inf"), dtype=torch.float64, device=device)
    lo = torch.full((p,), float("inf"), dtype=torch.float64, device=device).scatter_reduce(
        0, seg, torch.where(finite, x, big), reduce="amin", include_self=True)
    hi = torch.full((p,), float("-inf"), dtype=torch.float64, device=device).scatter_reduce(
        0, seg, torch.where(finite, x, -big), reduce="amax", include_self=True)
    numel = torch.tensor(sizes, dtype=torch.float64, device=device)
    parts = [torch.stack([numel, nan, inf, zeros, lo, hi, total, sumsq], dim=1).reshape(-1)]
    layout = {"p": p, "hist": False, "rows": None, "ratio": False}
    if histogram:
        nonzero = finite & (flat != 0)
        _, exponent = torch.frexp(flat.to(torch.float32) if flat.dtype in (torch.float16, torch.bfloat16)
                                  else flat)
        bins = (exponent.to(torch.int64) - 1 - _MIN_EXPONENT).clamp(0, _HIST_BINS - 1)
        index = (seg * _HIST_BINS + bins)[nonzero]
        parts.append(torch.bincount(index, minlength=p * _HIST_BINS).to(torch.float64))
        layout["hist"] = True
    if units:
        rows = [t.shape[0] if t.dim() >= 2 else 0 for t in tensors]
        norms = [t.reshape(t.shape[0], -1).to(torch.float64).norm(dim=1) for t in tensors if t.dim() >= 2]
        if norms:
            parts.append(torch.cat(norms))
        layout["rows"] = rows
    if weights is not None:
        wsq = torch.stack([w.to(torch.float64).pow(2).sum() for w in weights]) if len(weights) else sumsq
        parts.append(torch.sqrt(sumsq) / torch.sqrt(wsq))
        layout["ratio"] = True
    return torch.cat(parts), layout


def unpack_device_stats(host, layout):
    """(stats [P x 8], histograms [P x 128] or None, row norms per tensor or None, ratios or None)."""
    p = layout["p"]
    at = 8 * p
    stats = host[:at].reshape(p, 8)
    hist = None
    if layout["hist"]:
        hist = host[at:at + p * _HIST_BINS].reshape(p, _HIST_BINS)
        at += p * _HIST_BINS
    unit_norms = None
    if layout["rows"] is not None:
        unit_norms = []
        for r in layout["rows"]:
            if r:
                unit_norms.append(host[at:at + r])
                at += r
            else:
                unit_norms.append(None)
    ratios = None
    if layout["ratio"]:
        ratios = host[at:at + p]
    return stats, hist, unit_norms, ratios


def _device_activation(out, kind, histogram=False):
    """Stats of one activation on its device, one row: the 8 packed columns, dead and
    saturated fraction (NaN when not measured), then the 128 histogram bins if asked."""
    packed, _ = pack_device_stats([out], histogram=histogram, units=False)
    nan = torch.full((1,), float("nan"), dtype=torch.float64, device=out.device)
    dead, saturated = nan, nan
    if kind == _DEAD_UNITS:
        outer, units, inner = _unit_layout(tuple(out.shape))
        alive = (out.reshape(outer, units, inner) != 0).any(dim=2).any(dim=0)
        dead = (1.0 - alive.to(torch.float64).mean()).reshape(1)
    elif kind in (_TANH, _SIGMOID):
        tails = out.abs() > 0.99 if kind == _TANH else (out < 0.01) | (out > 0.99)
        valid = ~torch.isnan(out)
        saturated = ((tails & valid).sum().to(torch.float64) / valid.sum().clamp(min=1)).reshape(1)
    return torch.cat([packed[:8], dead, saturated, packed[8:]])
