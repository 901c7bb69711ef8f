"""trainscope inside the training frameworks people already use (docs/integrations.md).

    from trainscope.integrations.huggingface import TrainscopeCallback      # transformers.Trainer
    from trainscope.integrations.lightning import TrainscopeLogger, TrainscopeWatch  # Lightning

Each module imports its framework only when it is imported itself, so `import trainscope`
still needs nothing but NumPy.
"""

from __future__ import annotations

import sys
import traceback


class _FailureReporter:
    """Reports a failure inside an integration once per part, on stderr: the monitor never
    stops the training, so the part that failed is switched off and training goes on."""

    def __init__(self, owner):
        self.owner = owner
        self.off = set()

    def report(self, part, error):
        if part in self.off:
            return
        self.off.add(part)
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        print(f"trainscope: {self.owner} {part} failed and is switched off; training goes on ({text})",
              file=sys.stderr)


def _loggable(value):
    """value as run.log() takes it (a float, or a 1-element tensor, which run.log() copies
    from a device without a sync); None for what frameworks also put in their log dicts
    (strings, lists, None)."""
    import numbers
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value if value.numel() == 1 else None
    if isinstance(value, numbers.Number):  # bool, int, float, numpy scalars
        try:
            return float(value)
        except (TypeError, ValueError):  # complex
            return None
    return None


STEP_LOSS_TAG = "train/step_loss"  # data/roles.json: the loss role's first candidate


class _StepLoss:
    """The loss of every training step, taken from the losses the model or the framework
    computes for each micro-batch (no sync: detached tensors, averaged on their device), so
    that the doctor sees one point per step whatever the framework's logging cadence.

    `summed`: the micro-batch losses are already shares of the step's loss (transformers
    divides by the step's token count when it passes num_items_in_batch), so they add up;
    otherwise each is a micro-batch mean and the step's loss is their mean.
    """

    def __init__(self):
        self.losses = []
        self.summed = False

    def add(self, loss):
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(loss, torch.Tensor) or loss.numel() != 1 or loss.is_complex():
            return
        self.losses.append(loss.detach().reshape(()))

    def take(self):
        """The step's loss (a 0-d tensor), or None when no micro-batch gave one."""
        losses, self.losses = self.losses, []
        if not losses:
            return None
        import torch
        total = torch.stack([loss.float() for loss in losses]).sum()
        return total if self.summed else total / len(losses)


def _loss_of(output):
    """The loss in a model's or a training_step's output: output.loss (transformers'
    ModelOutput), output["loss"] (dicts), a 1-element tensor itself, or the first element of
    a tuple when that is a 1-element tensor (transformers with return_dict=False)."""
    torch = sys.modules.get("torch")
    if torch is None or output is None:
        return None
    if isinstance(output, torch.Tensor):
        return output if output.numel() == 1 else None
    if isinstance(output, dict):
        return output.get("loss")
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor) and output[0].numel() == 1:
        return output[0]
    return None
