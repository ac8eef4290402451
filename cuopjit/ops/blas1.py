"""BLAS level 1 (cuOP ScalFloat, AxpyFloat, CopyFloat, DotFloat and their Double twins).

x and y may have any shapes holding the same number of elements (as cuBLAS sees them: flat
vectors, unit stride). Scal, Axpy and Copy are the streaming map family of elementwise.py (its
docstring maps their JITConfig fields). Dot is the family below: a deterministic two-pass
reduction (templates/blas1/dot.cu.jinja). How each JITConfig field changes Dot:

    kernel_type               "simple": scalar loads, one element per thread per grid-stride step
                              (VEC = ITEMS = 1); every other kind ("auto", "tiled", "warp_optimized",
                              "tensor_core"): 16-byte loads where pointers allow, ITEMS in flight
    block_size                threads per block (0: 256)
    tile_size                 elements per thread per step: 8 .. 128 (0: four 16-byte vectors,
                              16 float / 8 double); "simple" ignores it
    enable_loop_unroll        all loads of a step issued before the first multiply-add, vs one
                              vector pair at a time
    enable_memory_coalescing  16-byte loads vs scalar loads
    enable_shared_memory_opt, enable_tensor_core, enable_tma   nothing to use them for: ignored
optimization_level and max_registers reach NVRTC. The first kernel writes one partial sum per
block of a persistent grid (the target's SMs x resident blocks) into the plan's workspace; the
second adds them in a fixed order into `result`, so equal inputs give equal bits on every run. float16 and
bfloat16 (x, y and result of that dtype) multiply and add in float32 (partials included) and round the sum once
into result; forward returns that rounded value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..build import pipeline
from ..device import streams
from ..config import ConfigSnapshot
from ..run.plan import Family, KernelLaunch, Plan, i32, i64, ptr
from ..target import Target
from ..tensor import Tensor, empty
from .elementwise import kernels as elementwise
from .base import Operator, cdiv, compute_dtype, dtype_tag, scalar_t, typed
from .params import plan_setting

DOT_TEMPLATE = "blas1/dot.cu.jinja"
DOT_VECTORS = 4   # 16-byte vectors per thread per step when tile_size is 0


# --- the map operators ---------------------------------------------------------------------------
def check_same_size(op: Operator, x: Tensor, y: Tensor) -> None:
    """x and y: tensors of the operator's dtype holding the same number of elements."""
    op.check_operand("x", x)
    op.check_operand("y", y)
    if x.size != y.size:
        raise ValueError(f"{type(op).__name__}: x has shape {list(x.shape)} ({x.size} elements) and y has shape "
                         f"{list(y.shape)} ({y.size} elements): they must hold the same number of elements")


class _Alpha:
    """`alpha`, passed to the kernel as an argument: setting it re-keys the operator's plans."""

    alpha = plan_setting("alpha")

    def _plan_settings(self) -> tuple:
        """alpha is a kernel argument: it decides the plan."""
        return (self._alpha,)

    def set_alpha(self, alpha: float) -> None:
        self.alpha = alpha


class Scal(_Alpha, Operator):
    """x = alpha * x, in place: `forward(x)` returns x."""

    family = elementwise.family("scal")

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def bind(self, x: Tensor) -> tuple:
        return (x.plan_key, self._state), (x.ptr, x.ptr), x

    def problem(self, x: Tensor) -> elementwise.MapProblem | None:
        self.check_operand("x", x)
        if x.size == 0:
            return None
        return elementwise.MapProblem("scal", self.dtype.name, x.size, (x.ptr & 15) == 0, self._alpha)

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), 2.0 * x.size * self.dtype.itemsize


class _Pair(Operator):
    """y = op(x, y) over x and y of equal sizes: `forward(x, y)` returns y."""

    op = "copy"
    _alpha = 0.0

    def bind(self, x: Tensor, y: Tensor) -> tuple:
        return (x.plan_key, y.plan_key, self._state), (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor) -> elementwise.MapProblem | None:
        check_same_size(self, x, y)
        if x.size == 0:
            return None
        return elementwise.MapProblem(self.op, self.dtype.name, x.size, ((x.ptr | y.ptr) & 15) == 0, self._alpha)


class Axpy(_Alpha, _Pair):
    """y = alpha * x + y."""

    family = elementwise.family("axpy")
    op = "axpy"

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 2.0 * x.size, 3.0 * x.size * self.dtype.itemsize


class Copy(_Pair):
    """y = x."""

    family = elementwise.family("copy")
    op = "copy"

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * x.size * self.dtype.itemsize


# --- the dot family ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DotProblem:
    """sum(x * y) over n elements (n may be 0: the result is 0); `aligned`: x and y 16-byte aligned."""
    dtype: str
    n: int
    aligned: bool


def dot_choices(problem: DotProblem, cfg: ConfigSnapshot, target: Target) -> list[elementwise.MapChoice]:
    """The one kernel shape `cfg` names."""
    threads, vec, items = elementwise.stream_geometry(np.dtype(problem.dtype), cfg, problem.aligned,
                                                      vectors=DOT_VECTORS)
    if cfg.kernel_type == "simple":
        vec, items = 1, 1
    return [elementwise.MapChoice(threads, vec, items, False, cfg.enable_loop_unroll, opts=pipeline.compile_opts(cfg))]


def dot_plan(problem: DotProblem, choice: elementwise.MapChoice, target: Target) -> Plan:
    """Partial sums (x = operand 0, y = 1) into the workspace, then their fixed-order sum into result (2)."""
    dtype = np.dtype(problem.dtype)
    streaming = 2 * problem.n * dtype.itemsize > elementwise.STREAM_BYTES
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "THREADS": choice.threads,
              "VEC": choice.vec, "ITEMS": choice.items, "STREAM": streaming, **elementwise.half_params(dtype)}
    name = (f"dot_{dtype_tag(dtype)}_{choice.label}" + ("_cs" if streaming else "")
            + ("" if choice.unroll else "_nounroll"))
    blocks = elementwise.persistent_grid(cdiv(problem.n, choice.threads * choice.vec * choice.items),
                                         choice.threads, target)
    units = "FP32 cores" if compute_dtype(dtype) == np.float32 else "FP64 cores"
    workspace = ptr(3)
    partial = KernelLaunch(pipeline.make_spec(DOT_TEMPLATE, "dot_partial", name, params, choice.opts), (blocks,),
                           (choice.threads,), (ptr(0), ptr(1), workspace, i64(problem.n)), units=units)
    final = KernelLaunch(pipeline.make_spec(DOT_TEMPLATE, "dot_final", name, params, choice.opts), (1,),
                         (choice.threads,), (workspace, ptr(2), i32(blocks)), units=units)
    return Plan((partial, final), ("x", "y", "result"), workspace=blocks * compute_dtype(dtype).itemsize,
                choice=choice.label)


def dot_problems() -> list[DotProblem]:
    """Large aligned (streaming), small aligned and unaligned dots of every dtype."""
    return [DotProblem(dt, n, aligned) for dt in elementwise.DTYPES
            for n, aligned in ((1 << 28, True), (1 << 20, True), (4097, False))]


DOT = Family("dot", dot_choices, dot_plan, dot_problems)


class Dot(Operator):
    """result = sum(x * y), deterministic: the same inputs give the same bits on every run; float32 accumulates in
    float32 over many independent partial sums."""

    family = DOT

    def forward(self, x: Tensor, y: Tensor, result: Tensor | None = None, *, stream: Any = None) -> Any:
        """x . y as a Python float (waits for the GPU).

        With `result` (a one-element Tensor of this dtype) the sum is written there instead and
        the call returns `result` at once, without waiting (like cuBLAS's device pointer mode).
        """
        if result is not None:
            return super().forward(x, y, result, stream=stream)
        check_same_size(self, x, y)   # bad operands are refused before the result is allocated
        s = streams.current() if stream is None else streams.handle(stream)
        out = empty([1], self.dtype)
        super().forward(x, y, out, stream=s)
        if s:   # to_numpy's copy waits for the legacy default stream (0) only
            streams.synchronize(s)
        return float(out.to_numpy()[0])

    def bind(self, x: Tensor, y: Tensor, result: Tensor) -> tuple:
        key = (x.plan_key, y.plan_key, result.plan_key)
        return key, (x.ptr, y.ptr, result.ptr), result

    def problem(self, x: Tensor, y: Tensor, result: Tensor | None = None) -> DotProblem:
        check_same_size(self, x, y)
        name = type(self).__name__
        if result is None:
            raise TypeError(f"{name}: pass result= (a one-element Tensor) when calling through a JIT wrapper; "
                            f"{name}.forward(x, y) returns a Python float")
        self.check_operand("result", result)
        if result.size != 1:
            raise ValueError(f"{name}: result has shape {list(result.shape)}, expected one element ([1] or [])")
        return DotProblem(self.dtype.name, x.size, ((x.ptr | y.ptr) & 15) == 0)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 2.0 * x.size, 2.0 * x.size * self.dtype.itemsize


ScalFloat, ScalDouble, ScalHalf, ScalBFloat16 = typed(Scal, "Scal", "SCAL", elementwise.DTYPES)
AxpyFloat, AxpyDouble, AxpyHalf, AxpyBFloat16 = typed(Axpy, "Axpy", "AXPY", elementwise.DTYPES)
CopyFloat, CopyDouble, CopyHalf, CopyBFloat16 = typed(Copy, "Copy", "COPY (16-bit: bits moved as stored)",
                                                      elementwise.DTYPES)
DotFloat, DotDouble, DotHalf, DotBFloat16 = typed(Dot, "Dot", "DOT (16-bit: the float32 sum rounded once)",
                                                  elementwise.DTYPES)


