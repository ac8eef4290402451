"""cuopjit operators as PyTorch custom ops: `import cuopjit.torch` registers `torch.ops.cuopjit.*`.

Each op (cuopjit::linear, cuopjit::conv2d, cuopjit::softmax, ...) is a `torch.library` op with a fake
(meta) implementation, so models using them trace under `torch.compile(fullgraph=True)` without graph
breaks, and launch on torch's current stream, so they are captured by `torch.cuda.graphs`. Inputs are
made contiguous and wrapped zero-copy: CUDA tensors of one dtype, float32 or float64, or float16 / bfloat16 where
the op's operator family has 16-bit kernels (they compute in float32 and round once on store, as torch's do); a
call mixing dtypes raises one line naming both operands, in the fake implementation too (which keeps the
dtype). Every op returns a new tensor. A call
seen before (same shapes, strides, dtypes, devices and other arguments) is a prepared launch (prepared.py):
one key, one probe, the output's allocation and the packed launch.
Adding an op is one line in OPS (or ops_products.PRODUCTS): its schema, its output shape (the fake
implementation) and how it launches. Autograd is not registered: the ops are for inference. cuopjit
itself never imports torch; only importing this package does (optional extra `cuopjit[torch]`).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..device import driver
from .common import NP, TorchOp, capture, constant, dtype_name, forward, hold, instance, lock, operator_class, \
    raw_stream, view
from .ops_products import PRODUCTS
from .fused_attention import LIBRARY_OP as ATTENTION
from .prepared import Table



# --- output shapes (the fake implementations) --------------------------------------------------------------
def _same(x: torch.Tensor, *args: Any, **kwargs: Any) -> Sequence[int]:
    return x.shape


def _window(kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int]) -> dict:
    """cuopjit's per-call window arguments from torch's kernel_size, stride ([] = kernel) and padding."""
    kh, kw = (kernel[0], kernel[-1])
    sh, sw = (stride[0], stride[-1]) if stride else (kh, kw)
    ph, pw = (padding[0], padding[-1]) if padding else (0, 0)
    return dict(kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw)


def _pool_shape(x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                padding: Sequence[int] = (0, 0)):
    w = _window(kernel_size, stride, padding)
    n, c, h, wd = x.shape
    return (n, c, (h + 2 * w["pad_h"] - w["kernel_h"]) // w["stride_h"] + 1,
            (wd + 2 * w["pad_w"] - w["kernel_w"]) // w["stride_w"] + 1)


# --- launches: out is a fresh contiguous tensor, s torch's current stream ------------------------------------
def _map(family: str) -> Callable:
    def run(out, s, x):
        forward(instance(family, x.dtype), view(x), view(out), stream=s)
    return run


def _scal(out, s, x, alpha):
    """out = alpha x: out starts as a copy of x, scaled in place."""
    out.copy_(x)
    op = instance("scal", x.dtype)
    with lock:
        op.alpha = alpha
        forward(op, view(out), stream=s)


def _axpy(out, s, x, y, alpha=1.0):
    """out = alpha x + y: out starts as a copy of y, updated in place."""
    out.copy_(y)
    op = instance("axpy", x.dtype)
    with lock:
        op.alpha = alpha
        forward(op, view(x), view(out), stream=s)


def _dot(out, s, x, y):
    forward(instance("dot", x.dtype), view(x), view(y), view(out), stream=s)


def _softmax(out, s, x, dim=-1):
    forward(instance("softmax", x.dtype), view(x), view(out), axis=dim, stream=s)


def _layer_norm(out, s, x, normalized_shape, weight=None, bias=None, eps=1e-05):
    op = instance("layernorm", x.dtype, eps)
    n = int(np.prod(normalized_shape))
    weight = constant(1.0, n, x).view(tuple(normalized_shape)) if weight is None else weight
    bias = constant(0.0, n, x).view(tuple(normalized_shape)) if bias is None else bias
    with lock:
        hold(op, "set_gamma", weight)
        hold(op, "set_beta", bias)
        forward(op, view(x), view(out), stream=s)


def _batch_norm(out, s, x, running_mean, running_var, weight=None, bias=None, eps=1e-05):
    op = instance("batchnorm", x.dtype, eps)
    c = x.shape[1]
    params = (weight if weight is not None else constant(1.0, c, x),
              bias if bias is not None else constant(0.0, c, x), running_mean, running_var)
    with lock:
        for name, t in zip(("set_gamma", "set_beta", "set_running_mean", "set_running_var"), params):
            hold(op, name, t)
        forward(op, view(x), view(out), stream=s)


def _pool(family: str) -> Callable:
    def run(out, s, x, kernel_size, stride=(), padding=(0, 0)):
        forward(instance(family, x.dtype), view(x), view(out), stream=s, **_window(kernel_size, stride, padding))
    return run


def _global(family: str) -> Callable:
    def run(out, s, x):
        forward(instance(family, x.dtype), view(x), view(out), stream=s)
    return run


_POOL = "(Tensor x, int[] kernel_size, int[] stride=[], int[] padding=[0, 0]) -> Tensor"
OPS: dict[str, TorchOp] = {
    **PRODUCTS,
    "attention": dataclasses.replace(ATTENTION, family="attention"),
    "relu": TorchOp("(Tensor x) -> Tensor", _same, _map("relu"), family="relu"),
    "copy": TorchOp("(Tensor x) -> Tensor", _same, _map("copy"), family="copy"),
    "scal": TorchOp("(Tensor x, float alpha) -> Tensor", _same, _scal, prepared=False, family="scal"),
    "axpy": TorchOp("(Tensor x, Tensor y, float alpha=1.0) -> Tensor", _same, _axpy, prepared=False,
                     family="axpy"),
    "dot": TorchOp("(Tensor x, Tensor y) -> Tensor", lambda x, y: (), _dot, family="dot"),
    "softmax": TorchOp("(Tensor x, int dim=-1) -> Tensor", _same, _softmax, family="softmax"),
    "layer_norm": TorchOp("(Tensor x, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
                          "float eps=1e-05) -> Tensor", _same, _layer_norm, family="layernorm"),
    "batch_norm": TorchOp("(Tensor x, Tensor running_mean, Tensor running_var, Tensor? weight=None, "
                          "Tensor? bias=None, float eps=1e-05) -> Tensor", _same, _batch_norm, family="batchnorm"),
    "max_pool2d": TorchOp(_POOL, _pool_shape, _pool("maxpool2d"), family="maxpool2d"),
    "avg_pool2d": TorchOp(_POOL, _pool_shape, _pool("avgpool2d"), family="avgpool2d"),
    "global_max_pool2d": TorchOp("(Tensor x) -> Tensor", lambda x: (*x.shape[:2], 1, 1), _global("globalmaxpool2d"),
                                 family="globalmaxpool2d"),
    "global_avg_pool2d": TorchOp("(Tensor x) -> Tensor", lambda x: (*x.shape[:2], 1, 1), _global("globalavgpool2d"),
                                 family="globalavgpool2d"),
}


def param_names(schema: str) -> tuple[str, ...]:
    """The parameter names of a schema, in order ('(Tensor x, Tensor? weight=None, float eps=1e-05) -> Tensor'
    -> ('x', 'weight', 'eps'))."""
    params = re.split(r",(?![^\[]*\])", schema[1:schema.rindex(") ->")])   # commas outside [...] defaults
    return tuple(p.split("=")[0].split()[-1] for p in params if p.strip())


def checker(name: str, op: TorchOp) -> Callable[[tuple, dict], None]:
    """The dtype check of cuopjit::<name>'s arguments: one dtype cuopjit holds (and the op's family has kernels
    of) for every tensor; each refusal one line naming the operands."""
    names = param_names(op.schema)

    def check(args: tuple, kwargs: dict) -> None:
        tensors = [(n, a) for n, a in zip(names, args) if isinstance(a, torch.Tensor)]
        tensors += [(n, a) for n, a in kwargs.items() if isinstance(a, torch.Tensor)]
        first, x = tensors[0]
        if x.dtype not in NP:
            raise TypeError(f"cuopjit::{name}: {first} is {x.dtype}, which is not supported: cuopjit ops take "
                            "float32, float64, float16 or bfloat16 tensors")
        for other, t in tensors[1:]:
            if t.dtype != x.dtype:
                raise TypeError(f"cuopjit::{name}: {first} is {x.dtype} and {other} is {t.dtype}: pass tensors of "
                                "one dtype (convert with .to(...))")
        if op.family and operator_class(op.family, x.dtype) is None:
            raise TypeError(f"cuopjit::{name}: {first} is {x.dtype} and cuopjit has no {dtype_name(x.dtype)} "
                            f"{op.family} kernels: pass float32 or float64 tensors")
    return check


def _impl(name: str, op: TorchOp) -> Callable:
    """The CUDA kernel of cuopjit::<name>: torch passes the arguments positionally, trailing defaults left out
    (the launches' own defaults are the schema's). A call seen before is a prepared launch (prepared.py)."""
    shape, run, Tensor, empty_like = op.shape, op.run, torch.Tensor, torch.empty_like
    table = Table(op.weights) if op.prepared else None
    check = checker(name, op)

    def slow(args: tuple, kwargs: dict) -> torch.Tensor:
        given = args
        args = [a.contiguous() if isinstance(a, Tensor) and not a.is_contiguous() else a for a in args]
        if kwargs:
            kwargs = {k: v.contiguous() if isinstance(v, Tensor) and not v.is_contiguous() else v
                      for k, v in kwargs.items()}
        copied = any(a is not b for a, b in zip(args, given))
        check(args, kwargs)
        x = args[0]
        ordinal = x.get_device()
        if driver.current_ordinal() != ordinal:
            driver.set_device(ordinal)
        size = shape(*args, **kwargs)
        out = empty_like(x) if size is x.shape else x.new_empty(size)   # empty_like: the cheaper call
        with capture(owned=not copied) as calls:
            run(out, raw_stream(ordinal), *args, **kwargs)
        if table is not None and not kwargs and not copied:
            table.put(given, calls, out)
        return out

    if table is None:
        return lambda *args, **kwargs: slow(args, kwargs)
    key, prepared = table.key, table.calls

    def impl(*args: Any, **kwargs: Any) -> torch.Tensor:
        if not kwargs:
            try:
                warm = prepared.get(key(args))
            except TypeError:     # an unhashable argument: the slow path takes it
                warm = None
            if warm is not None:
                return warm(args)
        return slow(args, kwargs)
    impl.table = table
    return impl


def _fake(name: str, op: TorchOp) -> Callable:
    check = checker(name, op)

    def fake(*args: Any, **kwargs: Any) -> torch.Tensor:
        check(args, kwargs)
        return args[0].new_empty(tuple(op.shape(*args, **kwargs)))
    return fake


def register(name: str, op: TorchOp) -> None:
    """Define cuopjit::<name> with its CUDA implementation and its fake implementation."""
    _LIB.define(name + op.schema)
    _LIB.impl(name, _impl(name, op), "CUDA")
    torch.library.register_fake(f"cuopjit::{name}", _fake(name, op), lib=_LIB)
    globals()[name] = getattr(torch.ops.cuopjit, name)


_LIB = torch.library.Library("cuopjit", "DEF")
for _name, _op in OPS.items():
    register(_name, _op)
