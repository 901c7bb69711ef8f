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
