"""run.watch(), run.data(), run.step(): what a PyTorch training loop gets by adding two lines.

The code lives in trainscope/_watch/, one idea a file (docs/architecture.md, "The watcher"):
clock (steps and phase times), hooks (attaching to the user's objects), plan (each tensor
family's plan and the per-step schedule), executors (host and device), device (the device
reductions), census (memory and live objects), watcher (when each family is measured),
models (several watched models: their namespaces and the run meta describing them),
optimizers (adopting an optimizer made after watch()), ops (the forward's functional ops).
This module keeps the names other modules and tests import.

Where the numbers come from (docs/watch.md says more):

- Gradients: before the real optimizer step, in its step pre-hook (torch 2.x), or in a
  wrapper around optimizer.step() (torch 1.13, and guard mode, which must be able to skip
  it). Weights and updates (w_t - w_{t-1}): after it. Without an optimizer, both at the
  end of each step (run.step() exit, or the next batch of run.data()).
- Activations: forward hooks on every module but the root and pure containers.
- On CPU the C++ core reads each tensor's memory in place (data_ptr, numel, dtype) and
  computes every statistic and the exponent histogram in one pass, without the GIL. On an
  accelerator the reductions run there (one flat buffer per step, segment reductions),
  are packed into one small tensor and copied to the host without blocking; they are
  logged when the copy has landed (a step or two later, with their own step number).
- No .item() per parameter, ever.

The monitor never stops the training: any error inside trainscope is reported once on
stderr (and as a warning), the part that failed is switched off, and training goes on.
"""

from trainscope._watch.clock import PhaseTimer, StepClock, StepContext, timed_data  # noqa: F401
from trainscope._watch.device import device_activation as _device_activation  # noqa: F401
from trainscope._watch.device import pack_device_stats, unpack_device_stats  # noqa: F401
from trainscope._watch.executors import global_norm as _global_norm  # noqa: F401
from trainscope._watch.plan import DEAD_UNITS as _DEAD_UNITS  # noqa: F401
from trainscope._watch.plan import DENSE_STEPS  # noqa: F401
from trainscope._watch.plan import DTYPE_CODES as _DTYPE_CODES  # noqa: F401
from trainscope._watch.plan import PLAIN as _PLAIN  # noqa: F401
from trainscope._watch.plan import SIGMOID as _SIGMOID  # noqa: F401
from trainscope._watch.plan import TANH as _TANH  # noqa: F401
from trainscope._watch.plan import first_tensor as _first_tensor  # noqa: F401
from trainscope._watch.watcher import Watcher  # noqa: F401
