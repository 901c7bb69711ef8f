"""What watch() knows before the first step: the plan of each tensor family and the schedule.

- ParamPlan: every watched parameter once, with what each family's pass needs of it (series
  ids of grad/, grad_units/, weight/, update/ and update_ratio/, numel, dtype, rows) and the
  weight snapshots (w_{t-1}). Built at watch(); rebuilt only when a parameter changes shape,
  dtype or device (a model moved, a layer resized): per step only addresses are read.
- Schedule: per step, one Due says what is measured (gradients, histograms, unit norms,
  weights, activations, inputs). The first `dense_steps` steps measure everything, so the
  start of a run, where the evidence of a bad init or LR is, is seen densely; then the
  usual sampling.
"""

from __future__ import annotations

import functools
import math

import torch

# dtype codes of src/watch/tensor_passes.h
DTYPE_CODES = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3}
DTYPE_BYTES = (4, 8, 2, 2)  # an element's bytes, by dtype code
INT_CODES = {torch.int64: 0, torch.int32: 1, torch.int16: 2, torch.int8: 3, torch.uint8: 4}  # watch_bindings.cc

# Activation kinds of watch_host_bindings.cc
PLAIN, DEAD_UNITS, TANH, SIGMOID = 0, 1, 2, 3
RELU_FAMILY = (torch.nn.ReLU, torch.nn.ReLU6)
CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)

# Steps measured in full at the start of a run unless watch(dense_steps=...) says otherwise.
DENSE_STEPS = 50


def first_tensor(value):
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


def unit_layout(shape):
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


def activation_kind(module):
    if isinstance(module, RELU_FAMILY):
        return DEAD_UNITS
    if isinstance(module, torch.nn.Tanh):
        return TANH
    if isinstance(module, torch.nn.Sigmoid):
        return SIGMOID
    return PLAIN


class Due:
    """What one step measures (shared by every step of the same pattern: read, never changed)."""

    __slots__ = ("grads", "histogram", "units", "weights", "activations", "inputs")

    def __init__(self, grads, histogram, units, weights, activations, inputs):
        self.grads = grads
        self.histogram = histogram
        self.units = units
        self.weights = weights
        self.activations = activations
        self.inputs = inputs


# The longest cycle of cadences whose Dues are laid out in advance (10,000 small objects at most).
LONGEST_CYCLE = 10000


class Schedule:
    """The sampling of one watcher: which statistics a step measures (at(step)).

    every: gradients and inputs; histograms_every (0: never); units_every; weights_every;
    activations_every. Steps below dense_steps measure every statistic whose cadence was
    left at its default (`dense`: the names of those); one the user set is kept from step 0.
    """

    CADENCES = ("every", "histograms_every", "units_every", "weights_every", "activations_every")

    def __init__(self, every, histograms_every, activations_every, weights_every, units_every, dense_steps,
                 dense=CADENCES):
        self.every = every
        self.histograms_every = histograms_every
        self.activations_every = activations_every
        self.weights_every = weights_every
        self.units_every = units_every
        self.dense_steps = max(0, int(dense_steps or 0))
        self._dense = {name: (1 if name in dense else getattr(self, name)) for name in self.CADENCES}
        if not histograms_every:
            self._dense["histograms_every"] = 0
        # After the dense steps the cadences repeat every lcm of them steps: a step's Due is
        # looked up, not built. at(step) is asked ~5 times a step by the hooks: a cache hit is C
        # code, without a Python frame.
        cycle = 1
        for name in self.CADENCES:
            cycle = math.lcm(cycle, getattr(self, name) or 1)
        self._cycle = cycle if cycle <= LONGEST_CYCLE else 0
        after_dense = (self.dense_steps // cycle + 1) * cycle  # a step past the dense ones, a multiple of cycle
        self._dues = [self._due(after_dense + r) for r in range(self._cycle)]
        self.at = functools.lru_cache(maxsize=4)(self._looked_up)

    def _looked_up(self, step):
        if step >= self.dense_steps and self._cycle:
            return self._dues[step % self._cycle]
        return self._due(step)

    def _due(self, step):
        c = self._dense if step < self.dense_steps else self.__dict__
        grads = step % c["every"] == 0
        hist = c["histograms_every"]
        return Due(grads, bool(hist) and step % hist == 0, step % c["units_every"] == 0,
                   step % c["weights_every"] == 0, step % c["activations_every"] == 0, grads)

    def weights_at(self, step):
        """Without building a Due: whether step measures weights (a snapshot is due before it)."""
        c = self._dense if step < self.dense_steps else self.__dict__
        return step % c["weights_every"] == 0


class ParamPlan:
    """The watched parameters of a floating dtype, and what every family's pass needs of each."""

    def __init__(self, params, series, tag):
        """series(tag, kind): a series id; tag(family, name): the watch's tag (its namespace)."""
        from trainscope import _core
        kept = [(n, p) for n, p in params if p.dtype in DTYPE_CODES]
        self.names = [n for n, _ in kept]
        self.params = [p for _, p in kept]
        self.signature = [(p.shape, p.dtype, p.device) for p in self.params]
        self.expect = [(p.dtype, p.numel()) for p in self.params]
        self.dtypes = [p.dtype for p in self.params]
        self.on_host = all(p.device.type == "cpu" for p in self.params)
        numels = [p.numel() for p in self.params]
        codes = [DTYPE_CODES[p.dtype] for p in self.params]
        self.rows = [p.shape[0] if p.dim() >= 2 else 0 for p in self.params]
        self.grad_ids = [series(tag("grad", n), "tensor_stats") for n in self.names]
        self.unit_ids = [series(tag("grad_units", n), "vector") if r else 0 for n, r in zip(self.names, self.rows)]
        self.weight_ids = [series(tag("weight", n), "tensor_stats") for n in self.names]
        self.update_ids = [series(tag("update", n), "tensor_stats") for n in self.names]
        self.ratio_ids = [series(tag("update_ratio", n), "scalar") for n in self.names]
        self.norm_id = series(tag("grad", "global_norm"), "scalar")
        self.grads = _core.StatsPlan(self.grad_ids, numels, codes, self.rows, self.unit_ids)
        self.weights = _core.WeightPlan(self.weight_ids, self.update_ids, self.ratio_ids, numels, codes)
        self.snapshots = [None] * len(self.params)  # w_{t-1}, made by the first snapshot

    def __len__(self):
        return len(self.params)

    def changed(self):
        """True when a parameter's shape, dtype or device is not the planned one any more."""
        return any((p.shape, p.dtype, p.device) != s for p, s in zip(self.params, self.signature))

    def gradients(self):
        """Each planned parameter's dense gradient, or None (none this step, or sparse)."""
        out = []
        for p in self.params:
            g = p.grad
            out.append(g if g is not None and g.layout is torch.strided else None)
        return out

    def snapshots_ready(self):
        return all(s is not None for s in self.snapshots)

    def make_missing_snapshots(self):
        """Snapshots of the current weights where there is none; returns their slots."""
        made = [i for i, s in enumerate(self.snapshots) if s is None]
        with torch.no_grad():
            for i in made:
                self.snapshots[i] = self.params[i].detach().clone(memory_format=torch.contiguous_format)
        return made
