"""Checks before the first step: the model's modules and initial weights, and run.data()'s
first batches (targets against inputs). The one-batch over-fitting test is overfit.py.

check_model(model, loss_fn=None, batch_size=None) looks at the modules and their initial
weights (no forward pass) and returns ARCHITECTURE_WARNING findings, one per problem, each
naming the module (its name in named_modules()). run.watch() runs it and adds the findings
to the run; where a check needs what only a forward pass shows (the batch size a BatchNorm
sees; which module produced the output of a model with a custom forward), watch() looks at
the first forward once through hooks it removes again (FirstForwardProbe).
"""

from __future__ import annotations

import functools
import itertools
import sys

from trainscope._tags import family_tag

CODE = "ARCHITECTURE_WARNING"

# torch is imported on first use, so `import trainscope` stays free of it (readers, CLI).
torch = nn = None


def _ensure_torch():
    global torch, nn, _POOLS, _DROPOUTS, _BATCHNORMS, _NOT_NONLINEAR, _NORMS, _WEIGHT_LAYERS
    if nn is not None:
        return
    import torch as torch_module
    torch, nn = torch_module, torch_module.nn
    _POOLS = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3, nn.AvgPool1d: 1, nn.AvgPool2d: 2,
              nn.AvgPool3d: 3, nn.LPPool1d: 1, nn.LPPool2d: 2}
    _DROPOUTS = (nn.Dropout, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout) + (
        (nn.Dropout1d,) if hasattr(nn, "Dropout1d") else ())
    _BATCHNORMS = (nn.modules.batchnorm._BatchNorm,)  # BatchNorm1d/2d/3d, SyncBatchNorm, Lazy*
    # Between two Linear layers these leave the composition linear (or nearly: a norm's scale).
    _NOT_NONLINEAR = (nn.Dropout, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout, nn.Identity,
                      nn.Flatten, nn.Unflatten, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm,
                      nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm) + (
        (nn.Dropout1d,) if hasattr(nn, "Dropout1d") else ())
    _NORMS = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.LayerNorm, nn.GroupNorm)
    _WEIGHT_LAYERS = (nn.Linear, nn.Bilinear, nn.modules.conv._ConvNd)


# ---- what the loss function applies itself ----

# Loss kinds by class name (nn.Module losses, subclasses by their bases) or function name.
_LOSS_KINDS = {
    "CrossEntropyLoss": "cross_entropy", "cross_entropy": "cross_entropy",
    "NLLLoss": "nll", "nll_loss": "nll",
    "BCEWithLogitsLoss": "bce_logits", "binary_cross_entropy_with_logits": "bce_logits",
    "MSELoss": "regression", "mse_loss": "regression",
    "L1Loss": "regression", "l1_loss": "regression",
    "SmoothL1Loss": "regression", "smooth_l1_loss": "regression",
    "HuberLoss": "regression", "huber_loss": "regression",
}


def loss_kind(loss_fn):
    """'cross_entropy', 'nll', 'bce_logits', 'regression' or None (unknown or no loss)."""
    _ensure_torch()
    if loss_fn is None:
        return None
    while isinstance(loss_fn, functools.partial):
        loss_fn = loss_fn.func
    if isinstance(loss_fn, nn.Module):
        for cls in type(loss_fn).__mro__:
            kind = _LOSS_KINDS.get(cls.__name__)
            if kind:
                return kind
        return None
    return _LOSS_KINDS.get(getattr(loss_fn, "__name__", None))


def _loss_name(loss_fn):
    while isinstance(loss_fn, functools.partial):
        loss_fn = loss_fn.func
    return type(loss_fn).__name__ if isinstance(loss_fn, nn.Module) else getattr(loss_fn, "__name__", repr(loss_fn))


# ---- findings ----

def _finding(location, check, summary, actions, cause, confidence, evidence, severity="warning", step=0):
    return {"code": CODE, "severity": severity, "step": int(step), "last_step": int(step),
            "location": location or "model", "summary": summary,
            "evidence": dict(evidence, check=check),
            "causes": [{"id": cause, "confidence": confidence}], "actions": list(actions)}


def _pair(value, dims):
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    return (int(value),) * dims


def _pool_check(name, module, dims):
    kernel = _pair(module.kernel_size, dims)
    stride = _pair(module.stride if module.stride is not None else module.kernel_size, dims)
    if not any(s > k for s, k in zip(stride, kernel)):
        return None
    skipped = [s - k for s, k in zip(stride, kernel)]
    return _finding(
        name, "pool_stride_gt_kernel",
        f"{type(module).__name__} {name} has stride {module.stride} larger than its kernel {module.kernel_size}: "
        f"{max(skipped)} of every {max(stride)} input positions are never looked at",
        [f"Set stride <= kernel_size in {name} (stride = kernel_size gives non-overlapping windows)",
         "If the downsampling is wanted, use a strided convolution, which learns what to keep"],
        "pooling_skips_input", 0.9,
        {"module": name, "type": type(module).__name__, "kernel_size": list(kernel), "stride": list(stride)})


def _dropout_check(name, module):
    p = float(module.p)
    if p <= 0.5:
        return None
    return _finding(
        name, "dropout_above_half",
        f"{type(module).__name__} {name} drops {p:.0%} of its inputs: the layers after it see mostly noise "
        "and training slows down or stalls",
        [f"Use p <= 0.5 in {name} (0.1-0.3 for most layers; 0.5 is the classic maximum for wide FC layers)",
         "Check that p is the drop probability, not the keep probability (Keras/TF1 used keep_prob)"],
        "dropout_too_high", 0.7, {"module": name, "type": type(module).__name__, "p": p})


def _batchnorm_check(name, module, batch_size, source):
    if not module.training or batch_size is None or int(batch_size) != 1:
        return None
    return _finding(
        name, "batchnorm_batch_1",
        f"{type(module).__name__} {name} is in training mode with batch size 1: it normalises each sample "
        "by its own statistics (BatchNorm1d raises), and its running statistics will not match evaluation",
        ["Use GroupNorm or LayerNorm (independent of the batch size), or batches of at least 16-32",
         "If only this step has one sample, use drop_last=True in the DataLoader; for inference, call model.eval()"],
        "batchnorm_stats", 0.9,
        {"module": name, "type": type(module).__name__, "batch_size": int(batch_size), "batch_size_from": source})


def _is_constant(tensor):
    """True when every value of the tensor is equal (zero included). The first two values
    decide for any random init (one small read, ~2 us); only a suspect is read whole."""
    flat = tensor.detach().reshape(-1)
    if flat.numel() < 2:
        return False
    first, second = flat[:2].tolist()
    if first != second:  # NaN != NaN: a NaN init is not "constant" here
        return False
    return bool((flat == first).all())


def _constant_weight(module):
    """The value every weight of a Linear/Conv layer starts at, or None if they differ."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2 or \
            isinstance(weight, nn.parameter.UninitializedParameter) or not _is_constant(weight):
        return None
    return float(weight.detach().reshape(-1)[0])


def _init_checks(model, findings):
    """Constant initialisation that keeps units identical.

    One constant weight layer does not: the next layer's random weights send each of its
    units a different gradient, and zero-initialising a residual branch's or the output's
    last projection is a known good practice (Fixup, ReZero, adaLN-Zero). Units stay
    identical when two weight layers in a row start constant (each unit of the first gets
    the same gradient through the second's identical columns), the classic "all-zero init"
    fault. Layers follow registration order; free parameters (position embeddings, class
    tokens), embeddings, biases and norm scales may start constant and are not judged.
    """
    run = []  # consecutive constant weight layers: (name, value, shape)

    def close_run():
        if len(run) >= 2:
            first = run[0]
            names = [n or "model" for n, _, _ in run]
            values = sorted({v for _, v, _ in run})
            what = "zero" if values == [0.0] else "constant"
            findings.append(_finding(
                first[0] or "model", "constant_init",
                f"{len(run)} weight layers in a row start {what} ({', '.join(names)}): their units compute the "
                "same thing and receive the same gradient, so they never become different",
                [f"Initialise {names[0]}.weight and the layers after it randomly: nn.init.kaiming_normal_ (ReLU) "
                 "or nn.init.xavier_uniform_ (tanh/sigmoid)",
                 "Look for a nn.init.zeros_/constant_ or a .fill_() on these weights"],
                "constant_init", 0.9,
                {"module": first[0] or "model", "parameter": f"{first[0]}.weight" if first[0] else "weight",
                 "layers": names, "values": values, "value": first[1], "shape": list(first[2])}))
        run.clear()

    for name, module in model.named_modules():
        if not isinstance(module, _WEIGHT_LAYERS):
            continue
        value = _constant_weight(module)
        if value is None:
            close_run()
        else:
            run.append((name, value, tuple(module.weight.shape)))
    close_run()


def _sequence_leaves(seq):
    """The modules of an nn.Sequential in execution order, nested Sequentials flattened."""
    out = []
    for child_name, child in seq.named_children():
        if type(child) is nn.Sequential:
            out.extend((f"{child_name}.{n}", m) for n, m in _sequence_leaves(child))
        else:
            out.append((child_name, child))
    return out


def _linear_chain_checks(prefix, seq, findings):
    previous = None  # (name, module) of the last Linear with nothing nonlinear since
    between = []     # the types passed since it
    for rel, module in _sequence_leaves(seq):
        name = f"{prefix}.{rel}" if prefix else rel
        if isinstance(module, nn.Linear):
            if previous is not None:
                first_name, first = previous
                rank = min(first.in_features, first.out_features, module.out_features)
                findings.append(_finding(
                    name, "linear_after_linear",
                    f"Linear {name} follows Linear {first_name} with no nonlinearity between: together they are one "
                    f"linear map ({first.in_features} -> {module.out_features}, rank <= {rank}), so the extra layer "
                    "adds parameters but no expressive power",
                    [f"Put an activation (nn.ReLU, nn.GELU) between {first_name} and {name}",
                     "If the low-rank factorisation is deliberate (a bottleneck), ignore this warning"],
                    "collapsed_linear", 0.7,
                    {"module": name, "previous": first_name, "between": between,
                     "in_features": first.in_features, "hidden": first.out_features,
                     "out_features": module.out_features, "order_from": "nn.Sequential order"}))
            previous, between = (name, module), []
        elif previous is not None and isinstance(module, _NOT_NONLINEAR):
            between.append(type(module).__name__)
        else:
            previous = None


def static_final_module(model):
    """(name, module) of the module that produces the output, when registration order
    says so honestly: nn.Sequential all the way down its last children. Else None."""
    _ensure_torch()
    name, node = "", model
    while type(node) is nn.Sequential:
        children = list(node.named_children())
        if not children:
            return None
        child_name, node = children[-1]
        name = f"{name}.{child_name}" if name else child_name
    if node is model or any(True for _ in node.children()):
        return None  # a custom module: its forward decides what comes out
    return name, node


def final_activation_check(name, module, loss_fn, order_from):
    """The final module against the loss that consumes its output; None when they fit."""
    _ensure_torch()
    kind = loss_kind(loss_fn)
    if kind is None:
        return None
    act = type(module).__name__
    loss = _loss_name(loss_fn)
    evidence = {"module": name, "type": act, "loss": loss, "final_module_from": order_from}
    if isinstance(module, nn.Softmax) and kind in ("cross_entropy", "bce_logits"):
        applies = "log_softmax" if kind == "cross_entropy" else "sigmoid"
        return _finding(
            name, "softmax_into_loss",
            f"the model ends in Softmax ({name}) and {loss} applies {applies} itself: the loss sees probabilities "
            "as logits, its gradients shrink and it cannot go below a floor well above zero",
            [f"Remove {name} and feed the raw logits to {loss}; apply softmax only for predictions",
             "Or keep the Softmax and use NLLLoss on torch.log(probabilities + eps) (less stable)"],
            "double_softmax", 0.9, evidence)
    if isinstance(module, nn.Softmax) and kind == "nll":
        return _finding(
            name, "softmax_into_nll",
            f"the model ends in Softmax ({name}) but {loss} wants log-probabilities: the loss is -p, not -log p "
            "(negative, and it barely pushes wrong classes)",
            [f"Replace {name} by nn.LogSoftmax(dim=...)",
             f"Or remove {name} and use nn.CrossEntropyLoss on the logits"],
            "double_softmax", 0.9, evidence)
    if isinstance(module, nn.LogSoftmax) and kind == "cross_entropy":
        # log_softmax is idempotent: the loss value and gradients are those of NLLLoss.
        return _finding(
            name, "log_softmax_into_cross_entropy",
            f"the model ends in LogSoftmax ({name}) and {loss} applies log_softmax again: harmless "
            "(log_softmax of log-probabilities changes nothing) but redundant",
            [f"Use nn.NLLLoss with {name}, or remove {name} and keep {loss}"],
            "double_softmax", 0.5, evidence, severity="info")
    if isinstance(module, (nn.Sigmoid, nn.Softmax)) and kind == "bce_logits":
        return _finding(
            name, "sigmoid_into_bce_with_logits",
            f"the model ends in Sigmoid ({name}) and {loss} applies sigmoid itself: predictions are squeezed "
            "into (0.5, 0.73) and the loss cannot fall towards zero",
            [f"Remove {name} and feed logits to {loss}; apply torch.sigmoid only for predictions",
             f"Or keep {name} and use nn.BCELoss (less stable)"],
            "double_softmax", 0.9, evidence)
    if isinstance(module, (nn.ReLU, nn.ReLU6)) and kind in ("cross_entropy", "bce_logits"):
        return _finding(
            name, "relu_before_logits",
            f"the model ends in {act} ({name}) right before {loss}: logits are clipped at 0, so no class can be "
            "pushed below the others and units stuck at 0 get no gradient",
            [f"Remove {name}: the last layer's output should be the raw logits"],
            "output_activation_mismatch", 0.85, evidence)
    if kind == "regression" and isinstance(module, (nn.Sigmoid, nn.Hardsigmoid, nn.Tanh, nn.Hardtanh, nn.ReLU,
                                                       nn.ReLU6, nn.Softplus)):
        bounded = {"Sigmoid": "(0, 1)", "Hardsigmoid": "[0, 1]", "Tanh": "(-1, 1)", "Hardtanh": "[-1, 1]",
                   "ReLU": "[0, inf)", "ReLU6": "[0, 6]", "Softplus": "(0, inf)"}.get(act, "a bounded range")
        evidence["output_range"] = bounded
        # Info, not warning: with targets inside the range (pixels in [0, 1], counts >= 0)
        # it is a deliberate choice; only the targets can tell.
        return _finding(
            name, "bounded_output_into_regression",
            f"the model ends in {act} ({name}), whose outputs lie in {bounded}, and is trained with {loss}: "
            "targets outside that range can never be reached (and the gradient vanishes near its bounds)",
            [f"If the targets are not all in {bounded}, remove {name} (a regression head is usually linear)",
             "If they are (e.g. pixels in [0, 1]), this is fine; for classification use BCEWithLogitsLoss "
             "or CrossEntropyLoss instead"],
            "output_activation_mismatch", 0.5, evidence, severity="info")
    return None


def check_model(model, loss_fn=None, batch_size=None):
    """Static checks of a torch.nn.Module: a list of finding dicts (DESIGN.md JSON form,
    code ARCHITECTURE_WARNING), one per problem, each naming the module.

    loss_fn: the loss the outputs go to (an nn.Module or a torch.nn.functional function);
    without it the final-activation checks are not made (the loss decides what is wrong).
    batch_size: the training batch size, for the BatchNorm-with-batch-1 check.
    No forward pass is run; the final module is known only for nn.Sequential chains here
    (run.watch() learns it from the first forward for other models).
    """
    _ensure_torch()
    if not isinstance(model, nn.Module):
        raise TypeError(f"check_model: expected a torch.nn.Module, got {type(model).__name__}")
    findings = []
    nested = set()  # ids of Sequentials inside a Sequential: their chain is judged with the outer one
    for name, module in model.named_modules():
        cls = type(module)
        dims = _POOLS.get(cls)
        if dims is not None:
            found = _pool_check(name, module, dims)
            if found:
                findings.append(found)
        elif isinstance(module, _DROPOUTS):
            found = _dropout_check(name, module)
            if found:
                findings.append(found)
        elif batch_size is not None and isinstance(module, _BATCHNORMS):
            found = _batchnorm_check(name, module, batch_size, "batch_size=")
            if found:
                findings.append(found)
        elif cls is nn.Sequential:
            nested.update(id(child) for child in module.children() if type(child) is nn.Sequential)
            if id(module) not in nested:
                _linear_chain_checks(name, module, findings)
        elif cls is nn.MultiheadAttention and float(module.dropout) > 0.5:
            findings.append(_finding(
                name, "dropout_above_half",
                f"MultiheadAttention {name} drops {module.dropout:.0%} of its attention weights",
                [f"Use dropout <= 0.5 in {name} (0.0-0.1 is usual for attention)"],
                "dropout_too_high", 0.7, {"module": name, "type": "MultiheadAttention", "p": float(module.dropout)}))
    _init_checks(model, findings)
    if loss_fn is not None:
        final = static_final_module(model)
        if final is not None:
            found = final_activation_check(final[0], final[1], loss_fn,
                                           "registration order (the last module of nn.Sequential)")
            if found:
                findings.append(found)
    return findings


# ---- run.watch(): static checks now, the forward-dependent ones at the first forward ----

class FirstForwardProbe:
    """Hooks for the first training forward (grad enabled, model in training mode), removed
    when it ends: the batch size each BatchNorm in training mode sees (dim 0 of its input,
    BatchNorm's own convention; judged at once, since BatchNorm1d raises on one sample), and
    the leaf module whose output tensor is the model's output (when the forward returns it
    as is; anything else, e.g. a functional op after the last module, is not guessed)."""

    def __init__(self, model, loss_fn, report, fail, is_closed, batchnorm=True):
        self.loss_fn = loss_fn
        self.report = report        # called with a list of findings
        self.fail = fail            # called with an exception (reported once by the caller)
        self.is_closed = is_closed  # the run has finished: remove the hooks, say nothing
        self.handles = []
        self.bn_judged = set()      # BatchNorm module names already judged
        self.last_leaf = None       # (name, module, output) of the leaf that ran last
        watch_final = loss_kind(loss_fn) is not None and static_final_module(model) is None
        for name, module in model.named_modules():
            if batchnorm and isinstance(module, _BATCHNORMS):
                self.handles.append(module.register_forward_pre_hook(self._bn_hook(name)))
            elif watch_final and module is not model and not any(True for _ in module.children()):
                self.handles.append(module.register_forward_hook(self._leaf_hook(name)))
        if self.handles:
            self.handles.append(model.register_forward_hook(self._end))

    def _bn_hook(self, name):
        def hook(module, args):
            if not module.training or name in self.bn_judged:
                return
            self.bn_judged.add(name)
            try:
                from trainscope.watch import _first_tensor  # torch is loaded by now
                x = _first_tensor(args)
                if x is None or x.dim() < 1 or self.is_closed():
                    return
                found = _batchnorm_check(name, module, int(x.shape[0]), "the first forward (dim 0 of its input)")
                if found:
                    self.report([found])
            except Exception as error:  # the training goes on
                self.fail(error)
        return hook

    def _leaf_hook(self, name):
        def hook(module, args, output):
            self.last_leaf = (name, module, output)
        return hook

    def _end(self, model, args, output):
        last, self.last_leaf = self.last_leaf, None
        if not (torch.is_grad_enabled() and model.training) and not self.is_closed():
            return  # an evaluation forward: wait for the first training one
        self.remove()
        if self.is_closed():
            return
        try:
            if last is not None and isinstance(output, torch.Tensor) and last[2] is output:
                found = final_activation_check(last[0], last[1], self.loss_fn,
                                               "the first forward (its output is the model's output)")
                if found:
                    self.report([found])
        except Exception as error:  # the training goes on
            self.fail(error)

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []


def watch_checks(run, model, loss_fn=None, batch_size=None):
    """What run.watch() calls: adds check_model's findings to the run now, and those of the
    first forward when it happens. Never raises: a failure is reported once."""
    failed = []

    def fail(error):
        if not failed:
            failed.append(error)
            print(f"trainscope: model checks failed, training goes on ({type(error).__name__}: {error})",
                  file=sys.stderr)

    def report(findings):
        step = run._step
        for finding in findings:
            finding["step"] = finding["last_step"] = step
            run._add_finding(finding)

    try:
        _ensure_torch()
        report(check_model(model, loss_fn=loss_fn, batch_size=batch_size))
        if getattr(model, "_orig_mod", None) is not None:
            return None  # torch.compile'd: hooks inside the graph would break it (as watch.py does)
        # batch_size given: BatchNorm was judged above; only a custom model's final module is left.
        probe = FirstForwardProbe(model, loss_fn, report, fail, lambda: run._finished, batchnorm=batch_size is None)
        return probe if probe.handles else None
    except Exception as error:
        fail(error)
    return None


# ---- targets against inputs (run.data) ----

# How many of run.data()'s first batches are compared: enough to see a pattern, and free
# after that (a comparison costs two passes over the batch's integer tensors).
TARGET_CHECK_BATCHES = 20
_TARGET_KEYS = ("labels", "targets", "target", "label", "y")
_INPUT_KEYS = ("input_ids", "inputs", "input", "idx", "x", "tokens", "src")


def integer_pair(batch):
    """(inputs, targets) when a batch holds integer token inputs and integer targets of the
    same number of elements (a language model's (x, y)); else None."""
    _ensure_torch()
    is_int = lambda t: isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool and t.numel() > 1
    if isinstance(batch, dict):
        target = next((batch[k] for k in _TARGET_KEYS if k in batch and is_int(batch[k])), None)
        source = next((batch[k] for k in _INPUT_KEYS if k in batch and is_int(batch[k])), None)
    elif isinstance(batch, (tuple, list)):
        ints = [t for t in batch if is_int(t)]
        source, target = (ints[0], ints[-1]) if len(ints) >= 2 else (None, None)
    else:
        return None
    if source is None or target is None or source is target or source.numel() != target.numel():
        return None
    return source, target


def target_match(source, target):
    """(copy, next): the fraction of target positions equal to the input at the same
    position, and the largest fraction equal to the input one position later along any
    dimension (a next-token target). An honest next-token target has copy ~ the rate of
    repeated tokens and next ~ 1; a target that is the input has copy = 1."""
    source = source.detach()
    target = target.detach().reshape(source.shape)
    copy_fraction = float((source == target).float().mean())
    next_fraction = 0.0
    for dim in range(source.dim()):
        n = source.shape[dim]
        if n < 2:
            continue
        later = source.narrow(dim, 1, n - 1)
        same = target.narrow(dim, 0, n - 1)
        next_fraction = max(next_fraction, float((later == same).float().mean()))
    return copy_fraction, next_fraction


def batch_target_check(run, iterable):
    """iterable's batches; for the first TARGET_CHECK_BATCHES that hold integer inputs and
    integer targets of one size, logs data/target_copy_fraction and
    data/target_next_fraction (target_match) at the batch's step. The doctor's TARGET_LEAK
    reads them beside the loss (docs/doctor.md). Never raises into the loop. The batches
    after the checked ones come from the iterator itself (itertools.chain): no Python frame
    a batch once the check is done."""
    iterator = iter(iterable)
    return itertools.chain(_checked_batches(run, iterator), iterator)


def _checked_batches(run, iterator):
    """The first batches of iterator, each checked, until TARGET_CHECK_BATCHES were or one is
    not a token batch."""
    for checked, batch in enumerate(iterator, start=1):
        stop = checked >= TARGET_CHECK_BATCHES
        try:
            pair = integer_pair(batch)
            if pair is None:
                stop = True  # not a token batch: stop looking
            else:
                copy_fraction, next_fraction = target_match(*pair)
                clock = run._clock
                step = run._step + (1 if clock is not None and clock.pending else 0)
                run._recorder.log_scalar(family_tag("data", "target_copy_fraction"), copy_fraction, step)
                run._recorder.log_scalar(family_tag("data", "target_next_fraction"), next_fraction, step)
        except Exception as error:
            stop = True
            print(f"trainscope: the target check of run.data() failed, training goes on "
                  f"({type(error).__name__}: {error})", file=sys.stderr)
        yield batch
        if stop:
            return
