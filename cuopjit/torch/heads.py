"""The head of a planned group: its product, pool, norm or attention op as a callable on torch CUDA tensors
(`Head`), with its tail as the op's epilogue where epilogues.fit allows.

Each head owns its operators (warm plan memos), holds its weights from compile time (a conv's with BatchNorm
folded in float64 by cuopjit.fold_batchnorm, rounded once) and writes into torch.empty outputs of the graph's
static shapes, in the memory format eager would give them. Operands go as they lie (contiguous, channels_last,
transposed); where an operator refuses a layout (layouts.Operands) the head copies to contiguous from then on.
Launches go to `Launch.stream`; float32 products run as TF32 when `tf32` allows, as torch's flags do.
float16 / bfloat16 heads run on the families' 16-bit operators (tensor cores for the products; sums in float32,
rounded once on store), their weights and folded BatchNorm rounded once to the graph's dtype.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .. import layout
from ..config import JITConfig
from ..jit import JITBatchMatMulFloat, JITConvolution2DFloat, JITGemmFloat, JITMatMulFloat
from . import epilogues, fused_attention, layouts
from .common import HALF, NP, make_operator
from .fusion import Group
from .prebuild import Sample, settings_of
from .program import batchnorm_scale_shift
from .support import Context, pair
from .warm import Warm

_WRAPPERS = {"conv2d": JITConvolution2DFloat, "gemm": JITGemmFloat, "matmul": JITMatMulFloat,
             "batchmatmul": JITBatchMatMulFloat}
INPUTS = {"conv2d": ("input",), "linear": ("input",), "matmul": ("input", "other"), "bmm": ("input", "mat2"),
          "baddbmm": ("batch1", "batch2"), "softmax": ("input",), "layer_norm": ("input",),
          "max_pool2d": ("input",), "avg_pool2d": ("input",), "adaptive_avg_pool2d": ("input",),
          "attention": ("query", "key", "value")}
TENSOR_CORES = frozenset({"conv2d", "linear", "matmul", "bmm", "baddbmm"})   # the products (TF32 flag: conv / matmul)


class Launch:
    """What a compiled graph's kernels share per call: the raw CUDA stream (set by the runner)."""
    __slots__ = ("stream",)

    def __init__(self) -> None:
        self.stream = 0


def _make(family: str, dtype: torch.dtype, *settings: Any, tensor_cores: bool = False) -> tuple[Any, Any]:
    """(what to call forward on, the operator): under TF32 a JIT wrapper with tensor cores allowed."""
    op = make_operator(family, dtype, *settings)
    if tensor_cores and dtype == torch.float32 and family in _WRAPPERS:
        wrapper = _WRAPPERS[family](op)
        config = JITConfig()
        config.enable_tensor_core = True
        wrapper.set_jit_config(config)
        return wrapper, op
    return op, op


def stand_in(shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
    """A stand-in operand for planning: NumPy's empty array of that shape (never touched, so never paged in)."""
    return np.empty(shape, NP[dtype])


def nhwc_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return layout.storage_shape(shape, layout.CHANNELS_LAST) if len(shape) == 4 else shape


class Head:
    """One head op: `__call__(*tensors)` allocates the output and launches."""

    def __init__(self, group: Group, ctx: Context, launch: Launch, tf32: dict[str, bool]):
        head = group.head
        out = ctx.val(head.node)
        self.shape, self.dtype, self.device = tuple(out.shape), out.dtype, out.device
        self.format = layouts.output_format(ctx.val(group.output))
        self.launch, self.kwargs, self.view = launch, {}, None
        self.keep: list[torch.Tensor] = []   # weights the operators read
        self.conv_bias: torch.Tensor | None = None
        self.trial = layouts.Trial()
        self.epilogue: epilogues.Epilogue | str = "no product"
        self.tensor_cores = False   # a float32 product on tensor cores (TF32)
        self.name = getattr(self, "_" + head.op)(group, ctx, head.args, tf32)
        self.op_fuses = head.op in TENSOR_CORES
        if self.op_fuses:   # a 16-bit product runs on tensor cores (the cost rule of epilogues.fit)
            self._fuse(group, ctx, self.tensor_cores or self.dtype in HALF)
        self.warm = Warm(self.run, self.op)

    def _fuse(self, group: Group, ctx: Context, tensor_cores: bool) -> None:
        """The tail as this product's epilogue, where epilogues.fit allows (else it stays a program)."""
        self.epilogue = epilogues.fit(group, ctx, tensor_cores, self.conv_bias)
        if isinstance(self.epilogue, str):
            return
        try:
            self.op.set_epilogue(self.epilogue.text, **self.epilogue.bound)
        except (ValueError, TypeError) as exc:   # the operator refuses it: the program runs after the product
            self.epilogue = str(exc).splitlines()[0]
            return
        self.keep += list(self.epilogue.bound.values())
        self.name = f"{self.name.split('(')[0]}(epilogue {self.epilogue.text!r})"

    def _tf32(self, tf32: dict[str, bool]) -> bool:
        self.tensor_cores = self.dtype == torch.float32 and tf32["matmul"]
        return self.tensor_cores

    def _conv2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        w = ctx.constant(a["weight"]).detach()
        b = None if a["bias"] is None else ctx.constant(a["bias"]).detach()
        if group.batch_norm is not None:
            scale, shift = (v.to(w.device) for v in batchnorm_scale_shift(group.batch_norm, ctx))
            b = (0.0 if b is None else b.double()) * scale + shift
            w = w.double() * scale.view(-1, 1, 1, 1)
        w, b = w.to(self.dtype).contiguous(), None if b is None else b.to(self.dtype).contiguous()
        (sh, sw), (ph, pw), (dh, dw) = (pair(a[k]) for k in ("stride", "padding", "dilation"))
        o, cg, kh, kw = w.shape
        # grouped (depthwise) convolutions have a few channels per group: too narrow a product for tensor cores
        self.tensor_cores = self.dtype == torch.float32 and tf32["conv"] and a["groups"] == 1
        self.run, self.op = _make("conv2d", self.dtype, cg * a["groups"], o, kh, kw, sh, sw, dh, dw, a["groups"],
                                  group.relu, ph, pw, tensor_cores=self.tensor_cores)
        self.op.set_weight(w)
        self.op.set_bias(b)
        self.keep += [w, b]
        self.conv_bias = b
        return type(self.op).__name__ + ('(relu)' if group.relu else '')

    def _linear(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        w = ctx.constant(a["weight"]).detach().contiguous()
        n, k = w.shape
        rows = math.prod(self.shape[:-1])
        self.view = ((rows, k), (rows, n))
        self.run, self.op = _make("gemm", self.dtype, False, True, 1.0, 0.0, tensor_cores=self._tf32(tf32))
        self.op.set_weight(w)
        self.keep.append(w)
        return f"{type(self.op).__name__}(x @ Wᵀ)"

    def _matmul(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool], family: str = "matmul") -> str:
        self.run, self.op = _make(family, self.dtype, tensor_cores=self._tf32(tf32))
        return type(self.op).__name__

    def _bmm(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return self._matmul(group, ctx, a, tf32, "batchmatmul")

    _baddbmm = _bmm

    def _softmax(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        self.run, self.op = _make("softmax", self.dtype)
        self.kwargs = {"axis": a["dim"]}
        return type(self.op).__name__

    def _attention(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return fused_attention.setup(self, a, tf32)

    def _layer_norm(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        shape = tuple(a["normalized_shape"]) if isinstance(a["normalized_shape"], (list, tuple)) \
            else (a["normalized_shape"],)
        gamma, beta = (ctx.constant(a[k]) for k in ("weight", "bias"))
        gamma = torch.ones(shape, dtype=self.dtype, device=self.device) if gamma is None else gamma.detach()
        beta = torch.zeros(shape, dtype=self.dtype, device=self.device) if beta is None else beta.detach()
        self.run, self.op = _make("layernorm", self.dtype, a["eps"])
        self.op.set_gamma(gamma.contiguous())
        self.op.set_beta(beta.contiguous())
        self.keep += [gamma, beta]
        return type(self.op).__name__

    def _window(self, family: str, a: dict) -> str:
        (kh, kw), (ph, pw) = pair(a["kernel_size"]), pair(a["padding"])
        sh, sw = (kh, kw) if a["stride"] in (None, [], ()) else pair(a["stride"])
        self.run, self.op = _make(family, self.dtype, kh, kw, sh, sw, ph, pw)
        return f"{type(self.op).__name__}({kh}x{kw}/{sh})"

    def _max_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return self._window("maxpool2d", a)

    def _avg_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return self._window("avgpool2d", a)

    def _adaptive_avg_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        h, w = ctx.val(a["input"]).shape[2:]
        oh, ow = self.shape[2:]
        if (oh, ow) == (1, 1):
            self.run, self.op = _make("globalavgpool2d", self.dtype)
            return type(self.op).__name__
        return self._window("avgpool2d", {"kernel_size": (h // oh, w // ow), "stride": None, "padding": 0})

    def sample(self, inputs: list[tuple[int, ...]], runtime: list[tuple[int, ...]]) -> Sample:
        """This head's forward on contiguous operands of the graph's shapes (prebuild): `inputs` the head's,
        `runtime` its epilogue's run-time operands'."""
        out = self.shape
        if getattr(self.run, "heads_last", False):   # attention's [b, L, heads, D] output, planned as [b, heads, L, D]
            out = (out[0], out[2], out[1], out[3])
        args = self.view if self.view is not None else (*inputs, out)
        kwargs = dict(self.kwargs)
        if not isinstance(self.epilogue, str):
            kwargs.update((name, stand_in(shape or given, self.dtype))
                          for (name, shape), given in zip(self.epilogue.shapes.items(), runtime))
        return Sample(self.op, settings_of(self.run, self.op), tuple(args), kwargs)

    def _launch(self, xs: tuple, operands: dict, fmt: torch.memory_format) -> torch.Tensor:
        y = torch.empty(self.shape, dtype=self.dtype, device=self.device, memory_format=fmt)
        if self.view is not None:   # a linear: x [..., k] @ Wᵀ as the GEMM [rows, k] @ Wᵀ -> [rows, n]
            x = xs[0] if xs[0].dim() == 2 else xs[0].reshape(self.view[0])
            self.warm(self.launch.stream, (x, y.view(self.view[1])), operands)
        else:
            self.warm(self.launch.stream, (*xs, y), {**self.kwargs, **operands} if self.kwargs else operands)
        return y

    def __call__(self, *xs: torch.Tensor) -> torch.Tensor:
        """The head on its inputs; with an epilogue, its run-time operands follow (Epilogue.runtime's order)."""
        operands = {}
        if not isinstance(self.epilogue, str):
            n = len(xs) - len(self.epilogue.runtime)
            xs, rest = xs[:n], xs[n:]
            shapes = self.epilogue.shapes
            operands = {name: epilogues.operand(x, shapes[name]) for name, x in zip(self.epilogue.runtime, rest)}
        return self.trial.run(self._launch, xs, operands, self.format)
