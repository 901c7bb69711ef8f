"""The device path's reductions: every statistic of many tensors reduced where they live (any
torch device; CPU tensors in tests), packed into one float64 tensor, so one small copy
brings a step's statistics to the host. The device executor (executors.py) makes the copy
and logs the rows when it has landed."""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch

from trainscope._watch.plan import DEAD_UNITS, SIGMOID, TANH, unit_layout

# torch 1.13 calls scatter_reduce "beta"; its amin/amax are what the device path needs.
warnings.filterwarnings("ignore", message=r"scatter_reduce\(\) is in beta")

# Columns of the packed per-tensor statistics.
NUMEL, NAN, INF, ZEROS, MIN, MAX, SUM, SUMSQ = range(8)
HIST_BINS = 128
MIN_EXPONENT = -64

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
        bins = (exponent.to(torch.int64) - 1 - MIN_EXPONENT).clamp(0, HIST_BINS - 1)
        index = (seg * HIST_BINS + bins)[nonzero]
        parts.append(torch.bincount(index, minlength=p * HIST_BINS).to(torch.float64))
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
        hist = host[at:at + p * HIST_BINS].reshape(p, HIST_BINS)
        at += p * HIST_BINS
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


@lru_cache(maxsize=None)
def measured_stats():
    """The measured statistics (data/tensor_stats.json) as _core exports them, in slot order:
    dicts of name, slot (its column in a packed activation row), unit, computed, thresholds."""
    from trainscope import _core
    return tuple(_core.measured_tensor_stats())


def activation_row_width():
    """Values in a packed activation row before its histogram: the 8 packed columns, then
    every measured statistic."""
    return 8 + len(measured_stats())


def _thresholds(name):
    return next(row["thresholds"] for row in measured_stats() if row["name"] == name)


def _dead_fraction(out, kind):
    if kind != DEAD_UNITS:
        return None
    outer, units, inner = unit_layout(tuple(out.shape))
    alive = (out.reshape(outer, units, inner) != 0).any(dim=2).any(dim=0)
    return 1.0 - alive.to(torch.float64).mean()


def _saturated_fraction(out, kind):
    if kind not in (TANH, SIGMOID):
        return None
    high, low = _thresholds("saturated_fraction")["high"], _thresholds("saturated_fraction")["low"]
    tails = out.abs() > high if kind == TANH else (out < low) | (out > high)
    valid = ~torch.isnan(out)
    return (tails & valid).sum().to(torch.float64) / valid.sum().clamp(min=1)


# The device pass of each measured statistic, by its name in data/tensor_stats.json: its
# value for one activation as a float64 scalar tensor, or None where the kind does not get it.
DEVICE_MEASURES = {"dead_fraction": _dead_fraction, "saturated_fraction": _saturated_fraction}


def device_activation(out, kind, histogram=False):
    """Stats of one activation on its device, one row: the 8 packed columns, the measured
    statistics at their slots (NaN when not measured), then the 128 histogram bins if asked."""
    packed, _ = pack_device_stats([out], histogram=histogram, units=False)
    nan = torch.full((1,), float("nan"), dtype=torch.float64, device=out.device)
    measured = []
    for row in measured_stats():
        value = DEVICE_MEASURES[row["name"]](out, kind)
        measured.append(nan if value is None else value.reshape(1))
    return torch.cat([packed[:8], *measured, packed[8:]])
