"""The step clock: step boundaries, per-step phase times (time/<phase>), run.step() and
run.data(). A step ends at an optimizer step, at the exit of `with run.step()`, when
run.data() fetches the next batch, or (no optimizer) at the next training forward after a
backward; docs/watch.md "Steps" says which wins when several are in use, and "Several
models" how the steps of several watched optimizers make one training step."""

from __future__ import annotations

import functools
import time
import weakref

import torch

from trainscope._watch import hooks
from trainscope._watch.models import series_tag


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
        self._time_ids = {}            # phase -> series id of time/<phase>
        # The per-boundary work in C++ (src/python/watch_clock_bindings.cc): the host phase
        # timer, the step's spans and time/<phase> until it closes, trainscope's own time.
        from trainscope import _core
        # (time ids through a partial, not a bound method: the core is not seen by the
        # garbage collector, so it must not hold the clock.)
        self.core = _core.StepCore(run._recorder, weakref.ref(run),
                                   functools.partial(_time_series, run._recorder, self._time_ids),
                                   thread_clock=hooks.self_clock is time.thread_time)
        self.listeners = []            # callables(step) at the end of each step
        self.data_listeners = []       # callables() before run.data() fetches a batch
        self.close_listeners = []      # callables() when a step closes (the next begins, or the run ends)
        self.sampler = None
        self.device_timed = False      # a watcher times its phases with CUDA events
        # What the watchers of one run share: the phase timer, trainscope's own time
        # (time/watch) and the memory readings and census: series of the process, one a step.
        self.timer = None
        self.self_time = None
        self.census = None
        # Watched optimizers, id -> [in the iteration (stepped, and not dropped since), steps
        # since the last step end, the most steps it made within one step since the set of
        # optimizers in the iteration last changed].
        self.optimizers = {}
        self.held = False              # an end waits for a watched optimizer's first step
        self.latest_joined = None      # id of the optimizer that last joined the iteration
        self.hold_released = False     # one stepped twice first: never-stepped ones are not waited for

    # ---- several watched optimizers: one step per training iteration (docs/watch.md
    # "Several models") ----

    def add_optimizer(self, optimizer):
        self.optimizers.setdefault(id(optimizer), [False, 0, 0])
        self.optimizer_owned = True

    def optimizer_step_begins(self, optimizer):
        """Before a watched optimizer's step: the step ends here if this optimizer steps
        again where the iteration's other optimizers did not step (an end held for one that
        never stepped; more steps since the last end than it ever made in one step; or the
        latest to join steps again before any other did: the others stopped stepping, as
        when layers are trained one after the other and the next one is watched when it
        starts)."""
        state = self.optimizers.get(id(optimizer))
        if state is None or not state[1] or len(self.optimizers) < 2 or self.explicit:
            return
        if self.held:
            self.hold_released = True
        elif (state[2] and state[1] >= state[2]) or (not state[2] and id(optimizer) == self.latest_joined):
            for other in self.optimizers.values():
                if not other[1]:
                    other[0] = False  # out of the iteration until it steps again
            self.hold_released = True
            self._reset_most()
        else:
            return
        self._optimizers_done()  # the watcher's step begin starts the next step (Watcher._step_begin)

    def optimizer_stepped(self, optimizer):
        """After a watched optimizer's step (or a GradScaler's skip of it). The training step
        ends when every optimizer in the iteration (stepped, and not dropped) has stepped
        since the last end; until each watched one has stepped once, an end waits for them
        (the first iteration)."""
        state = self.optimizers.setdefault(id(optimizer), [False, 0, 0])
        if state[2] and len(self.optimizers) == 1 and not self.held:
            self.end()  # one optimizer after its first step: each of its steps ends one (state stays [True, 0, 1])
            return
        joined = not state[0]
        state[0] = True
        state[1] += 1
        if joined:
            self.latest_joined = id(optimizer)
            self._reset_most()
            if self.hold_released:  # a late first step (or one back after a pause) ends its iteration
                self._optimizers_done()
                return
        waiting = False
        for in_iteration, since, _ in self.optimizers.values():
            if in_iteration and not since:
                return  # another optimizer of this iteration has yet to step
            waiting = waiting or not in_iteration
        if waiting and not self.hold_released:
            self.held = True
            return
        self._optimizers_done()

    def _reset_most(self):
        for state in self.optimizers.values():
            state[2] = 0

    def _optimizers_done(self):
        self.held = False
        for state in self.optimizers.values():
            if state[1] > state[2]:
                state[2] = state[1]
            state[1] = 0
        self.end()

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
            self.core.close(self.run._step, now, self.step_started, self.device_timed)
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
        self.core.add_phase(phase, start_wall, seconds, step)

    def _time_id(self, phase):
        return _time_series(self.run._recorder, self._time_ids, phase)

    def _close_step(self, step, ended=None):
        """Logs the step's spans and time/<phase>; time/step = data + forward + backward +
        optimizer + other (the rest of the loop: logging, the user's own work). On an
        accelerator the phases are device times that land later: no "other" there."""
        self.core.close(step, ended, self.step_started, self.device_timed)

    def finish(self):
        for listener in list(self.close_listeners):
            listener()
        if self.step_started is not None or self.core.has_phase_seconds:
            self._close_step(self.run._step)
            self.step_started = None


def _time_series(recorder, ids, phase):
    """The series id of time/<phase>, cached in ids."""
    found = ids.get(phase)
    if found is None:
        found = ids[phase] = recorder.series(series_tag("", "time", phase), "scalar")
    return found


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
    add_phase = clock.core.add_phase
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
        add_phase("data", wall, waited)
        first = False
        if inspect is not None:
            inspect(batch)
        yield batch


def phase_timer(clock, cuda):
    """The run's phase timer: on the host the clock's C++ core (start, stop, is_open), on a
    GPU a PhaseTimer of CUDA events."""
    return PhaseTimer(clock) if cuda else clock.core


class PhaseTimer:
    """Times forward/backward/optimizer on a GPU with CUDA events (on the host, StepCore).

    A CUDA phase is measured on the device between two events; it is logged once its end
    event has completed (checked at step ends, never waited for), with its own step.
    """

    def __init__(self, clock, cuda=True):
        self.clock = clock
        self.open = {}
        self.pending = []  # (step, phase, wall, start event, end event)

    def start(self, phase):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.open[phase] = (time.time(), event)

    def stop(self, phase):
        opened = self.open.pop(phase, None)
        if opened is None:
            return
        wall, start = opened
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.pending.append((self.clock.step, phase, wall, start, end))

    def is_open(self, phase):
        return phase in self.open

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
