"""run.data(): the batches of a source, timed, as the loop iterates them."""

from __future__ import annotations


class Batches:
    """What run.data() returns. Iterating it yields the source's batches, timed; each `for`
    starts a new pass (an epoch) where the source can, as a DataLoader does; `next()` takes
    the next batch of one ongoing pass. len() and the source's attributes (a DataLoader's
    dataset, batch_size, sampler) pass through, so a loop that reads them keeps working."""

    def __init__(self, run, source, steps):
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
            raise ValueError(f"run.data(steps={steps!r}): steps must be a non-negative int or None")
        kind = type(source)
        if not (hasattr(kind, "__iter__") or hasattr(kind, "__getitem__") or callable(source)):
            raise TypeError(f"run.data() takes an iterable (a DataLoader, a list, a generator) or a "
                            f"batch function, not a {kind.__name__}")
        self._run, self._source, self._steps, self._pass = run, source, steps, None

    def __iter__(self):
        from trainscope.watch import timed_data
        from trainscope.checks import batch_target_check
        run = self._run
        clock = run._step_clock()
        iterable = _batches_of(self._source, self._steps)
        inspect = run._watchers[0].inspect_batch if run._watchers else None  # the first model: bare input/label_*
        return timed_data(run, clock, batch_target_check(run, iterable), inspect)

    def __next__(self):
        if self._pass is None:
            self._pass = iter(self)
        return next(self._pass)

    def __len__(self):
        n = len(self._source)
        return n if self._steps is None else min(n, self._steps)

    def __getattr__(self, name):
        if name.startswith("_"):  # not the source's private state (and no recursion before __init__)
            raise AttributeError(name)
        return getattr(self._source, name)


def _batches_of(source, steps):
    """An iterator over source's batches: an iterable as it is, a no-argument batch
    function called once per batch (until it raises StopIteration); at most `steps`."""
    import itertools
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 0):
        raise ValueError(f"run.data(steps={steps!r}): steps must be a non-negative int or None")
    try:
        iterator = iter(source)
    except TypeError:
        if not callable(source):
            raise TypeError(f"run.data() takes an iterable (a DataLoader, a list, a generator) or a "
                            f"batch function, not a {type(source).__name__}") from None
        iterator = _call_forever(source)
    return iterator if steps is None else itertools.islice(iterator, steps)


def _call_forever(batch_fn):
    while True:
        try:
            batch = batch_fn()
        except StopIteration:  # the function's way of saying "no more batches"
            return
        yield batch
