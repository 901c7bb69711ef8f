"""ts.overfit_check(model, loss_fn, batch): trains a deep copy of the model on one batch and
says whether the loss falls towards zero: the seeds' sanity test, in one call."""

from __future__ import annotations

import copy
import math
import sys
import time
import types

from trainscope.checks import integer_pair, target_match

torch = None  # imported by overfit_check


class OverfitResult:
    """What overfit_check found. passed: the loss fell towards zero on the one batch."""

    def __init__(self, passed, verdict, losses, initial_loss, final_loss, steps, target_ratio, floor, problem=None,
                 lr=None, tried=()):
        self.passed = passed
        self.lr = lr                    # the learning rate of the attempt shown (None: the optimizer's own)
        self.tried = list(tried)        # every learning rate tried
        self.verdict = verdict
        self.losses = losses            # loss before each optimizer step, then after the last
        # final_loss: the lowest of the last tenth of `losses` (what the verdict judges).
        self.initial_loss = initial_loss
        self.final_loss = final_loss
        self.ratio = (final_loss / initial_loss if initial_loss and math.isfinite(initial_loss)
                      and math.isfinite(final_loss) else float("nan"))
        self.steps = steps
        self.target_ratio = target_ratio
        self.floor = floor
        self.problem = problem          # None, "nonfinite", "no_gradient", "negative", "targets_are_inputs"

    def __repr__(self):
        return (f"OverfitResult(passed={self.passed}, initial_loss={self.initial_loss:.6g}, "
                f"final_loss={self.final_loss:.6g}, ratio={self.ratio:.3g}, steps={self.steps})")

    def __str__(self):
        return self.verdict


def _is_trainscope(fn):
    """A hook or wrapper trainscope installed (the watcher, checks.py)."""
    owner = getattr(fn, "__self__", None)
    module = getattr(getattr(fn, "__func__", fn), "__module__", None) or ""
    if owner is not None and type(owner).__module__.startswith("trainscope"):
        return True
    return module.startswith("trainscope")


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _copy_without_trainscope(model):
    """A deep copy of the model without trainscope's hooks and wrappers: a watched model's
    hooks would record the copy's training into the run, and the optimizer/zero_grad
    wrappers would act on the original."""
    memo = {}
    for module in model.modules():
        for attr in _HOOK_DICTS:
            hooks = module.__dict__.get(attr)
            if hooks and any(_is_trainscope(h) for h in hooks.values()):
                memo[id(hooks)] = type(hooks)((k, h) for k, h in hooks.items() if not _is_trainscope(h))
    clone = copy.deepcopy(model, memo)
    for module in clone.modules():
        for attr, value in list(vars(module).items()):
            if isinstance(value, types.MethodType) and _is_trainscope(value.__func__):
                delattr(module, attr)
    return clone


def _split_batch(batch):
    """(call the model, targets) from (inputs, targets) or a dict with a labels key."""
    if isinstance(batch, dict):
        for key in ("labels", "targets", "target", "label", "y"):
            if key in batch:
                inputs = {k: v for k, v in batch.items() if k != key}
                return (lambda m: m(**inputs)), batch[key], inputs
        return (lambda m: m(**batch)), None, batch
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        inputs, targets = batch
        if isinstance(inputs, (tuple, list)):
            return (lambda m: m(*inputs)), targets, inputs
        if isinstance(inputs, dict):
            return (lambda m: m(**inputs)), targets, inputs
        return (lambda m: m(inputs)), targets, inputs
    raise TypeError("overfit_check: batch must be (inputs, targets) or a dict of model inputs with a "
                    f"'labels'/'targets' key, got {type(batch).__name__}"
                    + (f" of {len(batch)} items" if isinstance(batch, (tuple, list)) else ""))


def _make_optimizer(optimizer, params, lr):
    if optimizer is None:
        return torch.optim.Adam(params, lr=1e-3 if lr is None else lr)
    if isinstance(optimizer, torch.optim.Optimizer):
        # Same kind and settings, fresh state, on the copy's parameters.
        settings = dict(optimizer.defaults)
        if lr is not None:
            settings["lr"] = lr
        return type(optimizer)(params, **settings)
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        return optimizer(params, lr=1e-3 if lr is None else lr)
    if callable(optimizer):
        return optimizer(params)
    raise TypeError("overfit_check: optimizer must be an optimizer class, an optimizer instance (its type and "
                    f"settings are reused) or a function params -> optimizer, got {type(optimizer).__name__}")


def _loss_of(output, targets, loss_fn):
    """The loss of one forward. A model returning (logits, loss), as nanoGPT's does, gives
    its own loss when loss_fn is None, and its logits (the first element) to loss_fn."""
    pair = isinstance(output, (tuple, list)) and len(output) >= 2 and isinstance(output[0], torch.Tensor)
    if loss_fn is not None:
        return loss_fn(output[0] if pair else output, targets)
    if pair:
        for item in output[1:]:
            if isinstance(item, torch.Tensor) and item.numel() == 1:
                return item
        raise TypeError("overfit_check: loss_fn is None and the model's (logits, ...) output holds no scalar loss "
                        "(pass the targets to the model, e.g. batch=((x, y), y), or give loss_fn)")
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if loss is None:
        raise TypeError("overfit_check: loss_fn is None and the model's output has no 'loss'")
    return loss


def _copied_targets(inputs, targets):
    """The fraction of target positions equal to the inputs (target_match), when the batch
    has integer token inputs and integer targets of one size; else None."""
    candidates = list(inputs) if isinstance(inputs, (tuple, list)) else \
        list(inputs.values()) if isinstance(inputs, dict) else [inputs]
    pair = integer_pair(tuple(t for t in candidates if t is not targets) + (targets,)) \
        if isinstance(targets, torch.Tensor) else None
    if pair is None:
        return None
    copy_fraction, next_fraction = target_match(*pair)
    return copy_fraction if copy_fraction > next_fraction else None


def _sequence_targets(targets, inputs):
    """Token targets of a sequence model: integer targets with more elements than samples
    (B x T next-token predictions)."""
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.dim() == 0:
        return False
    first = inputs[0] if isinstance(inputs, (tuple, list)) and inputs else inputs
    samples = first.shape[0] if isinstance(first, torch.Tensor) and first.dim() > 0 else targets.shape[0]
    return targets.numel() > samples


def _fmt(x):
    return f"{x:.4g}"


def _train_on_one_batch(model, forward, targets, loss_fn, steps, make_optimizer):
    """Trains a copy; returns (losses, problem, detail, frozen parameter count)."""
    clone = _copy_without_trainscope(model)
    clone.train()
    params = [p for p in clone.parameters() if p.requires_grad]
    frozen = sum(1 for p in clone.parameters() if not p.requires_grad)
    opt = make_optimizer(params) if params else None
    losses = []
    for step in range(steps + 1):
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        loss = _loss_of(forward(clone), targets, loss_fn)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else ""
            raise TypeError(f"overfit_check: the loss must be a scalar tensor, got {type(loss).__name__}{shape}")
        value = float(loss.detach())
        losses.append(value)
        if not math.isfinite(value):
            return losses, "nonfinite", f"the loss became {value} at step {step}", frozen
        if step == steps:
            break  # the loss after the last step is measured, not trained on
        if opt is None or not loss.requires_grad:
            detail = ("no parameter requires a gradient (all frozen)" if opt is None else
                      "the loss does not depend on any trainable parameter (a detached output, .item()/numpy "
                      "in the forward, torch.no_grad, or every parameter frozen)")
            return losses, "no_gradient", detail, frozen
        loss.backward()
        opt.step()
    if min(losses) < -1e-6:
        return losses, "negative", f"the loss went negative ({_fmt(min(losses))})", frozen
    return losses, None, "", frozen


# Token targets of a sequence model (more targets than samples) pass at a tenth of the start.
SEQUENCE_TARGET_RATIO = 0.1

# Without a learning rate from the caller: 1e-3 (Adam's usual), then 1e-2, which small
# models need to memorise a batch within 100 steps; a bug fails at both.
_DEFAULT_LRS = (1e-3, 1e-2)


def overfit_check(model, loss_fn, batch, steps=100, lr=None, optimizer=None, *, target_ratio=0.01, floor=1e-3,
                  verbose=True):
    """Trains a deep copy of `model` on one batch for `steps` steps and says whether the loss
    falls towards zero. The model, its gradients, its optimizer and the RNG state are left
    as they were.

    batch: (inputs, targets) — inputs a tensor, a tuple (model(*inputs)) or a dict
    (model(**inputs)) — or a dict of model inputs whose 'labels'/'targets' entry is the
    target. loss_fn(output, targets); None: the output's own .loss / ["loss"].
    optimizer: None (Adam), an optimizer class, an optimizer instance (same type and
    settings, fresh state) or a function params -> optimizer. lr: None with None or a class
    tries lr 1e-3, then 1e-2 if the first does not pass (a fresh copy each time).
    Passed: the final loss (the lowest of the last tenth of the steps) is <= target_ratio x
    the initial loss (1 %; 10 % for the token targets of a sequence model, more targets than
    samples), or <= floor (1e-3, for losses that start near zero). A model returning
    (logits, loss) gives its own loss when loss_fn is None (batch=((x, y), y) calls
    model(x, y)), its logits to loss_fn otherwise. Integer targets equal to the integer
    inputs (an LM trained on its current token) fail: copying memorises anything. Returns an
    OverfitResult; prints its verdict on stderr unless verbose=False.
    """
    global torch
    import torch  # here, not at import: `import trainscope` stays free of torch (readers, CLI)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"overfit_check: expected a torch.nn.Module, got {type(model).__name__}")
    steps = int(steps)
    if steps < 1:
        raise ValueError(f"overfit_check: steps must be >= 1, got {steps}")
    forward, targets, inputs = _split_batch(batch)
    # B x T token targets: memorising hundreds of next-token predictions takes longer than
    # a few samples' labels; a tenth of the start in `steps` steps is a model that learns
    # (a healthy char-level GPT batch went 4.46 -> 0.295 in 100 steps).
    sequence = _sequence_targets(targets, inputs)
    if sequence and target_ratio == 0.01:
        target_ratio = SEQUENCE_TARGET_RATIO
    copied = _copied_targets(inputs, targets)
    escalate = lr is None and (optimizer is None or isinstance(optimizer, type))
    lrs = _DEFAULT_LRS if escalate else (lr,)
    devices = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
    started = time.perf_counter()
    attempts = []  # (lr, losses, problem, detail, frozen, final)
    with torch.random.fork_rng(devices=devices), torch.enable_grad():  # the user's RNG stream is untouched
        for attempt_lr in lrs:
            losses, problem, detail, frozen = _train_on_one_batch(
                model, forward, targets, loss_fn, steps, lambda params: _make_optimizer(optimizer, params, attempt_lr))
            # Adam on a memorised batch wobbles: the final loss is the lowest of the last tenth.
            final = min(losses[-max(1, len(losses) // 10):]) if problem is None else losses[-1]
            passed = problem is None and (final <= target_ratio * losses[0] or final <= floor)
            attempts.append((attempt_lr, losses, problem, detail, frozen, final, passed))
            if passed or problem in ("no_gradient", "negative") or len(losses) == 1:
                break  # another learning rate would not change these
    # The attempt to report: the one that passed, else the one that got lowest relative to its start.
    def rank(a):
        return (not a[6], a[2] is not None, a[5] / a[1][0] if a[1][0] and a[2] is None else math.inf)
    attempt_lr, losses, problem, detail, frozen, final, passed = min(attempts, key=rank)
    initial = losses[0]
    tried = ""
    if escalate and len(attempts) > 1:
        tried = " (tried lr " + ", ".join(f"{a[0]:g}" for a in attempts) + f"; lr {attempt_lr:g} shown)"
    elif escalate:
        tried = f" (lr {attempt_lr:g})"
    frozen_note = f"; {frozen} parameter tensors are frozen" if frozen else ""
    if copied is not None and copied >= 0.9 and problem is None:
        # A model copying its input memorises anything: passing proves nothing here.
        passed, problem = False, "targets_are_inputs"
        verdict = (f"overfit_check FAILED: the targets equal the inputs at {copied:.0%} of positions, so the loss "
                   f"went from {_fmt(initial)} to {_fmt(final)} by copying{tried}. A next-token target is the input "
                   "shifted by one (y = data[i+1:i+1+T] for x = data[i:i+T]); if the model shifts the labels "
                   "itself (Hugging Face causal LMs with labels=input_ids), this check cannot tell")
    elif problem == "nonfinite":
        verdict = (f"overfit_check FAILED: {detail} (start {_fmt(initial)}){tried}: lower the learning rate, and "
                   "look for log(0), division by zero or exp overflow in the model and the loss")
    elif problem == "no_gradient":
        verdict = (f"overfit_check FAILED: {detail}{frozen_note}: nothing can learn. Look at the forward and "
                   "the loss for a detach()")
    elif problem == "negative":
        verdict = (f"overfit_check FAILED: {detail}: a loss that should fall to zero cannot be negative; "
                   "NLLLoss fed probabilities instead of log-probabilities (a Softmax instead of LogSoftmax) "
                   "does this")
    elif passed:
        verdict = (f"overfit_check passed: on one batch the loss fell from {_fmt(initial)} to {_fmt(final)} "
                   f"({final / initial:.2%} of the start) in {steps} steps{tried}: the model and the loss can "
                   "learn. If training on the full data goes badly, look at the hyper-parameters (learning "
                   "rate, schedule, regularisation) and the data (labels, normalisation, shuffling)")
    else:
        tenth = max(1, len(losses) // 10)
        still_falling = len(losses) >= 4 * tenth and min(losses[-tenth:]) < 0.9 * min(losses[-2 * tenth:-tenth])
        verdict = (f"overfit_check FAILED: on one batch the loss went from {_fmt(initial)} to {_fmt(final)} "
                   f"({final / initial:.2%} of the start; needs <= {target_ratio:.0%} or <= {floor:g}) in {steps} "
                   f"steps{tried}{frozen_note}. "
                   + ("It was still falling at the end: run more steps before suspecting a bug. "
                      if still_falling else "")
                   + "A model should memorise one batch: look for a bug in the script (targets not matching "
                   "the inputs, a detached or reshaped output, frozen layers, a softmax fed to a loss that "
                   "applies its own, the wrong loss) or too little capacity")
    if verbose:
        print(f"trainscope: {verdict} [{time.perf_counter() - started:.2f} s]", file=sys.stderr)
    return OverfitResult(passed, verdict, losses, initial, final, steps, target_ratio, floor, problem,
                         lr=attempt_lr, tried=[a[0] for a in attempts])
