"""Where statistics are taken: two executors behind one interface.

- HostExecutor: tensors in host memory, read in place by the C++ core on the helper thread
  (src/watch/helper_thread.h, _core.HostWorker) beside the training.
- DeviceExecutor: tensors on an accelerator, reduced there (device.py) into one small tensor
  per job, copied to the host without blocking, logged once the copy has landed.

Every call returns a ticket: `done()`, `wait()` (logs what has not been logged, returns the
totals (sum of squares, nan, inf) of a stats job), and for activation jobs
`log_activations(keep)`. A ticket owns the tensors its job reads until the job is done; a
host ticket dropped early waits for its job first. Nothing else holds tensors for a job.

The calls (plan: plan.ParamPlan):
  stats(step, plan, tensors, histogram, units, norm_id, scalar_ids, scalar_values, rss_id[, inputs: host only])
  gradients(step, plan, histogram, units, always_norm, scalar_ids, scalar_values, rss_id, inputs)
                                       (host) stats() of the parameters' own gradients
  weights(step, plan, histogram)       weight/update pass against plan.snapshots (refreshed)
  snapshot(plan)                       plan.snapshots := the weights
  capture(series_id, tensor, kind, histogram, flat) -> a captured item (None: not measurable)
  activations(step, captured)          captured items (host: one tensor per job, device: a forward's rows)
A host call returns None when a tensor does not fit the plan (moved off the host, resized):
the watcher plans again.
"""

from __future__ import annotations

import torch

from trainscope._watch.device import (NAN, INF, SUMSQ, activation_row_width, device_activation, pack_device_stats,
                                      unpack_device_stats)
from trainscope._watch.plan import DTYPE_CODES


def global_norm(sum_squares, nan, inf):
    """The norm of all gradients from their totals: NaN if any was NaN, else Inf if any was Inf."""
    return float("nan") if nan else (float("inf") if inf else sum_squares ** 0.5)


def _host_pointers(tensors, expect):
    """(data_ptr per slot (0: None), the tensors read), or None when one is not a host tensor
    of its planned dtype and size. A strided tensor is read from a contiguous copy."""
    ptrs, kept = [], []
    for t, (dtype, numel) in zip(tensors, expect):
        if t is None:
            ptrs.append(0)
            continue
        if t.dtype is not dtype or not t.is_cpu or t.numel() != numel:
            return None
        if not t.is_contiguous():
            t = t.detach().contiguous()
        ptrs.append(t.data_ptr())
        kept.append(t)
    return ptrs, kept


class HostExecutor:
    on_device = False

    def __init__(self, recorder):
        from trainscope import _core
        self.worker = _core.HostWorker(recorder)
        self._capture_record = _core.capture_record

    def stats(self, step, plan, tensors, histogram, units, norm_id=0, scalar_ids=(), scalar_values=(), rss_id=0,
              inputs=()):
        """inputs: captured model inputs (capture()'s items), measured in the same job."""
        found = _host_pointers(tensors, plan.expect)
        if found is None:
            return None
        ptrs, kept = found
        if inputs:
            kept += [tensor for _, tensor in inputs]
        return self.worker.submit_stats(step, plan.grads, ptrs, histogram, units, norm_id, list(scalar_ids),
                                        list(scalar_values), rss_id, kept, [record for record, _ in inputs])

    def gradients(self, step, plan, histogram, units, always_norm, scalar_ids, scalar_values, rss_id, inputs):
        """stats() of each planned parameter's own .grad, read by the C++ core (no Python loop
        over the parameters); the global norm only if a gradient was read, or always_norm.
        inputs: [(name, captured item)] as the watcher holds them."""
        return self.worker.submit_gradients(step, plan.grads, plan.params, plan.dtypes, torch.strided, histogram,
                                            units, plan.norm_id, always_norm, scalar_ids, scalar_values, rss_id,
                                            inputs)

    def weights(self, step, plan, histogram):
        found = _host_pointers(plan.params, plan.expect)
        if found is None:
            return None
        current, kept = found
        previous = [s.data_ptr() for s in plan.snapshots]
        return self.worker.submit_weights(step, plan.weights, current, previous, histogram,
                                          (kept, list(plan.snapshots)))

    def snapshot(self, plan):
        found = _host_pointers(plan.params, plan.expect)
        if found is None:
            return None
        src, kept = found
        dst, nbytes = [], []
        for i, (p, ptr) in enumerate(zip(plan.params, src)):
            if plan.snapshots[i] is None:
                plan.snapshots[i] = torch.empty(p.shape, dtype=p.dtype, device=p.device)
            dst.append(plan.snapshots[i].data_ptr())
            nbytes.append(p.numel() * p.element_size())
        return self.worker.submit_copies(dst, src, nbytes, (kept, list(plan.snapshots)))

    def capture(self, series_id, tensor, kind, histogram, flat=False):
        """(record, tensor) of a floating host tensor, read in one C++ call (its layout, device,
        sizes, strides if not contiguous, address; units as plan.unit_layout), or None."""
        code = DTYPE_CODES.get(tensor.dtype)  # floating dtypes only
        return None if code is None else self._capture_record(series_id, tensor, code, kind, histogram, flat,
                                                              torch.strided)

    def activations(self, step, captured):
        records = [record for record, _ in captured]
        return self.worker.submit_activations(step, records, [tensor for _, tensor in captured])


class DoneTicket:
    """A job with nothing left to do."""

    kept = ()

    def __init__(self, totals=(0.0, 0, 0)):
        self.totals = totals

    def done(self):
        return True

    def wait(self):
        return self.totals

    def log_activations(self, keep):
        pass


class DeviceTicket:
    """One packed tensor on its way to the host; `log(host)` logs it once it has landed."""

    kept = ()

    def __init__(self, packed, log):
        self.host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=torch.cuda.is_available())
        self.host.copy_(packed, non_blocking=True)
        self.event = None
        if packed.device.type == "cuda":
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(packed.device))
        self.log = log
        self.totals = None

    def done(self):
        return self.log is None or self.event is None or self.event.query()

    def wait(self):
        if self.log is not None:
            if self.event is not None:
                self.event.synchronize()
            log, self.log = self.log, None
            self.totals = log(self.host)
            self.host = None
        return self.totals

    def log_activations(self, keep):  # reduced in stream order: no later op can change what was read
        self.wait()


class DeviceExecutor:
    on_device = True

    def __init__(self, recorder):
        self.rec = recorder

    def _log_stats(self, step, ids, host, layout, unit_ids=None, ratio_ids=None):
        stats, hist, unit_norms, ratios = unpack_device_stats(host, layout)
        self.rec.log_packed_stats(step, ids, stats.tolist(), hist.tolist() if hist is not None else [])
        if unit_norms is not None and unit_ids is not None:
            for series, norms in zip(unit_ids, unit_norms):
                if norms is not None and series:
                    self.rec.log_vector_id(series, step, norms.tolist())
        if ratios is not None and ratio_ids is not None:
            self.rec.log_scalar_ids(ratio_ids, ratios.tolist(), step)
        return float(stats[:, SUMSQ].sum()), int(stats[:, NAN].sum()), int(stats[:, INF].sum())

    def stats(self, step, plan, tensors, histogram, units, norm_id=0, scalar_ids=(), scalar_values=(), rss_id=0):
        if scalar_ids:
            self.rec.log_scalar_ids(list(scalar_ids), list(scalar_values), step)
        slots = [i for i, t in enumerate(tensors) if t is not None]
        if not slots:
            if norm_id:
                self.rec.log_scalar_ids([norm_id], [0.0], step)
            return DoneTicket()
        with torch.no_grad():
            packed, layout = pack_device_stats([tensors[i].detach() for i in slots], histogram, units)
        ids = [plan.grad_ids[i] for i in slots]
        unit_ids = [plan.unit_ids[i] for i in slots]

        def log(host):
            totals = self._log_stats(step, ids, host, layout, unit_ids=unit_ids if units else None)
            if norm_id:
                self.rec.log_scalar_ids([norm_id], [global_norm(*totals)], step)
            return totals
        return DeviceTicket(packed, log)

    def weights(self, step, plan, histogram):
        with torch.no_grad():
            current = [p.detach() for p in plan.params]
            updates = [w - s for w, s in zip(current, plan.snapshots)]
            packed_w, layout_w = pack_device_stats(current, histogram, False)
            packed_u, layout_u = pack_device_stats(updates, histogram, False, weights=current)
            for w, s in zip(current, plan.snapshots):
                s.copy_(w)
            packed = torch.cat([packed_w, packed_u])
        cut = packed_w.numel()

        def log(host):
            self._log_stats(step, plan.weight_ids, host[:cut], layout_w)
            self._log_stats(step, plan.update_ids, host[cut:], layout_u, ratio_ids=plan.ratio_ids)
        return DeviceTicket(packed, log)

    def snapshot(self, plan):
        made = set(plan.make_missing_snapshots())
        with torch.no_grad():
            for i, p in enumerate(plan.params):
                if i not in made:
                    plan.snapshots[i].copy_(p.detach())
        return DoneTicket()

    def capture(self, series_id, tensor, kind, histogram, flat=False):
        if tensor.dtype not in DTYPE_CODES or tensor.layout is not torch.strided:
            return None
        # Reduced now, on the device's stream: an in-place op later in the forward comes after.
        with torch.no_grad():
            return series_id, histogram, device_activation(tensor.detach(), kind, histogram)

    def activations(self, step, captured):
        if not captured:
            return DoneTicket()
        plain = [(i, row) for i, h, row in captured if not h]
        hist = [(i, row) for i, h, row in captured if h]
        parts = [torch.stack([row for _, row in group]).reshape(-1) for group in (plain, hist) if group]
        packed = torch.cat(parts) if len(parts) > 1 else parts[0]

        stats_width = activation_row_width()

        def log(host):
            at = 0
            for group, width in ((plain, stats_width), (hist, stats_width + 128)):
                if not group:
                    continue
                rows = host[at:at + len(group) * width].reshape(len(group), width)
                at += len(group) * width
                self.rec.log_packed_stats(step, [i for i, _ in group], rows[:, :stats_width].tolist(),
                                          rows[:, stats_width:].tolist() if width > stats_width else [])
        return DeviceTicket(packed, log)
