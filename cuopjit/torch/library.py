"""cuopjit operators as PyTorch custom ops: `import cuopjit.torch` registers `torch.ops.cuopjit.*`.

Each op (cuopjit::gemm, cuopjit::softmax, ...) is a `torch.library` op with a fake (meta)
implementation, so models using them trace under `torch.compile(fullgraph=True)` without graph
breaks, and launch on torch's current stream, so they are captured by `torch.cuda.graphs`. Inputs
are wrapped zero-copy (contiguous float32/float64 CUDA tensors); every op returns a new tensor.
Adding an op is one line in OPS: its schema, its output shape (the fake implementation) and how
it launches. Autograd is not registered: the ops are for inference. cuopjit itself never imports
torch; only importing this module does (optional extra `cuopjit[torch]`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..device import driver
from ..ops import FAMILIES
from ..tensor import Tensor

_NP = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
_lock = threading.Lock()          # ops that hold weights set them and launch under it
_instances: dict[tuple, Any] = {}
_constants: dict[tuple, torch.Tensor] = {}


def _wrap(t: torch.Tensor) -> Tensor:
    """A cuopjit Tensor over a contiguous CUDA tensor's memory (no copy); the torch tensor stays its owner."""
    return Tensor._view(t.data_ptr(), tuple(t.shape), _NP[t.dtype], t.device.index or 0, t)


def _instance(family: str, dtype: torch.dtype, *settings: Any) -> Any:
    """One operator object per family, dtype and constructor settings (its plan memo is what makes calls warm)."""
    key = (family, dtype, *settings)
    op = _instances.get(key)
    if op is None:
        op = _instances.setdefault(key, FAMILIES[family][0 if dtype == torch.float32 else 1](*settings))
    return op


def _constant(value: float, n: int, like: torch.Tensor) -> torch.Tensor:
    """A cached [n] tensor of `value` (the default gamma/beta of a norm called without them)."""
    key = (value, n, like.dtype, like.device)
    t = _constants.get(key)
    if t is None:
        t = _constants.setdefault(key, torch.full((n,), value, dtype=like.dtype, device=like.device))
    return t


# --- output shapes (the fake implementations) --------------------------------------------------------------
def _same(x: torch.Tensor, *args: Any) -> Sequence[int]:
    return x.shape


def _gemm_shape(a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool, alpha: float) -> Sequence[int]:
    return (a.shape[1] if trans_a else a.shape[0], b.shape[0] if trans_b else b.shape[1])


def _window(x: torch.Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int]) -> dict:
    """cuopjit's per-call window arguments from torch's kernel_size, stride ([] = kernel) and padding."""
    kh, kw = (kernel[0], kernel[-1])
    sh, sw = (stride[0], stride[-1]) if stride else (kh, kw)
    ph, pw = (padding[0], padding[-1]) if padding else (0, 0)
    return dict(kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw)


def _pool_shape(x: torch.Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int]):
    w = _window(x, kernel, stride, padding)
    n, c, h, wd = x.shape
    return (n, c, (h + 2 * w["pad_h"] - w["kernel_h"]) // w["stride_h"] + 1,
            (wd + 2 * w["pad_w"] - w["kernel_w"]) // w["stride_w"] + 1)


# --- launches: out is a fresh contiguous tensor, s torch's current stream ------------------------------------
def _gemm(out, s, a, b, trans_a, trans_b, alpha):
    op = _instance("gemm", a.dtype, trans_a, trans_b, alpha, 0.0)
    with _lock:
        op.set_weight(_wrap(b))
        op.forward(_wrap(a), _wrap(out), stream=s)


def _map(family: str) -> Callable:
    def run(out, s, x):
        _instance(family, x.dtype).forward(_wrap(x), _wrap(out), stream=s)
    return run


def _scaled(family: str) -> Callable:
    """scal (out = alpha x) and axpy (out = alpha x + y): out starts as a copy of the operand updated in place."""
    def run(out, s, x, *rest):
        *y, alpha = rest
        out.copy_(y[0] if y else x)
        op = _instance(family, x.dtype)
        with _lock:
            op.alpha = alpha
            op.forward(*([_wrap(x)] if y else []), _wrap(out), stream=s)
    return run


def _dot(out, s, x, y):
    _instance("dot", x.dtype).forward(_wrap(x), _wrap(y), _wrap(out), stream=s)


def _softmax(out, s, x, dim):
    _instance("softmax", x.dtype).forward(_wrap(x), _wrap(out), axis=dim, stream=s)


def _layer_norm(out, s, x, normalized_shape, weight, bias, eps):
    op = _instance("layernorm", x.dtype, eps)
    n = int(np.prod(normalized_shape))
    weight = _constant(1.0, n, x).view(tuple(normalized_shape)) if weight is None else weight
    bias = _constant(0.0, n, x).view(tuple(normalized_shape)) if bias is None else bias
    with _lock:
        op.set_gamma(_wrap(weight.contiguous()))
        op.set_beta(_wrap(bias.contiguous()))
        op.forward(_wrap(x), _wrap(out), stream=s)


def _batch_norm(out, s, x, running_mean, running_var, weight, bias, eps):
    op = _instance("batchnorm", x.dtype, eps)
    c = x.shape[1]
    params = (weight if weight is not None else _constant(1.0, c, x),
              bias if bias is not None else _constant(0.0, c, x), running_mean, running_var)
    with _lock:
        for name, t in zip(("gamma", "beta", "running_mean", "running_var"), params):
            getattr(op, "set_" + name)(_wrap(t.contiguous()))
        op.forward(_wrap(x), _wrap(out), stream=s)


def _pool(family: str) -> Callable:
    def run(out, s, x, kernel_size, stride, padding):
        _instance(family, x.dtype).forward(_wrap(x), _wrap(out), stream=s, **_window(x, kernel_size, stride, padding))
    return run


def _global(family: str) -> Callable:
    def run(out, s, x):
        _instance(family, x.dtype).forward(_wrap(x), _wrap(out), stream=s)
    return run


@dataclass(frozen=True)
class TorchOp:
    """One custom op: its schema (after the name), its output shape, and its launch (out, stream, *args)."""
    schema: str
    shape: Callable[..., Sequence[int]]
    run: Callable[..., None]


_POOL = "(Tensor x, int[] kernel_size, int[] stride=[], int[] padding=[0, 0]) -> Tensor"
OPS: dict[str, TorchOp] = {
    "gemm": TorchOp("(Tensor a, Tensor b, bool trans_a=False, bool trans_b=False, float alpha=1.0) -> Tensor",
                    _gemm_shape, _gemm),
    "relu": TorchOp("(Tensor x) -> Tensor", _same, _map("relu")),
    "copy": TorchOp("(Tensor x) -> Tensor", _same, _map("copy")),
    "scal": TorchOp("(Tensor x, float alpha) -> Tensor", _same, _scaled("scal")),
    "axpy": TorchOp("(Tensor x, Tensor y, float alpha=1.0) -> Tensor", _same, _scaled("axpy")),
    "dot": TorchOp("(Tensor x, Tensor y) -> Tensor", lambda x, y: (), _dot),
    "softmax": TorchOp("(Tensor x, int dim=-1) -> Tensor", _same, _softmax),
    "layer_norm": TorchOp("(Tensor x, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
                          "float eps=1e-05) -> Tensor", _same, _layer_norm),
    "batch_norm": TorchOp("(Tensor x, Tensor running_mean, Tensor running_var, Tensor? weight=None, "
                          "Tensor? bias=None, float eps=1e-05) -> Tensor", _same, _batch_norm),
    "max_pool2d": TorchOp(_POOL, _pool_shape, _pool("maxpool2d")),
    "avg_pool2d": TorchOp(_POOL, _pool_shape, _pool("avgpool2d")),
    "global_max_pool2d": TorchOp("(Tensor x) -> Tensor", lambda x: (*x.shape[:2], 1, 1), _global("globalmaxpool2d")),
    "global_avg_pool2d": TorchOp("(Tensor x) -> Tensor", lambda x: (*x.shape[:2], 1, 1), _global("globalavgpool2d")),
}


def _check(name: str, x: torch.Tensor) -> None:
    if x.dtype not in _NP:
        raise TypeError(f"cuopjit::{name}: {x.dtype} is not supported: cuopjit ops take float32 or float64 tensors")


def _positional(name: str) -> Callable[[tuple, dict], tuple]:
    """Arguments in schema order with the schema's defaults filled in (torch passes what the caller gave)."""
    arguments = getattr(torch.ops.cuopjit, name).default._schema.arguments

    def normalize(args: tuple, kwargs: dict) -> tuple:
        rest = [kwargs[a.name] if a.name in kwargs else a.default_value for a in arguments[len(args):]]
        return (*args, *rest)
    return normalize


def _impl(name: str, op: TorchOp) -> Callable:
    normalize = _positional(name)

    def impl(*args: Any, **kwargs: Any) -> torch.Tensor:
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in normalize(args, kwargs))
        x = args[0]
        _check(name, x)
        ordinal = x.device.index or 0
        if driver.current_ordinal() != ordinal:
            driver.set_device(ordinal)
        out = torch.empty(tuple(op.shape(*args)), dtype=x.dtype, device=x.device)
        op.run(out, torch.cuda.current_stream(x.device).cuda_stream, *args)
        return out
    return impl


def _fake(name: str, op: TorchOp) -> Callable:
    normalize = _positional(name)

    def fake(*args: Any, **kwargs: Any) -> torch.Tensor:
        args = normalize(args, kwargs)
        _check(name, args[0])
        return args[0].new_empty(tuple(op.shape(*args)))
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
