"""Finding the optimizer of a watch made without one: a library that makes its optimizer inside
its own Trainer.run() (minGPT) leaves the script only `run.watch(model)` before it.

While such a watch waits, torch.optim.Optimizer.__init__ is wrapped (every torch.optim
optimizer and most others call it): an optimizer made afterwards whose param_groups hold one
of the model's parameters is adopted as if it had been passed to watch(). Where torch has
global step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook, torch 2.x), an
optimizer made before the watch is adopted at its first step too. Nothing of this runs per
step once every waiting watch has its optimizer (or is closed): the wrapper and the global
hook are removed then. docs/watch.md "Optimizers made later".
"""

from __future__ import annotations

import importlib

import torch

_waiting = []          # watchers without an optimizer, in watch order
_original_init = []    # [Optimizer.__init__ as it was] while wrapped
_global_hook = []      # [the handle of the global step pre-hook] while registered


def wait_for_optimizer(watcher):
    _waiting.append(watcher)
    if not _original_init:
        original = torch.optim.Optimizer.__dict__["__init__"]

        def __init__(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            if _waiting:
                offer(optimizer)

        __init__.__wrapped__ = original
        __init__.__doc__ = original.__doc__
        torch.optim.Optimizer.__init__ = __init__
        _original_init.append(original)
    # The submodule, not torch.optim's attribute of that name (torch.optim deletes some of its
    # submodules' names from its namespace).
    register = getattr(importlib.import_module("torch.optim.optimizer"), "register_optimizer_step_pre_hook", None)
    if register is not None and not _global_hook:
        _global_hook.append(register(_step_pre_hook))


def _step_pre_hook(optimizer, args, kwargs):
    """A step of any optimizer while a watch waits (torch 2.x): one made before the watch.
    The optimizer's own step hooks that adoption registers run in this same step: torch
    calls the global pre-hooks, then the optimizer's own."""
    if _waiting:
        _in_hook[0] = True
        try:
            offer(optimizer)
        finally:
            _in_hook[0] = False
    return None


_in_hook = [False]     # inside the global pre-hook: torch is iterating the global hooks' dict


def offer(optimizer):
    """Adopts optimizer for each waiting watch whose parameters it holds (never raises)."""
    held = None
    for watcher in list(_waiting):
        try:
            if held is None:
                held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            if any(id(p) in held for _, p in watcher.params):
                _waiting.remove(watcher)
                watcher._call_guarded("optimizer", watcher.adopt, optimizer)
        except Exception as error:  # the monitor never breaks the making of an optimizer
            watcher.failures.report("optimizer", error)
            stop_waiting(watcher)
    if not _waiting:
        _restore()


def stop_waiting(watcher):
    if watcher in _waiting:
        _waiting.remove(watcher)
    if not _waiting:
        _restore()


def _restore():
    if _original_init:
        original = _original_init.pop()
        current = torch.optim.Optimizer.__dict__.get("__init__")
        if getattr(current, "__wrapped__", None) is original:
            torch.optim.Optimizer.__init__ = original
        # else wrapped again by someone else: ours stays inside theirs, inert (nothing waits)
    if _global_hook and not _in_hook[0]:
        # Never while torch iterates the global hooks (adoption happens inside one): removing
        # a hook changes the dict it iterates. The adopted watch's step end calls settle().
        _global_hook.pop().remove()


def pending_removal():
    return bool(_global_hook) and not _waiting


def settle():
    """At a step end: removes the global hook nothing waits for any more."""
    if _global_hook and not _waiting:
        _restore()
