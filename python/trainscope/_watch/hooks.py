"""How trainscope attaches to the user's objects and stays out of their way: hooks that copy
and pickle as inert, wrappers that look like bound methods, the optimizer's step hooks, the
GradScaler patch, failures that switch one part off, and trainscope's own time (time/watch)."""

from __future__ import annotations

import copy
import functools
import gc
import sys
import time
import traceback
import warnings

import torch

# The clock of time/watch (trainscope's own time per step): wall time. The overhead
# benchmark sets time.thread_time here to
# measure the training thread's CPU instead, which other processes do not inflate.
self_clock = time.perf_counter


class Failures:
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


def start_self_time(core):
    """trainscope's own cost (time/watch), kept by the run's StepCore (C++): wall time spent
    inside its hooks and wrappers (outermost calls only), logged per step as time/watch, so a
    user sees what watching costs.

    Python's cyclic garbage collections that start while a hook runs are left out (the
    core's on_gc, a gc.callbacks entry): they come when the whole program's allocations
    (mostly torch's tensors) cross a threshold, and a full one takes milliseconds, which would
    be charged to whichever hook was unlucky (measured: 0.3 ms per step charged to the model's
    forward hook alone). A collection trainscope starts itself (the census) is its own cost:
    `own_gc` keeps it in."""
    core.reset_self_time()
    stop_self_time(core)
    gc.callbacks.append(core.on_gc)
    return core


def stop_self_time(core):
    callback = core.on_gc
    if callback in gc.callbacks:
        gc.callbacks.remove(callback)


class Hook:
    """A hook trainscope attaches to the user's modules and parameters.

    A copy of a watched model is not watched: copy.deepcopy and pickling (torch.save(model))
    make an inert hook of it, where a closure would fail to pickle ("Can't pickle local
    object") or, deep-copied, feed the copy's forwards to the original's watcher. Pickled,
    the inert hook is made of the standard library only (sys.audit with an event name:
    takes any arguments, returns None, does nothing unless an audit hook listens), so a
    model saved while watched loads where trainscope is not installed.
    """

    __slots__ = ("fn",)
    __torch_unserializable__ = True  # a parameter's hooks are dropped when it is saved: no warning

    def __init__(self, fn=None):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return None if self.fn is None else self.fn(*args, **kwargs)

    def __reduce__(self):
        return functools.partial, (sys.audit, INERT_HOOK_EVENT)

    def __deepcopy__(self, memo):
        return Hook()


def GuardedHook(fn, part, failures, self_time):
    """fn as trainscope runs its own code on the training thread (_core.GuardedHook, C++):
    skipped once `part` failed, a failure reported (Failures) and never raised, the time
    inside counted as trainscope's own (self_time: the run's StepCore, outermost calls only).
    No Python frame of its own: torch calls these hooks several times a step, and each frame
    more costs the step ~0.5-1 us once the step's own work has left the code cold. It copies
    and pickles as Hook does (inert)."""
    from trainscope import _core
    return _core.GuardedHook(fn, part, failures, self_time)


# The audit event an unpickled trainscope hook raises when called (a no-op without listeners).
INERT_HOOK_EVENT = "trainscope.unwatched_copy_hook"


class BoundWrapper:
    """What Watcher._wrap puts in place of obj.method (model.zero_grad, optimizer.step on
    torch 1.13): it looks like a bound method (__self__, __func__: LR schedulers wrap
    optimizer.step in turn and read them), and a copy or a pickled object gets its class's
    plain method back, bound to the copy; a bound method of a closure would carry the
    original object into the copy (a deep copy's zero_grad() zeroed the original's
    gradients)."""

    def __init__(self, func, obj, name, original, watcher, wrapper):
        self.__func__ = func
        self.__self__ = obj
        self.__wrapped__ = original
        self.__name__ = name
        # Called as obj.method(...): what func does (wrapper(original, ...) while the watcher
        # is open), without func's frame.
        self._watcher = watcher
        self._wrapper = wrapper
        # Keep the marks other wrappers left (_with_counter: torch 1.13 schedulers;
        # _wrapped_by_lr_sched: torch 2.x), which they read on the method.
        for mark in ("_with_counter", "_wrapped_by_lr_sched"):
            if getattr(original, mark, False):
                setattr(self, mark, True)

    def __call__(self, *args, **kwargs):
        if self._watcher.closed:  # finished runs record nothing more
            return self.__wrapped__(*args, **kwargs)
        return self._wrapper(self.__wrapped__, *args, **kwargs)

    def __reduce__(self):
        return getattr, (self.__self__, self.__name__)

    def __deepcopy__(self, memo):
        return getattr(copy.deepcopy(self.__self__, memo), self.__name__)


def step_hooks_may_nest(optimizer):
    """torch 2.x runs an optimizer's step hooks around each step() of its class chain: a
    subclass whose step calls super().step() (class MyAdam(Adam)) runs them twice a step."""
    own_steps = [cls for cls in type(optimizer).__mro__
                 if "step" in cls.__dict__ and cls is not torch.optim.Optimizer]
    return len(own_steps) > 1


def outside_graphs(hook):
    """hook, run eagerly even inside a torch.compile'd optimizer step (torch._dynamo.disable):
    traced, its calls into _core would each break the graph (the compiled Adam step became
    9 graphs instead of 1, measured). Only when dynamo is loaded already (torch.compile was
    called): importing it costs ~1 s, too much for every watch()."""
    dynamo = sys.modules.get("torch._dynamo")
    disable = getattr(dynamo, "disable", None)
    return disable(hook) if disable is not None else hook


def fused_amp_state(optimizer):
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


def grad_scaler_classes():
    """torch's GradScaler classes that define step themselves (torch.amp's in 2.x, which
    torch.cuda.amp's subclasses; torch.cuda.amp's in 1.13)."""
    found = []
    for owner in (getattr(torch, "amp", None), getattr(torch.cuda, "amp", None), getattr(torch.cpu, "amp", None)):
        cls = getattr(owner, "GradScaler", None)
        if isinstance(cls, type) and "step" in cls.__dict__ and cls not in found:
            found.append(cls)
    return found


def watch_grad_scalers(watcher):
    _scaler_watchers[id(watcher.optimizer)] = watcher
    if _scaler_originals:
        return
    for cls in grad_scaler_classes():
        original = cls.__dict__["step"]
        cls.step = scaler_step_of(original)
        _scaler_originals.append((cls, original))


def scaler_step_of(original):
    def step(scaler, optimizer, *args, **kwargs):
        watcher = _scaler_watchers.get(id(optimizer))
        if watcher is None or watcher.closed or watcher.optimizer is not optimizer:
            return original(scaler, optimizer, *args, **kwargs)
        return watcher._scaler_step(original, scaler, optimizer, args, kwargs)

    step.__wrapped__ = original
    step.__doc__ = original.__doc__
    return step


def unwatch_grad_scalers(watcher):
    if _scaler_watchers.get(id(watcher.optimizer)) is watcher:
        del _scaler_watchers[id(watcher.optimizer)]
    if not _scaler_watchers:
        for cls, original in _scaler_originals:
            cls.step = original
        _scaler_originals.clear()
