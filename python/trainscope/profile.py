"""run.profile(steps=...): a PyTorch profiler trace of a few training steps, analysed by
trainscope's trace reader (the same analysis as `trainscope trace`, docs/traces.md) into the
run's findings.

    run.watch(model, optimizer)
    run.profile(steps=5)          # profiles 5 steps after 1 skipped and 1 warm-up step
    for x, y in loader: ...       # steps end where watch() ends them; nothing else to call

The profiler follows the run's step clock (watch(), run.step(), run.data()); without one,
call `prof.step()` at the end of each step. The trace is written to
<run dir>/profile/trace_rank<R>.json; the analysis is `prof.report` (the JSON of
`trainscope trace --json`), stored as the run's meta `profile`, and its findings
(DATALOADER_BOTTLENECK, ...) join run.findings with the run's step numbers.
"""

from __future__ import annotations

import json
import os


class Profile:
    """One profiling window of a run: wait, warmup, then `steps` recorded steps."""

    def __init__(self, run, steps=3, *, wait=1, warmup=1, trace_dir=None, activities=None, record_shapes=False,
                 with_stack=False):
        if int(steps) < 1:
            raise ValueError("run.profile: steps must be at least 1")
        self.run = run
        self.steps, self.wait, self.warmup = int(steps), int(wait), int(warmup)
        self.trace_dir = trace_dir or os.path.join(run.dir, "profile")
        self.activities = activities
        self.record_shapes, self.with_stack = record_shapes, with_stack
        self.trace_path = None
        self.report = None
        self._profiler = None
        self._stepped = 0
        self._first_step = None  # the run's step at the first recorded step
        self._last_step = None

    # ---- lifecycle ----

    def start(self):
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = self.activities
        if activities is None:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(activities=activities,
                                 schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.steps, repeat=1),
                                 on_trace_ready=self._trace_ready, record_shapes=self.record_shapes,
                                 with_stack=self.with_stack)
        self._profiler.__enter__()
        clock = self.run._step_clock()
        clock.listeners.append(self._on_step_end)
        return self

    def step(self):
        """Ends one profiled step (only needed when nothing else marks the run's steps)."""
        self._advance(getattr(self.run, "_step", None))

    def stop(self):
        """Stops profiling now; a window cut short is analysed with the steps it has."""
        self._detach()
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)
        return self

    def __enter__(self):
        return self if self._profiler is not None else self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    # ---- internals ----

    def _on_step_end(self, step):
        self._advance(step)

    def _advance(self, step):
        if self._profiler is None:
            return
        recorded = self._stepped - (self.wait + self.warmup)  # index of the step ending now
        if 0 <= recorded < self.steps and step is not None:
            if self._first_step is None:
                self._first_step = step
            self._last_step = step
        self._stepped += 1
        self._profiler.step()
        if self._stepped >= self.wait + self.warmup + self.steps:
            self.stop()

    def _detach(self):
        clock = getattr(self.run, "_clock", None)
        if clock is not None and self._on_step_end in clock.listeners:
            clock.listeners.remove(self._on_step_end)

    def _trace_ready(self, profiler):
        os.makedirs(self.trace_dir, exist_ok=True)
        rank = os.environ.get("RANK", "0")
        self.trace_path = os.path.join(self.trace_dir, f"trace_rank{rank}.json")
        profiler.export_chrome_trace(self.trace_path)
        self.report = analyze(self.trace_path)
        self._record()

    def _record(self):
        first = self._first_step if self._first_step is not None else 0
        last = self._last_step if self._last_step is not None else first
        for finding in self.report.get("findings", []):
            finding = dict(finding)
            finding["step"], finding["last_step"] = first, last  # the run's steps, not the trace's
            evidence = dict(finding.get("evidence") or {})
            evidence["profiled_steps"] = [first, last]
            finding["evidence"] = evidence
            self.run._add_finding(finding)
        rank = self.report["ranks"][0] if self.report.get("ranks") else {}
        summary = {"trace": self.trace_path, "steps": [first, last],
                   "temporal": rank.get("temporal"), "dataloader_share": rank.get("dataloader_share"),
                   "median_step_us": rank.get("median_step_us"),
                   "findings": [f["code"] for f in self.report.get("findings", [])]}
        try:
            self.run._recorder.set_meta("profile", json.dumps(summary))
        except Exception:  # a closed run: the report stays on this object
            pass


def analyze(*paths, top=10, include_last_step=False):
    """The analysis of `trainscope trace --json` for trace files or folders, as a dict."""
    from trainscope import _core
    if not hasattr(_core, "analyze_traces"):
        raise RuntimeError("trainscope was built without its perf part: no trace analysis")
    return json.loads(_core.analyze_traces([os.fspath(p) for p in paths], top, include_last_step))
