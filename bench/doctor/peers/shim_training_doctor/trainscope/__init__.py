"""trainscope's API (bench/doctor/peers/shim_common.py) forwarding to training-doctor 0.1.0
as its README tells a user to attach it ("Option 1: Drop into Any Training Loop", with the
"Recommended (full diagnostics)" metrics): one `Doctor()` per run with its default detectors,
and per training step

    doctor.log(step=step, loss=loss.item(), lr=optimizer.param_groups[0]['lr'],
               grad_norm=torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))

plus `eval_loss=` whenever the script logs a validation loss ("With evaluation"). The
loss goes in twice, as loss= and train_loss=: the README's quick start logs loss=, its "With
evaluation" example train_loss=, and the detectors need both names (the LR, plateau and
instability detectors read "loss"; OverfittingDetector.can_run calls the base class's, which
requires a metric named "train_loss", so with loss= alone it never runs). The
gradient norm is the value the script's own clip_grad_norm_ returned (the norm before
clipping, as the README logs it) when it clips, else the total norm of the watched models'
gradients at the log call (after backward and step, before the next zero_grad in every
corpus script). lr: the first watched optimizer's first group, or the script's own
opt/lr. Findings: `doctor.diagnoses` at the end of the run.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import shim_common  # noqa: E402

import torch  # noqa: E402
from training_doctor import Doctor  # noqa: E402

_clipped = {"norm": None}
_clip_original = torch.nn.utils.clip_grad_norm_


def _clip_grad_norm_(*args, **kwargs):
    norm = _clip_original(*args, **kwargs)
    _clipped["norm"] = shim_common._number(norm)
    return norm


torch.nn.utils.clip_grad_norm_ = _clip_grad_norm_
torch.nn.utils.clip_grad.clip_grad_norm_ = _clip_grad_norm_


def _total_grad_norm(models):
    norms = [p.grad.detach().float().norm() for model, _, _ in models for p in model.parameters()
             if p.grad is not None]
    if not norms:
        return None
    return float(torch.stack(norms).norm())


class TrainingDoctorBackend(shim_common.Backend):
    tool = "training_doctor"

    def __init__(self):
        self.doctor = Doctor()

    def train_log(self, run, step, data, loss_tag):
        loss = shim_common._number(data[loss_tag])
        if loss is None:
            return
        metrics = {"loss": loss, "train_loss": loss}
        lr = shim_common._number(data["opt/lr"]) if "opt/lr" in data else None
        if lr is None:
            optimizer = next((opt for _, opt, _ in run.models if opt is not None), None)
            if optimizer is not None:
                lr = float(optimizer.param_groups[0]["lr"])
        if lr is not None:
            metrics["lr"] = lr
        grad_norm = _clipped["norm"]
        _clipped["norm"] = None
        if grad_norm is None and run.models:
            grad_norm = _total_grad_norm(run.models)
        if grad_norm is not None:
            metrics["grad_norm"] = grad_norm
        self.doctor.log(step=step, **metrics)

    def eval_log(self, run, step, value):
        self.doctor.log(step=step, eval_loss=value)

    def finish(self, run, crashed):
        out = []
        for d in self.doctor.diagnoses:
            out.append({"title": d.problem, "severity": d.severity.value, "step": d.step,
                        "detector": d.detector_name, "confidence": d.confidence,
                        "evidence": [{"metric": e.metric, "observation": e.observation, "value": e.value,
                                      "step": e.step} for e in d.evidence],
                        "explanation": d.explanation, "suggestions": d.suggestions})
        return out


shim_common.make_api(globals(), TrainingDoctorBackend)
