"""trainscope's API (bench/doctor/peers/shim_common.py) forwarding to torchmortem 0.1.1 as its
README's Quick Start attaches it: one `Autopsy(model, optimizer=optimizer)` per watched
model, attached at run.watch (the default sampling, "balanced"), `autopsy.step(loss=loss.item())`
after each training step (each logged training loss), and at the end of the run
`autopsy.detach()` (is_complete=False when the training raised) and
`autopsy.report(<run dir>/torchmortem[-<name>].json)` (the JSON renderer; the HTML one shows
the same findings). With two models watched under names (dcgan.py --names), each Autopsy gets
the loss logged under its name (loss/D for D); otherwise every Autopsy gets the run's
training loss. Findings: report.findings (and report.insights, kept for reading).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import shim_common  # noqa: E402

from torchmortem import Autopsy  # noqa: E402


class TorchmortemBackend(shim_common.Backend):
    tool = "torchmortem"

    def __init__(self):
        self.autopsies = []  # [(Autopsy, name)]

    def watch(self, run, model, optimizer, name):
        autopsy = Autopsy(model, optimizer=optimizer)
        autopsy.attach()
        self.autopsies.append((autopsy, name))

    def train_log(self, run, step, data, loss_tag):
        for autopsy, name in self.autopsies:
            tag = loss_tag
            if name:
                own = [t for t in data if isinstance(t, str) and "loss" in t.lower()
                       and (t.endswith("/" + name) or t.endswith("_" + name))]
                tag = own[0] if own else loss_tag
            value = shim_common._number(data[tag])
            if value is not None:
                autopsy.step(loss=value)

    def finish(self, run, crashed):
        out = []
        for i, (autopsy, name) in enumerate(self.autopsies):
            autopsy.detach(is_complete=not crashed)
            suffix = f"-{name or i}" if len(self.autopsies) > 1 else ""
            report = autopsy.report(os.path.join(run.dir, f"torchmortem{suffix}.json"))
            model = name or type(autopsy._model).__name__
            for f in report.findings:
                out.append({"title": f.title, "severity": f.severity.name.lower(), "category": f.category,
                            "detector": f.detector, "step": int(f.step_range[0]),
                            "step_range": [int(s) for s in f.step_range], "model": model,
                            "affected_layers": f.affected_layers, "summary": f.summary,
                            "remediation": f.remediation})
            for insight in report.insights:
                out.append({"insight": insight.rule_name, "title": insight.title, "model": model,
                            "summary": insight.summary, "remediation": insight.remediation,
                            "severity": "insight"})
        return out


shim_common.make_api(globals(), TorchmortemBackend)
