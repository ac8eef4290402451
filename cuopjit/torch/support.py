"""Which described nodes cuopjit can run: `check(call, ctx)` gives None, or why the node stays torch.

A node runs on cuopjit when its output is one float32 or float64 tensor of static shape on the
backend's device (CUDA; the CPU tests plan for "cpu"), or a float16 / bfloat16 one where the op's
operator family (FAMILY) has 16-bit classes (one without them stays torch, said so), every tensor
operand has that dtype and device (float32 operands of a 16-bit output, torch.autocast's casts,
stay torch), and its arguments are ones the kernel takes (per op below: weights that are parameters
or buffers, integer windows, no ceil_mode, ...). `Context` holds what the checks read: each node's
fake value (node.meta["val"]), the graph's constants (parameters and buffers, whether Dynamo passes
them as placeholders or the graph holds them as attributes or modules) and the nodes' order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from . import fused_attention
from .common import HALF, NP, dtype_name, operator_class
from .nodes import ELEMENTWISE, Call

# the operator family each op runs on (its 16-bit classes decide whether a half-precision node runs)
FAMILY = {"conv2d": "conv2d", "linear": "gemm", "matmul": "matmul", "bmm": "batchmatmul", "baddbmm": "batchmatmul",
          "softmax": "softmax", "layer_norm": "layernorm", "attention": "attention", "max_pool2d": "maxpool2d",
          "avg_pool2d": "avgpool2d", "adaptive_avg_pool2d": "avgpool2d", **{op: "elementwise" for op in ELEMENTWISE}}


@dataclass
class Context:
    """The graph under planning: modules, constants, node order, the device kernels run on."""
    gm: fx.GraphModule
    device: str
    constants: dict[fx.Node, torch.Tensor]
    order: dict[fx.Node, int]
    modules: dict[str, Any] = field(default_factory=dict)
    calls: dict[fx.Node, Call | str] = field(default_factory=dict)

    @classmethod
    def of(cls, gm: fx.GraphModule, example_inputs: Sequence[Any], device: str) -> "Context":
        """Constants: get_attr tensors, and placeholders whose example is a Parameter or, by Dynamo's naming
        (L_self_modules_bn1_buffers_running_mean_), a module buffer."""
        constants: dict[fx.Node, torch.Tensor] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, example_inputs):
            if isinstance(value, torch.nn.Parameter) or (isinstance(value, torch.Tensor)
                                                         and "_buffers_" in str(node.target)):
                constants[node] = value
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = gm
                for part in str(node.target).split("."):
                    value = getattr(value, part)
                if isinstance(value, torch.Tensor):
                    constants[node] = value
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        return cls(gm, device, constants, order, dict(gm.named_modules()))

    def constant(self, v: Any) -> torch.Tensor | None:
        """The tensor behind a parameter / buffer operand, else None."""
        if isinstance(v, torch.Tensor):
            return v
        return self.constants.get(v) if isinstance(v, fx.Node) else None

    def val(self, v: Any) -> Any:
        """A node's (fake) value or a tensor itself; None for anything else."""
        if isinstance(v, fx.Node):
            return v.meta.get("val", v.meta.get("example_value"))
        return v if isinstance(v, torch.Tensor) else None


def _where(t: torch.Tensor) -> str:
    return f"{str(t.dtype).replace('torch.', '')} on {t.device.type}" + ("" if _static(t) else " of dynamic shape")


def _static(t: torch.Tensor) -> bool:
    return all(type(d) is int for d in t.shape)


def pair(v: Any) -> tuple[int, int] | None:
    """An int or two ints as (h, w); None for anything else (strings such as padding='same')."""
    values = (v, v) if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else ()
    if len(values) == 1:
        values = values * 2
    return values if len(values) == 2 and all(type(x) is int for x in values) else None


def _number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)


def _constants(call: Call, ctx: Context, *names: str, optional: Sequence[str] = ()) -> str | None:
    for name in names + tuple(optional):
        v = call.args[name]
        if v is None and name in optional:
            continue
        if ctx.constant(v) is None:
            return f"{call.op}'s {name} is not a parameter or buffer (cuopjit holds weights set at compile time)"
    return None


def _rank(call: Call, ctx: Context, name: str, *ranks: int) -> str | None:
    t = ctx.val(call.args[name])
    if t is None or t.dim() not in ranks:
        got = "not a tensor" if t is None else f"{t.dim()}-D"
        return f"{call.op}'s {name} is {got} (cuopjit takes {' or '.join(f'{r}-D' for r in ranks)})"
    return None


def _conv2d(call: Call, ctx: Context) -> str | None:
    a = call.args
    if not all(pair(a[k]) for k in ("stride", "padding", "dilation")) or type(a["groups"]) is not int:
        return f"conv2d with stride={a['stride']}, padding={a['padding']!r}, dilation={a['dilation']} (cuopjit " \
               "takes integers)"
    return _constants(call, ctx, "weight", optional=("bias",)) or _rank(call, ctx, "input", 4)


def _pool(call: Call, ctx: Context) -> str | None:
    a = call.args
    k, p = pair(a["kernel_size"]), pair(a["padding"])
    s = k if a["stride"] in (None, [], ()) else pair(a["stride"])
    if k is None or s is None or p is None or a["ceil_mode"] or 2 * p[0] > k[0] or 2 * p[1] > k[1]:
        return f"{call.op} with ceil_mode or a window cuopjit does not take"
    if call.op == "max_pool2d" and (pair(a["dilation"]) != (1, 1) or a["return_indices"]):
        return "max_pool2d with dilation or return_indices"
    if call.op == "avg_pool2d" and (not a["count_include_pad"] or a["divisor_override"] is not None):
        return "avg_pool2d with count_include_pad=False or divisor_override"
    return _rank(call, ctx, "input", 4)


def _adaptive(call: Call, ctx: Context) -> str | None:
    why = _rank(call, ctx, "input", 4)
    if why:
        return why
    h, w = ctx.val(call.args["input"]).shape[2:]
    size = call.args["output_size"]
    oh, ow = (size, size) if isinstance(size, int) else tuple(size)
    oh, ow = oh or h, ow or w
    if h % oh or w % ow:
        return f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (cuopjit pools even windows only)"
    return None


def _layer_norm(call: Call, ctx: Context) -> str | None:
    shape = tuple(call.args["normalized_shape"]) if isinstance(call.args["normalized_shape"], (list, tuple)) \
        else (call.args["normalized_shape"],)
    x = ctx.val(call.args["input"])
    if tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        return "layer_norm over axes that are not the input's last ones"
    return _constants(call, ctx, optional=("weight", "bias"))


def _batch_norm(call: Call, ctx: Context) -> str | None:
    if call.args["training"]:
        return "batch_norm in training mode"
    return _constants(call, ctx, "running_mean", "running_var", optional=("weight", "bias")) \
        or _rank(call, ctx, "input", 2, 3, 4, 5)


def _private(node: Any, ctx: Context) -> bool:
    """Whether `node` is a fresh tensor only one node reads: the output of a computing node (no placeholder,
    no view), or of an in-place op on such a tensor."""
    call = ctx.calls.get(node) if isinstance(node, fx.Node) else None
    return (isinstance(call, Call) and len(node.users) == 1
            and (not call.inplace or _private(call.args["input"], ctx)))


def _in_place(call: Call, ctx: Context) -> str | None:
    """An in-place op may run out of place when nothing else sees the tensor it writes."""
    return None if _private(call.args["input"], ctx) else f"in-place {call.op} on a tensor other nodes see"


def _elementwise(call: Call, ctx: Context) -> str | None:
    a = call.args
    for name in ("input", "other"):
        v = a.get(name)
        if name in a and not (_number(v) or ctx.val(v) is not None):
            return f"{call.op} of {type(v).__name__} (cuopjit takes tensors and finite numbers)"
    if not _number(a.get("alpha", 1)) or a.get("rounding_mode") is not None:
        return f"{call.op} with alpha or rounding_mode"
    if call.op == "hardtanh" and not (_number(a["min_val"]) and _number(a["max_val"]) and a["min_val"] <= a["max_val"]):
        return "hardtanh with bounds that are not numbers in order"
    if call.op == "gelu" and a["approximate"] not in ("none", "tanh"):
        return f"gelu(approximate={a['approximate']!r})"
    if call.op == "batch_norm":
        return _batch_norm(call, ctx)
    return _in_place(call, ctx) if call.inplace else None


CHECKS: dict[str, Callable[[Call, Context], str | None]] = {
    "conv2d": _conv2d,
    "linear": lambda c, x: _constants(c, x, "weight", optional=("bias",)) or _rank(c, x, "weight", 2),
    "matmul": lambda c, x: _rank(c, x, "input", 1, 2, 3, 4, 5, 6) or _rank(c, x, "other", 1, 2, 3, 4, 5, 6),
    "bmm": lambda c, x: _rank(c, x, "input", 3) or _rank(c, x, "mat2", 3),
    "baddbmm": lambda c, x: (None if _number(c.args["beta"]) and _number(c.args["alpha"]) else
                             "baddbmm with beta/alpha that are not numbers")
    or _rank(c, x, "batch1", 3) or _rank(c, x, "batch2", 3),
    "softmax": lambda c, x: None if type(c.args["dim"]) is int and c.args["dtype"] is None else
    "softmax without an integer dim, or with a dtype",
    "layer_norm": _layer_norm,
    "attention": fused_attention.check,
    "max_pool2d": _pool, "avg_pool2d": _pool, "adaptive_avg_pool2d": _adaptive,
    **{op: _elementwise for op in ELEMENTWISE},
}


def check(call: Call, ctx: Context) -> str | None:
    """None when `call` can run on cuopjit, else why it stays torch (one line)."""
    if call.op not in CHECKS:
        return f"{call.op} is not run by cuopjit"
    out = ctx.val(call.node)
    if not isinstance(out, torch.Tensor):
        return f"{call.op} does not give one tensor"
    if not _static(out):
        return f"{call.op} of dynamic shape {list(out.shape)}"
    if out.dtype not in NP:
        return f"{call.op} on {dtype_name(out.dtype)} (cuopjit runs float32, float64, float16 and bfloat16)"
    if out.dtype in HALF and operator_class(FAMILY[call.op], out.dtype) is None:
        dt = dtype_name(out.dtype)
        return f"{call.op} in {dt} (cuopjit has no {dt} {FAMILY[call.op]} kernels)"
    if out.device.type != ctx.device:
        return f"{call.op} on {out.device.type}, not {ctx.device}"
    for name, v in call.args.items():
        t = ctx.val(v) if isinstance(v, (fx.Node, torch.Tensor)) else None
        if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and out.dtype in HALF:
            dt = dtype_name(out.dtype)
            return (f"{call.op} of float32 {name} to a {dt} output (torch.autocast's casts): stays torch; "
                    f"convert the model with .to(torch.{dt}) to run it on cuopjit")
        if t is not None and (not isinstance(t, torch.Tensor) or t.dtype != out.dtype
                              or t.device.type != out.device.type or not _static(t)):
            what = type(t).__name__ if not isinstance(t, torch.Tensor) else _where(t)
            return f"{call.op}'s {name} is {what}, its output {_where(out)} (cuopjit takes one dtype and device)"
    return CHECKS[call.op](call, ctx)

