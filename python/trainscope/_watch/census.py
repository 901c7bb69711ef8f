"""What a step's end reads of the process: memory (mem/rss, mem/cuda_*), the training
thread's page faults and kernel time in the step (mem/page_faults, mem/kernel_seconds), and,
every census_every steps, a census of live Python objects by type (census/<type>), so that
a per-step growth (a leak of tensors kept in a list) shows as a rising series.

mem/rss is the last reading of the process's RSS while that is under
_core.step_rss_max_age (10 ms) old, shared by every reader of a step's RSS (here, or the
helper's gradient job): a step of 10 ms or more gets a reading of its own, faster steps
share one. The read is a system call (in the tiny MLP's loop 2 us when made every step,
11 us when made every 40th, its path cold); a memory trend, what the series is for, moves
over many steps, not within 10 ms.

A census (a full gc.collect() and a pass over every object: 30-90 ms) is skipped while it
would take more than census_budget of the run's wall time: a 0.2 ms step made ~25 % slower
on average by one census every 500 steps gets one every ~100x its cost instead."""

from __future__ import annotations

import collections
import gc
import time

import torch

from trainscope._watch.models import series_tag

_CUDA_MEMORY = ((series_tag("", "mem", "cuda_allocated"), torch.cuda.memory_allocated),
                (series_tag("", "mem", "cuda_reserved"), torch.cuda.memory_reserved),
                (series_tag("", "mem", "cuda_peak"), torch.cuda.max_memory_allocated))
_RSS = series_tag("", "mem", "rss")
_PAGE_FAULTS = series_tag("", "mem", "page_faults")
_KERNEL_SECONDS = series_tag("", "mem", "kernel_seconds")


class Census:
    """The memory readings and the object census of one watcher."""

    def __init__(self, series, self_time, every, budget=0.01):
        self.series = series          # (tag, kind) -> series id
        self.self_time = self_time    # the run's StepCore (time/watch): the census's collection is trainscope's cost
        self.every = int(every or 0)
        self.budget = budget          # the census's most share of wall time (None: every census_every steps)
        self.not_before = 0.0         # perf_counter time before which a census would exceed the budget
        self.types = set()            # every type that was once in a census's top 30
        self.cuda_available = torch.cuda.is_available()  # asked once: per step it is a cold call
        self.thread_usage = None      # (minor faults, kernel seconds) of the training thread at the last step end
        self.usage_ids = None         # the series of mem/page_faults and mem/kernel_seconds, once asked
        from trainscope import _core
        self.read_step_rss = _core.step_rss_bytes
        self.read_thread_usage = _core.thread_usage

    def memory(self, with_rss):
        """(ids, values) of this step's memory readings (RSS unless the helper read it)."""
        ids, values = [], []
        if with_rss:
            ids.append(self.series(_RSS, "scalar"))
            values.append(float(self.read_step_rss()))
        if self.cuda_available and torch.cuda.is_initialized():
            for tag, read in _CUDA_MEMORY:
                ids.append(self.series(tag, "scalar"))
                values.append(float(read()))
        # The training thread's (a step ends on it) page faults and kernel time since the last
        # step end: with glibc's malloc a CPU training can spend a quarter of each step
        # faulting back in the tensor memory it freed (HOST_PAGE_FAULTS). One getrusage call;
        # only the thread itself can read its own usage this cheaply.
        now = self.read_thread_usage()
        if now is not None:
            last = self.thread_usage
            if last is not None:
                if self.usage_ids is None:
                    self.usage_ids = [self.series(_PAGE_FAULTS, "scalar"), self.series(_KERNEL_SECONDS, "scalar")]
                ids += self.usage_ids
                values += [float(now[0] - last[0]), now[1] - last[1]]
            self.thread_usage = now
        return ids, values

    def due(self, step):
        return self.every and step % self.every == 0 and (not self.budget or time.perf_counter() >= self.not_before)

    def take(self, step):
        """(ids, values): the count of live objects of each type seen in a top 30."""
        # Live objects only: garbage in reference cycles would otherwise be counted until the
        # collector happens to run, and hide (or fake) a per-step growth.
        started = time.perf_counter()
        self.self_time.own_gc = True
        try:
            gc.collect()
        finally:
            self.self_time.own_gc = False
        counts = collections.Counter(type(obj) for obj in gc.get_objects())
        named = {}
        for t, n in counts.items():
            module = getattr(t, "__module__", "") or ""
            name = t.__qualname__ if module in ("builtins", "") else f"{module}.{t.__qualname__}"
            named[name] = named.get(name, 0) + n
        top = sorted(named.items(), key=lambda kv: -kv[1])[:30]
        self.types.update(name for name, _ in top)
        self.types.add("torch.Tensor")
        self.types.add("torch.nn.parameter.Parameter")
        ids = [self.series(series_tag("", "census", name), "scalar") for name in self.types]
        values = [float(named.get(name, 0)) for name in self.types]
        if self.budget:
            ended = time.perf_counter()
            self.not_before = ended + (ended - started) * (1.0 / self.budget - 1.0)
        return ids, values
