"""What one node of a Dynamo FX graph computes, in one normalised form the backend's rules read.

`describe(node, modules)` gives a `Call`: the op's name as the backend knows it ("conv2d", "add",
"layer_norm", ...) and its arguments by name with torch's defaults filled in, whichever way the graph
spells it: a call_function (`torch.conv2d`, `F.relu`, `operator.iadd`), a call_method (`x.relu_()`,
`x.softmax(-1)`) or a call_module (`nn.Conv2d`, `nn.BatchNorm2d`: the module's parameters become
arguments). A node it does not know gives a reason in words instead (views are named as such: they
stay torch ops and copy nothing). Tensor arguments stay FX nodes (or a module's tensors); the rules
in fusion.py decide what may run on cuopjit.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from .fused_attention import attention as fused_attention

_REQUIRED = object()


def _sig(text: str) -> tuple[tuple[str, Any], ...]:
    """'input, bias=None, stride=1' -> (('input', required), ('bias', None), ('stride', 1))."""
    params = []
    for part in text.split(","):
        name, _, default = part.strip().partition("=")
        params.append((name, ast.literal_eval(default) if default else _REQUIRED))
    return tuple(params)


SIGNATURES = {name: _sig(text) for name, text in {
    "conv2d": "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1",
    "batch_norm": "input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5",
    "relu": "input, inplace=False", "silu": "input, inplace=False", "gelu": "input, approximate='none'",
    "sigmoid": "input", "tanh": "input", "neg": "input",
    "hardtanh": "input, min_val=-1.0, max_val=1.0, inplace=False", "relu6": "input, inplace=False",
    "add": "input, other, alpha=1", "sub": "input, other, alpha=1", "mul": "input, other",
    "div": "input, other, rounding_mode=None",
    "linear": "input, weight, bias=None", "matmul": "input, other", "bmm": "input, mat2",
    "baddbmm": "input, batch1, batch2, beta=1, alpha=1",
    "softmax": "input, dim=None, _stacklevel=3, dtype=None", "softmax_t": "input, dim, dtype=None",
    "layer_norm": "input, normalized_shape, weight=None, bias=None, eps=1e-5",
    "max_pool2d": "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False",
    "avg_pool2d": "input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
                  "divisor_override=None",
    "adaptive_avg_pool2d": "input, output_size",
    "dropout": "input, p=0.5, training=True, inplace=False",
    "encoder_layer": "src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, "
                     "norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, "
                     "ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None",
    "sdpa": "query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False",
    "attention": "query, key, value, scale=None, causal=False, heads_last=False",
}.items()}
ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "neg", "relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh",
                         "batch_norm"})

# target -> (op, signature, in place)
FUNCTIONS: dict[Any, tuple[str, str, bool]] = {
    torch.conv2d: ("conv2d", "conv2d", False), F.batch_norm: ("batch_norm", "batch_norm", False),
    F.relu: ("relu", "relu", False), torch.relu: ("relu", "relu", False), torch.relu_: ("relu", "relu", True),
    F.relu_: ("relu", "relu", True), F.gelu: ("gelu", "gelu", False), F.silu: ("silu", "silu", False),
    torch.sigmoid: ("sigmoid", "sigmoid", False), F.sigmoid: ("sigmoid", "sigmoid", False),
    torch.tanh: ("tanh", "tanh", False), F.tanh: ("tanh", "tanh", False),
    F.hardtanh: ("hardtanh", "hardtanh", False), F.hardtanh_: ("hardtanh", "hardtanh", True),
    F.relu6: ("hardtanh", "relu6", False),
    torch.neg: ("neg", "neg", False), operator.neg: ("neg", "neg", False),
    operator.add: ("add", "add", False), torch.add: ("add", "add", False), operator.iadd: ("add", "add", True),
    operator.sub: ("sub", "sub", False), torch.sub: ("sub", "sub", False), operator.isub: ("sub", "sub", True),
    operator.mul: ("mul", "mul", False), torch.mul: ("mul", "mul", False), operator.imul: ("mul", "mul", True),
    operator.truediv: ("div", "div", False), torch.div: ("div", "div", False),
    operator.itruediv: ("div", "div", True),
    F.linear: ("linear", "linear", False), torch.matmul: ("matmul", "matmul", False),
    operator.matmul: ("matmul", "matmul", False), torch.bmm: ("bmm", "bmm", False),
    torch.baddbmm: ("baddbmm", "baddbmm", False),
    F.softmax: ("softmax", "softmax", False), torch.softmax: ("softmax", "softmax_t", False),
    F.layer_norm: ("layer_norm", "layer_norm", False),
    F.max_pool2d: ("max_pool2d", "max_pool2d", False), F.avg_pool2d: ("avg_pool2d", "avg_pool2d", False),
    F.adaptive_avg_pool2d: ("adaptive_avg_pool2d", "adaptive_avg_pool2d", False),
    F.dropout: ("dropout", "dropout", False),
    torch._transformer_encoder_layer_fwd: ("encoder_layer", "encoder_layer", False),
    F.scaled_dot_product_attention: ("sdpa", "sdpa", False),
    fused_attention: ("attention", "attention", False),
}
_IN_PLACE_OPERATORS = (operator.iadd, operator.isub, operator.imul, operator.itruediv)
_METHOD_OPS = ("relu", "sigmoid", "tanh", "neg", "add", "sub", "mul", "div")
METHODS: dict[str, tuple[str, str, bool]] = {
    **{m: (m, m, False) for m in _METHOD_OPS}, **{m + "_": (m, m, True) for m in _METHOD_OPS},
    "matmul": ("matmul", "matmul", False), "bmm": ("bmm", "bmm", False), "baddbmm": ("baddbmm", "baddbmm", False),
    "softmax": ("softmax", "softmax_t", False),
}
VIEWS = frozenset({"flatten", "view", "reshape", "permute", "transpose", "contiguous", "unsqueeze", "squeeze",
                   "expand", "t", "unflatten", "chunk", "split", "getitem", "narrow", "select", "size", "view_as",
                   "reshape_as", "expand_as", "movedim", "unbind", "Flatten", "Identity", "type_as", "float",
                   "double", "to"})


@dataclass
class Call:
    """One node as an op: `args` by the signature's names (tensors as FX nodes or module tensors)."""
    op: str
    node: fx.Node
    args: dict[str, Any]
    inplace: bool = False
    notes: list[str] = field(default_factory=list)


def bind(signature: str, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Positional and keyword arguments by name, defaults filled in; None when they do not fit."""
    params = SIGNATURES[signature]
    if len(args) > len(params) or any(k not in dict(params) for k in kwargs):
        return None
    out = {name: value for (name, _), value in zip(params, args)}
    for name, default in params[len(args):]:
        value = kwargs.get(name, default)
        if value is _REQUIRED:
            return None
        out[name] = value
    return out


def _conv(m: nn.Conv2d, x: Any) -> tuple[str, dict] | str:
    if m.padding_mode != "zeros":
        return f"Conv2d with padding_mode={m.padding_mode!r} (cuopjit pads with zeros)"
    return "conv2d", dict(input=x, weight=m.weight, bias=m.bias, stride=m.stride, padding=m.padding,
                          dilation=m.dilation, groups=m.groups)


def _bn(m: nn.modules.batchnorm._BatchNorm, x: Any) -> tuple[str, dict]:
    return "batch_norm", dict(input=x, running_mean=m.running_mean, running_var=m.running_var, weight=m.weight,
                              bias=m.bias, training=m.training or m.running_mean is None, momentum=m.momentum,
                              eps=m.eps)


MODULES: dict[type, Callable[[Any, Any], tuple[str, dict] | str]] = {
    nn.Conv2d: _conv, nn.BatchNorm1d: _bn, nn.BatchNorm2d: _bn,
    nn.ReLU: lambda m, x: ("relu", dict(input=x, inplace=m.inplace)),
    nn.GELU: lambda m, x: ("gelu", dict(input=x, approximate=m.approximate)),
    nn.SiLU: lambda m, x: ("silu", dict(input=x, inplace=m.inplace)),
    nn.Sigmoid: lambda m, x: ("sigmoid", dict(input=x)), nn.Tanh: lambda m, x: ("tanh", dict(input=x)),
    nn.Hardtanh: lambda m, x: ("hardtanh", dict(input=x, min_val=m.min_val, max_val=m.max_val, inplace=m.inplace)),
    nn.Linear: lambda m, x: ("linear", dict(input=x, weight=m.weight, bias=m.bias)),
    nn.Softmax: lambda m, x: ("softmax", dict(input=x, dim=m.dim, dtype=None)),
    nn.LayerNorm: lambda m, x: ("layer_norm", dict(input=x, normalized_shape=tuple(m.normalized_shape),
                                                    weight=m.weight, bias=m.bias, eps=m.eps)),
    nn.MaxPool2d: lambda m, x: ("max_pool2d", dict(input=x, kernel_size=m.kernel_size, stride=m.stride,
                                                    padding=m.padding, dilation=m.dilation, ceil_mode=m.ceil_mode,
                                                    return_indices=m.return_indices)),
    nn.AvgPool2d: lambda m, x: ("avg_pool2d", dict(input=x, kernel_size=m.kernel_size, stride=m.stride,
                                                    padding=m.padding, ceil_mode=m.ceil_mode,
                                                    count_include_pad=m.count_include_pad,
                                                    divisor_override=m.divisor_override)),
    nn.AdaptiveAvgPool2d: lambda m, x: ("adaptive_avg_pool2d", dict(input=x, output_size=m.output_size)),
    nn.Dropout: lambda m, x: ("dropout", dict(input=x, p=m.p, training=m.training, inplace=m.inplace)),
}


def target_name(node: fx.Node, modules: Mapping[str, Any]) -> str:
    """How the report names what a node calls: 'conv2d', 'Tensor.relu_', 'nn.Conv2d', 'operator.iadd'."""
    if node.op == "call_module":
        return "nn." + type(modules[node.target]).__name__
    if node.op == "call_method":
        return "Tensor." + node.target
    module = getattr(node.target, "__module__", None) or ""
    name = getattr(node.target, "__name__", str(node.target))
    return f"operator.{name}" if module == "_operator" else name


def _is_view(node: fx.Node, modules: Mapping[str, Any]) -> bool:
    name = target_name(node, modules).split(".")[-1]
    return name in VIEWS


def describe(node: fx.Node, modules: Mapping[str, Any]) -> Call | str:
    """The node as a Call, or why the backend leaves it to torch."""
    name = target_name(node, modules)
    if node.op == "call_module":
        maker = MODULES.get(type(modules[node.target]))
        if maker is None or len(node.args) != 1 or node.kwargs:
            return "a view: stays torch (no copy)" if _is_view(node, modules) else f"{name} is not run by cuopjit"
        made = maker(modules[node.target], node.args[0])
        if isinstance(made, str):
            return made
        op, args = made
        return Call(op, node, args, bool(args.pop("inplace", False)))
    try:
        entry = FUNCTIONS.get(node.target) if node.op == "call_function" else METHODS.get(node.target)
    except TypeError:   # an unhashable target
        entry = None
    if entry is None:
        return "a view: stays torch (no copy)" if _is_view(node, modules) else f"{name} is not run by cuopjit"
    op, signature, inplace = entry
    args = bind(signature, node.args, node.kwargs)
    if args is None:
        return f"{name} with arguments cuopjit does not read ({', '.join(node.kwargs) or len(node.args)})"
    if signature == "relu6":
        args.update(min_val=0.0, max_val=6.0)
    return Call(op, node, args, inplace or bool(args.pop("inplace", False)))


def mutates(node: fx.Node, modules: Mapping[str, Any]) -> bool:
    """Whether a node may write into one of its inputs (in-place ops, out=, inplace=True)."""
    if node.op == "call_module":
        return bool(getattr(modules[node.target], "inplace", False))
    name = target_name(node, modules).split(".")[-1]
    return ((name.endswith("_") and not name.endswith("__")) or node.target in _IN_PLACE_OPERATORS
            or node.kwargs.get("inplace") is True or "out" in node.kwargs)
