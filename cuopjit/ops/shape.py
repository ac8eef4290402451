"""FlattenFloat / ViewFloat (and Double, Half, BFloat16): reshaping copies into a caller-supplied output (16-bit
elements moved as stored: every bit kept).

Flatten copies x into y, whose shape must be x's shape with dims start_dim..end_dim merged: the
streaming copy of elementwise.py (its docstring maps the JITConfig fields). y is contiguous (row-major
over the logical order, as torch.flatten's result); x may be channels_last or transposed, and then the
copy is the layout copy of layouts.py in the same one pass (x's logical order written into y, as
torch.flatten copies a channels_last tensor). View reads logical sub-blocks of a contiguous x only: a
channels_last or transposed x raises, saying to convert it with cuopjit.contiguous first. View copies the
sub-block of x that starts at `offset` and has `shape` into y (templates/shape/copy_view.cu.jinja, the
family below); it raises when the block leaves x. How each JITConfig field changes View:

    kernel_type               "simple": scalar accesses; every other kind ("auto", "tiled",
                              "warp_optimized", "tensor_core"): 16-byte accesses where the runs,
                              strides and pointers line up
    block_size                threads per block (0: 256)
    enable_memory_coalescing  16-byte accesses (where possible) vs scalar accesses
    tile_size, enable_loop_unroll, enable_shared_memory_opt, enable_tensor_core, enable_tma
                              ignored: each thread moves one access per grid-stride step, with
                              nothing to unroll, stage in shared memory or hand to other units
optimization_level and max_registers reach NVRTC. The grid is persistent: the target's SMs x
resident blocks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..build import pipeline
from ..config import ConfigSnapshot
from ..run.plan import Family, KernelLaunch, Plan, i64, ptr
from ..target import Target
from ..tensor import Tensor
from ..layout import CONTIGUOUS, LAYOUTS
from .elementwise import kernels as elementwise
from .base import Operator, cdiv, dtype_tag, scalar_t, vector_width, typed
from . import layouts
from .choice import kernel_choice

VIEW_TEMPLATE = "shape/copy_view.cu.jinja"
VIEW_THREADS = 256


def flattened_shape(shape: Sequence[int], start_dim: int = 1, end_dim: int = -1) -> tuple[int, ...]:
    """shape with dims start_dim..end_dim (inclusive, negative counts from the end) merged into one."""
    nd = len(shape)
    if nd == 0:
        return (1,)
    s = start_dim + nd if start_dim < 0 else start_dim
    e = end_dim + nd if end_dim < 0 else end_dim
    if not (0 <= s < nd and 0 <= e < nd):
        raise ValueError(f"start_dim={start_dim}, end_dim={end_dim} out of range for a {nd}-D input "
                         f"of shape {list(shape)}")
    if s > e:
        raise ValueError(f"start_dim={start_dim} comes after end_dim={end_dim} for shape {list(shape)}")
    return tuple(shape[:s]) + (math.prod(shape[s:e + 1]),) + tuple(shape[e + 1:])


def _is_relayout(problem: Any) -> bool:
    return isinstance(problem, layouts.RelayoutProblem)


def _flatten_problems() -> list:
    """The streaming copy's problems and NHWC -> NCHW orders (ResNet's 56 x 56 x 256, an odd 7 x 7 x 33)."""
    return elementwise.problems("copy") + [layouts.RelayoutProblem(dt, n, hw, c) for dt in elementwise.DTYPES
                                           for n, hw, c in ((32, 56 * 56, 256), (2, 49, 33))]


FLATTEN = Family("flatten",
                 lambda p, cfg, t: (layouts.choices if _is_relayout(p) else elementwise.choices)(p, cfg, t),
                 lambda p, choice, t: (layouts.plan if _is_relayout(p) else elementwise.plan)(p, choice, t),
                 _flatten_problems)


class Flatten(Operator):
    """y = x with dims start_dim..end_dim merged (a copy into y): `forward(x, y, start_dim=1, end_dim=-1)`; x of
    any layout, y contiguous."""

    family = FLATTEN

    def bind(self, x: Tensor, y: Tensor, start_dim: int = 1, end_dim: int = -1) -> tuple:
        key = (x.plan_key, y.plan_key, start_dim, end_dim)
        return key, (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor, start_dim: int = 1, end_dim: int = -1
                 ) -> elementwise.MapProblem | layouts.RelayoutProblem | None:
        x = self.check_operand("x", x, layouts=LAYOUTS)
        self.check_operand("y", y)
        want = flattened_shape(x.shape, start_dim, end_dim)
        if tuple(y.shape) != want:
            raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)}, expected {list(want)} "
                             f"(x of shape {list(x.shape)} flattened from dim {start_dim} to {end_dim})")
        if x.size == 0:
            return None
        src = layouts.memory_layout(x)
        if src != CONTIGUOUS:
            return layouts.RelayoutProblem(self.dtype.name, *layouts.transposition(x.shape, src, CONTIGUOUS))
        return elementwise.MapProblem("copy", self.dtype.name, x.size, ((x.ptr | y.ptr) & 15) == 0)

    def work(self, x: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * x.size * self.dtype.itemsize


# --- the view family ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ViewProblem:
    """Copy `total` scalars: runs of `run` contiguous scalars of x from scalar `base`, the run index
    decomposed over `outer` ((size, x stride in scalars) per outer dimension); `aligned`: both pointers."""
    dtype: str
    total: int
    run: int
    base: int
    outer: tuple[tuple[int, int], ...]
    aligned: bool


ViewChoice = kernel_choice(
    "ViewChoice", "threads vec", "b{threads}_v{vec}",
    "Threads per block and scalars per access.")


def view_problem(dtype: np.dtype, xshape: Sequence[int], offset: Sequence[int], shape: Sequence[int],
                 aligned: bool) -> ViewProblem:
    """The runs of the block of x (shape `xshape`) at `offset` with `shape`; the trailing dims the view
    keeps whole fold into the run."""
    nd = len(xshape)
    strides = [math.prod(xshape[d + 1:]) for d in range(nd)]
    base = sum(o * s for o, s in zip(offset, strides))
    k = nd - 1
    while k > 0 and shape[k] == xshape[k]:
        k -= 1
    run = math.prod(shape[k:]) if nd else 1
    outer = tuple((shape[d], strides[d]) for d in range(k) if shape[d] != 1)
    return ViewProblem(np.dtype(dtype).name, math.prod(shape), run, base, outer, aligned)


def view_choices(problem: ViewProblem, cfg: ConfigSnapshot, target: Target) -> list[ViewChoice]:
    """The one kernel shape `cfg` names: 16-byte accesses when everything lines up and cfg allows them."""
    vec = vector_width(np.dtype(problem.dtype))
    wide = (cfg.kernel_type != "simple" and cfg.enable_memory_coalescing and problem.aligned
            and problem.run % vec == 0 and problem.base % vec == 0 and all(s % vec == 0 for _, s in problem.outer))
    return [ViewChoice(cfg.block_size or VIEW_THREADS, vec if wide else 1, opts=pipeline.compile_opts(cfg))]


def view_plan(problem: ViewProblem, choice: ViewChoice, target: Target) -> Plan:
    """One launch: x = operand 0, y = operand 1."""
    dtype = np.dtype(problem.dtype)
    nout, vec, threads = len(problem.outer), choice.vec, choice.threads
    params = {"scalar_t": scalar_t(dtype), "unroll": True, "THREADS": threads, "VEC": vec, "NOUT": nout,
              **elementwise.half_params(dtype)}
    spec = pipeline.make_spec(VIEW_TEMPLATE, "view_copy", f"view_{dtype_tag(dtype)}_b{threads}_v{vec}_d{nout}",
                             params, choice.opts)
    total = problem.total // vec
    grid = elementwise.persistent_grid(cdiv(total, threads), threads, target)
    args = [ptr(0), ptr(1), i64(total), i64(problem.run // vec), i64(problem.base)]
    for size, stride in problem.outer:
        args += [i64(size), i64(stride)]
    return Plan((KernelLaunch(spec, (grid,), (threads,), args),), ("x", "y"), choice=choice.label)


def view_problems() -> list[ViewProblem]:
    """A whole-tensor copy, a channel block of NCHW (one outer dim) and an odd 3-D block, every dtype."""
    cases = (((32, 64, 56, 56), (0, 0, 0, 0), (32, 64, 56, 56), True),
             ((4, 6, 8, 8), (1, 2, 0, 0), (2, 3, 8, 8), True),
             ((2, 1, 33, 7, 5), (1, 0, 4, 2, 1), (1, 1, 20, 5, 4), False))
    return [view_problem(np.dtype(dt), xs, off, shape, aligned) for dt in elementwise.DTYPES
            for xs, off, shape, aligned in cases]


VIEW = Family("view", view_choices, view_plan, view_problems)


class View(Operator):
    """`forward(x, y, offset=None, shape=None)`: y = x[offset[0]:offset[0]+shape[0], ...]; returns y.

    offset defaults to `set_offset`'s, else zeros; shape to `set_shape`'s, else y's shape."""

    family = VIEW

    def __init__(self) -> None:
        super().__init__()
        self._offset: tuple[int, ...] | None = None
        self._shape: tuple[int, ...] | None = None

    def set_offset(self, offset: Sequence[int]) -> None:
        self._offset = tuple(int(o) for o in offset)

    def set_shape(self, shape: Sequence[int]) -> None:
        self._shape = tuple(int(s) for s in shape)

    def _resolve(self, x: Tensor, y: Tensor, offset: Sequence[int] | None, shape: Sequence[int] | None
                 ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(offset, shape) of this call: the arguments, else set_offset / set_shape, else zeros / y's shape."""
        offset = self._offset if offset is None else tuple(map(int, offset))
        shape = self._shape if shape is None else tuple(map(int, shape))
        return (tuple([0] * x.ndim) if offset is None else offset), (tuple(y.shape) if shape is None else shape)

    def bind(self, x: Tensor, y: Tensor, offset: Sequence[int] | None = None,
              shape: Sequence[int] | None = None) -> tuple:
        offset, shape = self._resolve(x, y, offset, shape)
        key = (x.plan_key, y.plan_key, offset, shape)
        return key, (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor, offset: Sequence[int] | None = None,
                 shape: Sequence[int] | None = None) -> ViewProblem | None:
        self.check_operand("x", x)
        self.check_operand("y", y)
        offset, shape = self._resolve(x, y, offset, shape)
        name = type(self).__name__
        if len(offset) != x.ndim or len(shape) != x.ndim:
            raise ValueError(f"{name}: offset {list(offset)} and shape {list(shape)} must each have {x.ndim} "
                             f"entries, one per dimension of x (shape {list(x.shape)})")
        if any(o < 0 for o in offset) or any(s < 0 for s in shape):
            raise ValueError(f"{name}: offset {list(offset)} and shape {list(shape)} must not be negative")
        for d, (o, s, n) in enumerate(zip(offset, shape, x.shape)):
            if o + s > n:
                raise ValueError(f"{name}: the view at offset {list(offset)} with shape {list(shape)} leaves x of "
                                 f"shape {list(x.shape)} along dim {d} ({o} + {s} > {n})")
        if tuple(y.shape) != tuple(shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected the view's shape {list(shape)}")
        if y.size == 0:
            return None
        return view_problem(self.dtype, x.shape, offset, shape, ((x.ptr | y.ptr) & 15) == 0)

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return 0.0, 2.0 * y.size * self.dtype.itemsize


FlattenFloat, FlattenDouble, FlattenHalf, FlattenBFloat16 = typed(Flatten, "Flatten", "Flatten", elementwise.DTYPES)
ViewFloat, ViewDouble, ViewHalf, ViewBFloat16 = typed(View, "View", "View", elementwise.DTYPES)


