"""A planned group as a callable on torch CUDA tensors: its head kernel, then its elementwise program.

`build(group, ctx, launch, tf32)` gives a `Kernel` and the FX nodes it takes at run time. Each
kernel owns its cuopjit operators (one per group: their plan memos make every later call warm),
holds its weights from compile time (a conv's with any BatchNorm folded in, in float64 through
cuopjit.fold_batchnorm, then rounded once) and writes into outputs it allocates with torch.empty
(the shapes are static, known from the graph's fake values), so torch's caching allocator and CUDA
graph pools serve them. Operands that are not contiguous are made so (a torch copy); every launch
goes to `launch.stream`, the stream the graph runs on. float32 products run on tensor cores (TF32)
when `tf32` allows it, as torch's own flags do for cuBLAS / cuDNN.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from ..config import JITConfig
from ..jit import JITBatchMatMulFloat, JITConvolution2DFloat, JITGemmFloat, JITMatMulFloat
from ..ops import FAMILIES
from .fusion import Group
from .program import HEAD, Program, batchnorm_scale_shift, render
from .support import Context, pair

_WRAPPERS = {"conv2d": JITConvolution2DFloat, "gemm": JITGemmFloat, "matmul": JITMatMulFloat,
             "batchmatmul": JITBatchMatMulFloat}
INPUTS = {"conv2d": ("input",), "linear": ("input",), "matmul": ("input", "other"), "bmm": ("input", "mat2"),
          "baddbmm": ("batch1", "batch2"), "softmax": ("input",), "layer_norm": ("input",),
          "max_pool2d": ("input",), "avg_pool2d": ("input",), "adaptive_avg_pool2d": ("input",)}


class Launch:
    """What a compiled graph's kernels share per call: the raw CUDA stream (set by the runner)."""
    __slots__ = ("stream",)

    def __init__(self) -> None:
        self.stream = 0


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_contiguous() else x.contiguous()


def _make(family: str, dtype: torch.dtype, *settings: Any, tensor_cores: bool = False) -> tuple[Any, Any]:
    """(what to call forward on, the operator): under TF32 a JIT wrapper with tensor cores allowed."""
    op = FAMILIES[family][0 if dtype == torch.float32 else 1](*settings)
    if tensor_cores and dtype == torch.float32 and family in _WRAPPERS:
        wrapper = _WRAPPERS[family](op)
        config = JITConfig()
        config.enable_tensor_core = True
        wrapper.set_jit_config(config)
        return wrapper, op
    return op, op


class Head:
    """One head op: `__call__(*tensors)` allocates the output and launches."""

    def __init__(self, group: Group, ctx: Context, launch: Launch, tf32: dict[str, bool]):
        head = group.head
        out = ctx.val(head.node)
        self.shape, self.dtype, self.device = tuple(out.shape), out.dtype, out.device
        self.launch, self.kwargs, self.view = launch, {}, None
        self.keep: list[torch.Tensor] = []   # weights the operators read
        self.name = getattr(self, "_" + head.op)(group, ctx, head.args, tf32)

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
        self.run, op = _make("conv2d", self.dtype, cg * a["groups"], o, kh, kw, sh, sw, dh, dw, a["groups"],
                             group.relu, ph, pw, tensor_cores=tf32["conv"])
        op.set_weight(w)
        op.set_bias(b)
        self.keep += [w, b]
        return type(op).__name__ + ('(relu)' if group.relu else '')

    def _linear(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        w = ctx.constant(a["weight"]).detach().contiguous()
        n, k = w.shape
        rows = math.prod(self.shape[:-1])
        self.view = ((rows, k), (rows, n))
        self.run, op = _make("gemm", self.dtype, False, True, 1.0, 0.0, tensor_cores=tf32["matmul"])
        op.set_weight(w)
        self.keep.append(w)
        return f"{type(op).__name__}(x @ Wᵀ)"

    def _matmul(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        self.run, op = _make("matmul", self.dtype, tensor_cores=tf32["matmul"])
        return type(op).__name__

    def _bmm(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        self.run, op = _make("batchmatmul", self.dtype, tensor_cores=tf32["matmul"])
        return type(op).__name__

    _baddbmm = _bmm

    def _softmax(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        self.run, op = _make("softmax", self.dtype)
        self.kwargs = {"axis": a["dim"]}
        return type(op).__name__

    def _layer_norm(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        shape = tuple(a["normalized_shape"]) if isinstance(a["normalized_shape"], (list, tuple)) \
            else (a["normalized_shape"],)
        gamma, beta = (ctx.constant(a[k]) for k in ("weight", "bias"))
        gamma = torch.ones(shape, dtype=self.dtype, device=self.device) if gamma is None else gamma.detach()
        beta = torch.zeros(shape, dtype=self.dtype, device=self.device) if beta is None else beta.detach()
        self.run, op = _make("layernorm", self.dtype, a["eps"])
        op.set_gamma(gamma.contiguous())
        op.set_beta(beta.contiguous())
        self.keep += [gamma, beta]
        return type(op).__name__

    def _window(self, family: str, a: dict) -> str:
        (kh, kw), (ph, pw) = pair(a["kernel_size"]), pair(a["padding"])
        sh, sw = (kh, kw) if a["stride"] in (None, [], ()) else pair(a["stride"])
        self.run, op = _make(family, self.dtype, kh, kw, sh, sw, ph, pw)
        return f"{type(op).__name__}({kh}x{kw}/{sh})"

    def _max_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return self._window("maxpool2d", a)

    def _avg_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        return self._window("avgpool2d", a)

    def _adaptive_avg_pool2d(self, group: Group, ctx: Context, a: dict, tf32: dict[str, bool]) -> str:
        h, w = ctx.val(a["input"]).shape[2:]
        oh, ow = self.shape[2:]
        if (oh, ow) == (1, 1):
            self.run, op = _make("globalavgpool2d", self.dtype)
            return type(op).__name__
        return self._window("avgpool2d", {"kernel_size": (h // oh, w // ow), "stride": None, "padding": 0})

    def __call__(self, *xs: torch.Tensor) -> torch.Tensor:
        y = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        xs = [_contiguous(x) for x in xs]
        if self.view is not None:
            self.run.forward(xs[0].view(self.view[0]), y.view(self.view[1]), stream=self.launch.stream)
        else:
            self.run.forward(*xs, y, stream=self.launch.stream, **self.kwargs)
        return y


class Tail:
    """The group's elementwise program: `__call__(y, *runtime)` (y: the head's output or None)."""

    def __init__(self, program: Program, group: Group, ctx: Context, launch: Launch):
        out = ctx.val(group.output)
        self.shape, self.dtype, self.device = tuple(out.shape), out.dtype, out.device
        self.op = FAMILIES["elementwise"][0 if out.dtype == torch.float32 else 1](program.text)
        self.names = [n for n, _ in program.runtime]
        self.constants = {n: t.contiguous() for n, t in program.constants.items()}
        head = ctx.val(group.head_out) if group.head is not None else None
        self.in_place = HEAD in program.operands and tuple(head.shape) == self.shape
        self.launch = launch
        self.name = f"{type(self.op).__name__}({program.text!r})"

    def __call__(self, y: torch.Tensor | None, *xs: torch.Tensor) -> torch.Tensor:
        operands = dict(self.constants)
        operands.update(zip(self.names, map(_contiguous, xs)))
        if y is not None:
            operands[HEAD] = y
        out = y if self.in_place else torch.empty(self.shape, dtype=self.dtype, device=self.device)
        self.op.forward(stream=self.launch.stream, out=out, **operands)
        return out


class Kernel:
    """A group as one call: the head (if any) on the first `n` arguments, then the program on the rest."""

    def __init__(self, kind: str, head: Head | None, n: int, tail: Tail | None):
        self.__name__ = f"cuopjit_{kind}"   # how the compiled graph's code names it
        self.head, self.n, self.tail = head, n, tail
        self.name = " + ".join(k.name for k in (head, tail) if k is not None)

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        y = self.head(*args[:self.n]) if self.head is not None else None
        return self.tail(y, *args[self.n:]) if self.tail is not None else y


def build(group: Group, ctx: Context, launch: Launch, tf32: dict[str, bool]) -> tuple[Kernel, list[fx.Node]]:
    """The group's kernel and the values it takes (FX nodes), in its argument order."""
    head, inputs = None, []
    if group.head is not None:
        head = Head(group, ctx, launch, tf32)
        inputs = [group.head.args[k] for k in INPUTS[group.head.op]]
    program = render(group, ctx)
    tail = None
    n = len(inputs)
    if program is not None:
        tail = Tail(program, group, ctx, launch)
        inputs += [node for _, node in program.runtime]
    return Kernel(group.kind, head, n, tail), inputs
