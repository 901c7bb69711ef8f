"""The watched models of one run: each one's namespace in the tags, the run meta that
describes them all (docs/watch.md "Several models"), and the facts recorded once per model
(parameter dtypes and devices, optimizer groups, parameters no optimizer holds).

The naming contract: the first model watched without a name keeps the bare tags
(`grad/<param>`); a model watched with `name="D"`, and any later one watched without a name
(named after its class, deduplicated with "_2", "_3"), writes `grad/D/<param>`: the name is a
path segment right after the family. The series of the process (time/, mem/, sys/, census/,
perf/) have no namespace: one series per run, written once per step.
"""

from __future__ import annotations

import json

from trainscope._tags import PREFIXES, PROCESS_FAMILIES

# Not a family of trainscope's: the user's train/, where watch also writes train/grad_zeroed.
PREFIXES = dict(PREFIXES, train="train/")


def series_tag(namespace, family, name):
    """The tag of one series: "<family>/<namespace><name>"; namespace is "" (the first model,
    or a series of the process) or "<model name>/". The one place tags are put together."""
    prefix = PREFIXES[family]
    if not namespace or family in PROCESS_FAMILIES:
        return prefix + name
    return prefix + namespace + name


def check_name(name):
    if not isinstance(name, str) or not name or "/" in name or name != name.strip():
        raise ValueError(f"run.watch(name={name!r}): a model name is a non-empty str without '/' "
                         f"or surrounding spaces (it becomes a path segment of the tags: grad/<name>/<param>)")
    return name


class Models:
    """The run's watched models, in watch order, and the run meta describing them.

    Per-model meta maps (module_types, param_shapes, param_dtypes, param_devices) are one map
    per run: each model's keys carry its namespace ("D/main.0.weight"), as its tags do after
    the family, and every watch() merges its keys in and writes the map again.
    """

    MAPS = ("module_types", "param_shapes", "param_dtypes", "param_devices")

    def __init__(self, recorder):
        self.rec = recorder
        self.watchers = []
        self.maps = {key: {} for key in self.MAPS}
        self.module_order = []
        self.functional_ops = set()

    def namespace(self, model, name):
        """The namespace ("" or "<name>/") of a model about to be watched."""
        taken = {w.name for w in self.watchers if not w.closed}
        if name is not None:
            check_name(name)
            if name in taken:
                raise ValueError(f"run.watch(name={name!r}): a model of this run is already watched "
                                 f"under that name")
            return name
        if not any(not w.closed for w in self.watchers):
            return ""
        base = type(getattr(model, "_orig_mod", model)).__name__
        found, index = base, 1
        while found in taken:
            index += 1
            found = f"{base}_{index}"
        return found

    def add(self, watcher):
        self.watchers.append(watcher)
        for key, mapping in watcher.describe().items():
            self.maps[key].update(mapping)
            self.rec.set_meta(key, json.dumps(self.maps[key]))
        self.write_models()

    def describe_again(self, watcher):
        """A parameter changed dtype or device: its model's maps written again."""
        for key, mapping in watcher.describe().items():
            self.maps[key].update(mapping)
            self.rec.set_meta(key, json.dumps(self.maps[key]))

    def add_functional_ops(self, names):
        """meta functional_ops: the ops the first measured forward of each model called."""
        self.functional_ops.update(names)
        self.rec.set_meta("functional_ops", json.dumps(sorted(self.functional_ops)))

    def write_models(self):
        self.rec.set_meta("models", json.dumps([w.model_entry() for w in self.watchers]))
        groups = []
        unoptimized = []
        for w in self.watchers:
            groups += w.group_entries
            unoptimized += w.unoptimized
        self.rec.set_meta("param_groups", json.dumps(groups))
        self.rec.set_meta("unoptimized_params", json.dumps(unoptimized))

    def write_params_without_grad(self):
        names = [w.namespace + name for w in self.watchers if w.without_grad and w._grad_checks >= 3
                 for name in sorted(w.without_grad)]
        self.rec.set_meta("params_without_grad", json.dumps(names))

    def add_module_order(self, names):
        self.module_order += [n for n in names if n not in self.module_order]
        self.rec.set_meta("module_order", json.dumps(self.module_order))

    def primary(self, watcher):
        """True for the watcher that writes the process's series (the first one still open)."""
        for w in self.watchers:
            if not w.closed:
                return w is watcher
        return False
