"""FLOPs per module, counted from the shapes one forward pass sees.

    flops = ts.count_flops(model, example_inputs)
    flops.total_macs, flops.total_flops, flops.training_flops
    flops.modules        # [{name, type, flops, macs, params, training_flops, depth, calls}]
    print(flops)         # a table per module, like DeepSpeed's flops profiler

How: every aten operator the forward runs is seen through a TorchDispatchMode (torch 1.13
and 2.x both have it), so functional calls (F.linear, @, einsum, scaled_dot_product_attention)
count like modules do; forward pre/post hooks keep a stack of the modules being run, and an
operator's cost is added to every module on the stack (a module's numbers include its
children's).

Conventions (docs/perf.md says why):
- A MAC is one multiply-accumulate of a matrix operator: mm, addmm, bmm, baddbmm, mv, dot,
  convolution (transposed too), and the two matrix products of fused attention. FLOPs of a
  matrix operator = 2 x MACs.
- Elementwise operators cost FLOPs per element (table ELEMENTWISE_FLOPS below) and no MACs:
  bias and residual adds, activations, normalisations, softmax, pooling, reductions.
  Views, copies, indexing and embedding lookups cost nothing.
- total_flops = 2 x total_macs + elementwise FLOPs (forward only).
- training_flops = forward + backward, with the backward of a matrix operator 2 x its forward
  (the gradient of each of its two operands) and the backward of an elementwise operator 1 x
  its forward: 3 x matrix FLOPs + 2 x elementwise FLOPs.
"""

from __future__ import annotations

import math

import torch

try:  # torch >= 1.13
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # pragma: no cover - older torch
    TorchDispatchMode = None

__all__ = ["FlopCount", "count_flops", "transformer_flops_per_token"]


def _numel(shape):
    return int(math.prod(shape)) if shape is not None else 0


def _shape(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


# FLOPs per output element of the elementwise operators (one per arithmetic step).
_ONE_PER_ELEMENT = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "relu", "relu6", "hardtanh", "threshold", "leaky_relu",
    "prelu", "_prelu_kernel", "elu", "selu", "celu", "clamp", "clamp_min", "clamp_max", "sqrt", "rsqrt", "exp",
    "log", "log1p", "expm1", "sigmoid", "tanh", "gelu", "silu", "hardswish", "hardsigmoid", "mish", "softplus",
    "erf", "pow", "reciprocal", "maximum", "minimum", "where", "masked_fill", "sin", "cos", "square", "sign",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "cumsum", "floor", "round")
ELEMENTWISE_FLOPS = {name: 1 for name in _ONE_PER_ELEMENT}
ELEMENTWISE_FLOPS.update({
    "addcmul": 2, "addcdiv": 2, "lerp": 2,
    # max, subtract, exp, sum, divide (log_softmax: max, subtract, exp, sum, log-and-subtract)
    "_softmax": 5, "softmax": 5, "_safe_softmax": 5, "_log_softmax": 5, "log_softmax": 5,
    "upsample_bilinear2d": 4, "upsample_linear1d": 2, "upsample_trilinear3d": 8, "upsample_bicubic2d": 16,
})

# Operators that move or make data, or look it up: no arithmetic.
_FREE = frozenset((
    "view", "_unsafe_view", "_reshape_alias", "reshape", "permute", "transpose", "t", "expand", "unsqueeze",
    "squeeze", "select", "slice", "split", "split_with_sizes", "chunk", "unbind", "clone", "copy", "copy_",
    "detach", "contiguous", "_to_copy", "to", "alias", "as_strided", "cat", "stack", "index", "index_select",
    "gather", "embedding", "embedding_bag", "_embedding_bag", "native_dropout", "dropout", "bernoulli",
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "randn", "rand", "randint", "randn_like",
    "rand_like", "arange", "lift_fresh", "lift_fresh_copy", "fill", "fill_", "zero", "zero_", "constant_pad_nd",
    "flip", "roll", "repeat", "tril", "triu", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
    "logical_or", "_local_scalar_dense", "argmax", "argmin", "topk", "sort", "nonzero", "is_nonzero", "flatten",
    "unflatten", "narrow", "masked_select", "index_put", "index_put_", "scatter", "scatter_add", "set_",
    "resize_", "_unsafe_index", "unfold", "diagonal", "expand_as", "view_as", "type_as", "bitwise_not", "any", "all",
    "scalar_tensor", "_assert_async", "_has_compatible_shallow_copy_type", "native_dropout_backward", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "_shape_as_tensor", "isnan", "isinf", "isfinite", "detach_"))


class _Cost:
    __slots__ = ("macs", "elementwise")

    def __init__(self, macs=0, elementwise=0):
        self.macs = macs
        self.elementwise = elementwise


def _conv_cost(args, out):
    x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else None
    transposed = bool(args[6]) if len(args) > 6 else False
    kernel = _numel(weight.shape[2:])
    if transposed:
        # weight [C_in, C_out / groups, k...]: every input element meets C_out / groups x k
        # weights.
        macs = _numel(x.shape) * weight.shape[1] * kernel
    else:
        # weight [C_out, C_in / groups, k...]: every output element sums C_in / groups x k
        # products.
        macs = _numel(out.shape) * weight.shape[1] * kernel
    return _Cost(macs, _numel(out.shape) if bias is not None else 0)


def _attention_cost(q, k, v):
    # q [..., L, E], k [..., S, E], v [..., S, Ev]: scores (L x S x E) and the weighted sum
    # (L x S x Ev) per batch and head, and the softmax over the scores.
    batch = _numel(q.shape[:-2])
    length, embed = q.shape[-2], q.shape[-1]
    source, value_embed = k.shape[-2], v.shape[-1]
    scores = batch * length * source
    return _Cost(scores * embed + scores * value_embed, scores * (ELEMENTWISE_FLOPS["_softmax"] + 1))  # +1: scale


def _native_mha_cost(args, out):
    # torch._native_multi_head_attention(query, key, value, embed_dim, num_heads, qkv_weight,
    # qkv_bias, proj_weight, proj_bias, ...): the inference fast path of MultiheadAttention.
    query, key, value, embed_dim = args[0], args[1], args[2], int(args[3])
    batch = query.shape[0] if query.dim() == 3 else 1
    lq, lk = query.shape[-2], key.shape[-2]
    projections = batch * (lq + 2 * lk) * embed_dim * embed_dim + batch * lq * embed_dim * embed_dim
    attention = batch * lq * lk * embed_dim * 2
    biases = batch * (2 * lq + 2 * lk) * embed_dim
    return _Cost(projections + attention, biases + batch * lq * lk * (ELEMENTWISE_FLOPS["_softmax"] + 1))


def _matrix_cost(name, args, out):
    if name in ("mm", "_mm"):
        a, b = args[0], args[1]
        return _Cost(a.shape[0] * a.shape[1] * b.shape[1])
    if name == "addmm":
        a, b = args[1], args[2]
        return _Cost(a.shape[0] * a.shape[1] * b.shape[1], _numel(out.shape))
    if name == "bmm":
        a, b = args[0], args[1]
        return _Cost(a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2])
    if name == "baddbmm":
        a, b = args[1], args[2]
        return _Cost(a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], _numel(out.shape))
    if name == "addbmm":
        a, b = args[1], args[2]
        return _Cost(a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], _numel(out.shape))
    if name == "mv":
        return _Cost(_numel(args[0].shape))
    if name == "addmv":
        return _Cost(_numel(args[1].shape), _numel(out.shape))
    if name == "dot" or name == "vdot":
        return _Cost(_numel(args[0].shape))
    if name in ("convolution", "_convolution", "convolution_overrideable", "mkldnn_convolution",
                "cudnn_convolution", "_convolution_mode"):
        return _conv_cost(args, out)
    if name.startswith("_scaled_dot_product") or name in ("_flash_attention_forward", "_efficient_attention_forward"):
        return _attention_cost(args[0], args[1], args[2])
    if name == "_native_multi_head_attention":
        return _native_mha_cost(args, out)
    return None


def _first_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _norm_cost(name, args, out):
    # What a kernel must do per element: the statistics when it computes them (sum and sum of
    # squares: 2), normalising (subtract the mean, multiply by the inverse deviation: 2) and
    # the affine scale and shift (2) when the norm has a weight. A batch norm with running
    # statistics (eval) folds all of it into one multiply-add: 2.
    x = args[0]
    at = 2 if ("layer_norm" in name or "rms_norm" in name) else 1  # after normalized_shape, or right after x
    weight = args[at] if len(args) > at and isinstance(args[at], torch.Tensor) else None
    if "batch_norm" in name:
        flags = [a for a in args if isinstance(a, bool)]
        training = flags[0] if flags else "with_update" in name
        if "no_training" in name or "no_update" in name:
            training = False
        if not training:
            return _Cost(0, _numel(x.shape) * 2)
    return _Cost(0, _numel(x.shape) * (4 + (2 if weight is not None else 0)))


def _pool_cost(name, args, out):
    x, result = args[0], _first_tensor(out)
    if "adaptive" in name:
        return _Cost(0, _numel(x.shape))  # every input element is read into one output once
    kernel = args[1] if len(args) > 1 else None
    size = _numel(kernel) if isinstance(kernel, (list, tuple)) else int(kernel or 1)
    dims = 3 if "3d" in name else 2 if "2d" in name else 1
    if isinstance(kernel, (list, tuple)) and len(kernel) == 1:
        size = kernel[0] ** dims
    elif not isinstance(kernel, (list, tuple)):
        size = int(kernel) ** dims
    return _Cost(0, _numel(result.shape) * size)


def _op_cost(name, args, out):
    """The cost of one aten operator call, or None when it is not one trainscope counts."""
    cost = _matrix_cost(name, args, out)
    if cost is not None:
        return cost
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    if "batch_norm" in base or "layer_norm" in base or "group_norm" in base or "rms_norm" in base:
        if base.endswith("backward"):
            return None
        return _norm_cost(base, args, out)
    if "pool" in base and not base.endswith("backward"):
        return _pool_cost(base, args, out)
    if base in ELEMENTWISE_FLOPS:
        result = _first_tensor(out)
        return _Cost(0, _numel(result.shape) * ELEMENTWISE_FLOPS[base] if result is not None else 0)
    if base in ("sum", "mean", "amax", "amin", "max", "min", "var", "std", "norm", "linalg_vector_norm", "prod",
                "logsumexp"):
        x = _first_tensor(args)
        return _Cost(0, _numel(x.shape) if x is not None else 0)
    if base in ("nll_loss_forward", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy",
                "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss"):
        x = _first_tensor(args)
        return _Cost(0, _numel(x.shape) if x is not None else 0)
    return None


class FlopCount:
    """What count_flops() found: totals, one dict per module, the operators behind them."""

    def __init__(self, model_type, modules, by_op, uncounted):
        self.modules = modules
        root = modules[0] if modules else {"flops": 0, "macs": 0, "training_flops": 0, "params": 0}
        self.total_macs = root["macs"]
        self.total_flops = root["flops"]
        self.training_flops = root["training_flops"]
        self.elementwise_flops = root["flops"] - 2 * root["macs"]
        self.total_params = root["params"]
        self.model_type = model_type
        # operator -> {"calls", "macs", "flops"}; uncounted: operator -> calls of operators that
        # are neither counted nor known to be free (a gap in the table, worth a look).
        self.by_op = by_op
        self.uncounted = uncounted

    def module(self, name):
        for entry in self.modules:
            if entry["name"] == name:
                return entry
        raise KeyError(f"no module named {name!r} (names are model.named_modules()' names; the model itself is '')")

    def to_dict(self):
        return {"total_flops": self.total_flops, "total_macs": self.total_macs, "training_flops": self.training_flops,
                "elementwise_flops": self.elementwise_flops, "total_params": self.total_params,
                "modules": self.modules, "by_op": self.by_op, "uncounted": self.uncounted}

    def table(self, depth=None, top=None):
        """The modules as text: params, MACs, FLOPs, share of the model's FLOPs, training FLOPs.

        depth: the deepest level shown (0 = the model only); top: the largest N modules by
        FLOPs instead of the tree order."""
        rows = [m for m in self.modules if depth is None or m["depth"] <= depth]
        if top is not None:
            rows = sorted(rows[1:], key=lambda m: -m["flops"])[:top]
        total = self.total_flops or 1
        lines = [f"{'module':<44} {'type':<22} {'params':>10} {'MACs':>10} {'FLOPs':>10} {'%FLOPs':>7} "
                 f"{'train FLOPs':>11}"]
        for m in rows:
            name = ("  " * m["depth"] + (m["name"].rsplit(".", 1)[-1] if m["name"] else "(model)"))
            if top is not None:
                name = m["name"] or "(model)"
            lines.append(f"{name[:44]:<44} {m['type'][:22]:<22} {_human(m['params']):>10} {_human(m['macs']):>10} "
                         f"{_human(m['flops']):>10} {100.0 * m['flops'] / total:>6.1f}% {_human(m['training_flops']):>11}")
        lines.append(f"total: {_human(self.total_params)} params, {_human(self.total_macs)} MACs, "
                     f"{_human(self.total_flops)} FLOPs forward ({_human(self.elementwise_flops)} of them elementwise), "
                     f"{_human(self.training_flops)} FLOPs forward + backward")
        if self.uncounted:
            lines.append("not counted (no entry in trainscope's table): " +
                         ", ".join(f"{op} x{n}" for op, n in sorted(self.uncounted.items())))
        return "\n".join(lines)

    def __str__(self):
        return self.table()

    def __repr__(self):
        return (f"FlopCount({self.model_type}: {_human(self.total_macs)} MACs, {_human(self.total_flops)} FLOPs, "
                f"{_human(self.training_flops)} training FLOPs)")


def _human(n):
    n = float(n)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


if TorchDispatchMode is not None:
    class _CountingMode(TorchDispatchMode):
        def __init__(self, counter):
            super().__init__()
            self.counter = counter

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.counter.on_op(func, args, kwargs or {}, out)
            return out


class _Counter:
    def __init__(self, model):
        self.names = {}
        self.entries = {}
        for name, module in model.named_modules():
            if id(module) in self.names:
                continue  # a module registered twice counts under its first name
            self.names[id(module)] = name
            self.entries[name] = {"name": name, "type": type(module).__name__, "flops": 0, "macs": 0,
                                  "params": sum(p.numel() for p in module.parameters()),
                                  "training_flops": 0, "depth": name.count(".") + 1 if name else 0, "calls": 0}
        self.stack = []
        self.by_op = {}
        self.uncounted = {}
        self.outside = {"macs": 0, "flops": 0, "training_flops": 0}

    def enter(self, module, inputs):
        name = self.names.get(id(module))
        if name is not None:
            self.entries[name]["calls"] += 1
            self.stack.append(name)

    def leave(self, module, inputs, output):
        name = self.names.get(id(module))
        if name is not None and self.stack and self.stack[-1] == name:
            self.stack.pop()

    def on_op(self, func, args, kwargs, out):
        packet = getattr(func, "overloadpacket", func)
        name = getattr(packet, "__name__", str(func))
        try:
            cost = _op_cost(name, list(args) + list(kwargs.values()), out)
        except (IndexError, TypeError, AttributeError):
            cost = None  # an overload whose arguments are not the ones read above
        if cost is None:
            base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
            if base not in _FREE and name not in _FREE:
                self.uncounted[name] = self.uncounted.get(name, 0) + 1
            return
        flops = 2 * cost.macs + cost.elementwise
        training = 3 * 2 * cost.macs + 2 * cost.elementwise
        op = self.by_op.setdefault(name, {"calls": 0, "macs": 0, "flops": 0})
        op["calls"] += 1
        op["macs"] += cost.macs
        op["flops"] += flops
        targets = set(self.stack) or {""}  # a module run twice on the stack (recursion) counts once
        for target in targets:
            entry = self.entries.get(target)
            if entry is None:
                continue
            entry["macs"] += cost.macs
            entry["flops"] += flops
            entry["training_flops"] += training


def count_flops(model, example_inputs=(), kwargs=None):
    """Counts the FLOPs and MACs of one forward pass of model on example_inputs.

    example_inputs: a tensor, a tuple of positional arguments, or a dict of keyword
    arguments. The forward runs once, as model(*example_inputs, **kwargs), in the model's
    current train/eval mode and with gradients enabled (so torch keeps to the operators a
    training runs rather than its fused inference paths); nothing is changed in the model.
    Returns a FlopCount (see the module docstring for the conventions)."""
    if TorchDispatchMode is None:
        raise RuntimeError(f"count_flops needs torch >= 1.13 (torch.utils._python_dispatch.TorchDispatchMode); "
                           f"this is torch {torch.__version__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"count_flops(model, ...): model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, dict):
        args, kwargs = (), {**example_inputs, **(kwargs or {})}
    elif isinstance(example_inputs, (tuple, list)):
        args, kwargs = tuple(example_inputs), dict(kwargs or {})
    else:
        args, kwargs = (example_inputs,), dict(kwargs or {})
    counter = _Counter(model)
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(counter.enter))
        handles.append(module.register_forward_hook(counter.leave))
    try:
        with torch.enable_grad(), _CountingMode(counter):
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    modules = list(counter.entries.values())
    root = counter.entries.get("")
    if root is not None and root["flops"] == 0:
        # operators run outside any module's forward (none: the model's own forward is on the
        # stack whenever the model runs)
        pass
    return FlopCount(type(model).__name__, modules, counter.by_op, counter.uncounted)


def transformer_flops_per_token(n_params, n_layers, n_heads, head_dim, seq_len):
    """Training FLOPs per token of a decoder-only transformer by PaLM's formula (appendix B):
    6 N + 12 L H Q T, with N the parameters, L layers, H heads, Q the head dimension and T
    the sequence length. 6 N: a multiply-add per parameter per token, forward (2) and
    backward (4); 12 L H Q T: the two attention matrix products, over the full T x T."""
    return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len
