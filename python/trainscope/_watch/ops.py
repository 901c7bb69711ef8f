"""The functional ops a model's forward calls (meta functional_ops): F.softmax, torch.sigmoid,
x.log(), ... that no module's class names, so the doctor can tell a hand-written softmax or
log from their absence. Seen in one forward (the first measured training forward) under a
torch function mode, which every torch call of that forward goes through; the mode is then
left, so later forwards pay nothing."""

from __future__ import annotations

try:
    from torch.overrides import TorchFunctionMode
except ImportError:  # an older torch: no function modes, no functional_ops
    TorchFunctionMode = None


class OpsRecorder:
    """Collects the names of the torch functions called while it is on (start() .. stop()),
    leaving out trainscope's own calls (made inside its hooks: self_time.depth > 0) and
    attribute reads (Tensor.shape's __get__, ...)."""

    def __init__(self, self_time):
        self.names = set()
        self._mode = None
        self._self_time = self_time

    @staticmethod
    def available():
        return TorchFunctionMode is not None

    def start(self):
        recorder = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if not recorder._self_time.depth:
                    name = getattr(func, "__name__", None)
                    if isinstance(name, str) and not name.startswith("_"):
                        recorder.names.add(name)
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()

    def stop(self):
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
