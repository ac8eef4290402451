"""Layout copies: `cuopjit.contiguous(t)`, `cuopjit.channels_last(t)` and the Relayout operator they run (Float, Double,
Half, BFloat16: 16-bit elements moved as stored),
plus `memory_layout`, `fits` and `same_layout`, the rules the operators that read several layouts share.

Every conversion between the layouts of cuopjit/layout.py is a batched 2-D transpose of the buffer (the family
`relayout`, templates/shape/transpose.cu.jinja): contiguous -> channels_last transposes each sample's C x HW
matrix, channels_last -> contiguous each HW x C one, transposed (..., R, S) <-> contiguous each S x R / R x S
matrix. channels_last of a transposed tensor goes through contiguous (two copies). A tensor whose memory already
has the asked order (C == 1 or H == W == 1 for channels_last) comes back as a view of that layout, no copy.

How each JITConfig field changes the relayout kernel: block_size = threads per block (0: 256; each moves
1024 / threads scalars of the 1024-scalar tile), enable_loop_unroll = every load of a tile issued before the
first shared-memory store; optimization_level and max_registers reach NVRTC. kernel_type, tile_size,
enable_memory_coalescing, enable_shared_memory_opt, enable_tensor_core and enable_tma are ignored: the one
kernel is the tiled transpose through shared memory (both sides coalesced), scalar accesses, tile fixed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import layout as layouts
from ..build import pipeline
from ..config import ConfigSnapshot
from ..layout import CHANNELS_LAST, CONTIGUOUS, TRANSPOSED
from ..run.plan import Family, KernelLaunch, Plan, i64, ptr
from ..target import Target
from ..tensor import Tensor, empty, wrap
from . import knobs
from .base import HALF_DTYPES, Operator, cdiv, compute_dtype, dtype_tag, scalar_t, storage_t, typed
from .choice import kernel_choice

TEMPLATE = "shape/transpose.cu.jinja"
DEFAULT_THREADS = 256
TILE = 1024   # scalars per tile (4 KB float, 8 KB double, 2 KB float16 / bfloat16 of shared memory)
DTYPES = ("float32", "float64", *HALF_DTYPES)   # elementwise.kernels.DTYPES (not imported: elementwise imports us)


def memory_layout(t: Tensor) -> str:
    """The layout `t`'s memory has: t.layout, or contiguous where both orders coincide (C == 1, H == W == 1, a
    transposed R x 1 ...), so that such tensors mix with contiguous ones."""
    if t.layout == CONTIGUOUS:
        return CONTIGUOUS
    return layouts.of(t.shape, t.strides) or t.layout


def fits(t: Tensor, layout: str) -> bool:
    """Whether t's memory is what `layout` would give its shape (a channels_last N x C x 1 x 1 fits contiguous)."""
    if layout == CHANNELS_LAST and t.ndim != 4 or layout == TRANSPOSED and t.ndim < 2:
        return False
    return memory_layout(t) == (layouts.of(t.shape, layouts.strides(t.shape, layout)) or layout)


def same_layout(op: str, operands: list[tuple[str, Tensor]]) -> str:
    """The memory layout every (name, tensor) fits: the first one's other than contiguous, else contiguous.
    ValueError names two operands and their layouts where one does not fit."""
    lead = next((k for k, (_, t) in enumerate(operands) if memory_layout(t) != CONTIGUOUS), 0)
    want = memory_layout(operands[lead][1])
    for k, (_, t) in enumerate(operands):
        if not fits(t, want):
            (a, ta), (b, tb) = (operands[i] for i in sorted((lead, k)))
            raise ValueError(f"{op}: {a} is {memory_layout(ta)} but {b} is {memory_layout(tb)}: pass tensors of "
                             "one layout (convert with cuopjit.contiguous(t) or cuopjit.channels_last(t))")
    return want


# --- the relayout family ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RelayoutProblem:
    """y[b] = x[b]^T for `batch` row-major rows x cols matrices."""
    dtype: str
    batch: int
    rows: int
    cols: int


RelayoutChoice = kernel_choice(
    "RelayoutChoice", "threads tr tc unroll", "{tr}x{tc}_b{threads}",
    "Threads per block, the tile (tr x tc = TILE), unrolled loads.")


def tile_shape(rows: int, cols: int) -> tuple[int, int]:
    """(tr, tc): 32 x 32, or for a side under 32 the next power of two by TILE over it (a warp still reads
    and writes contiguous runs)."""
    if cols < 32:
        tc = 1 << max(0, (cols - 1).bit_length())
        return TILE // tc, tc
    if rows < 32:
        tr = 1 << max(0, (rows - 1).bit_length())
        return tr, TILE // tr
    return 32, 32


def choices(problem: RelayoutProblem, cfg: ConfigSnapshot, target: Target) -> list[RelayoutChoice]:
    """The one kernel shape `cfg` names."""
    knobs.check("streaming kernels", cfg)
    tr, tc = tile_shape(problem.rows, problem.cols)
    return [RelayoutChoice(cfg.block_size or DEFAULT_THREADS, tr, tc, cfg.enable_loop_unroll, opts=pipeline.compile_opts(cfg))]


def plan(problem: RelayoutProblem, choice: RelayoutChoice, target: Target) -> Plan:
    """One launch, a tile per block: x = operand 0, y = operand 1."""
    dtype = np.dtype(problem.dtype)
    params = {"scalar_t": scalar_t(dtype), "unroll": choice.unroll, "THREADS": choice.threads, "TR": choice.tr,
              "TC": choice.tc, **({"elem_t": storage_t(dtype)} if dtype.name in HALF_DTYPES else {})}
    name = f"transpose_{dtype_tag(dtype)}_{choice.label}" + ("" if choice.unroll else "_nounroll")
    spec = pipeline.make_spec(TEMPLATE, "transpose", name, params, choice.opts)
    tiles_c = cdiv(problem.cols, choice.tc)
    per_matrix = cdiv(problem.rows, choice.tr) * tiles_c
    tiles = problem.batch * per_matrix
    args = (ptr(0), ptr(1), i64(problem.rows), i64(problem.cols), i64(tiles_c), i64(per_matrix), i64(tiles))
    units = "FP32 cores" if compute_dtype(dtype) == np.float32 else "FP64 cores"
    return Plan((KernelLaunch(spec, (min(tiles, 2 ** 31 - 1),), (choice.threads,), args, units=units),),
                ("x", "y"), choice=choice.label)


def problems() -> list[RelayoutProblem]:
    """ResNet's NCHW <-> NHWC at 56 x 56 x 256, an RGB batch (C = 3 each way), an odd transposed stack."""
    cases = ((32, 256, 56 * 56), (32, 56 * 56, 256), (8, 3, 224 * 224), (8, 224 * 224, 3), (5, 33, 7))
    return [RelayoutProblem(dt, b, r, c) for dt in DTYPES for b, r, c in cases]


FAMILY = Family("relayout", choices, plan, problems)


def transposition(shape: tuple[int, ...], src: str, dst: str) -> tuple[int, int, int] | None:
    """(batch, rows, cols) of the transpose that turns `src` memory of logical `shape` into `dst` memory; None
    for a pair no single transpose converts (channels_last <-> transposed)."""
    if src == CONTIGUOUS and dst == CHANNELS_LAST:
        return shape[0], shape[1], shape[2] * shape[3]
    if src == CHANNELS_LAST and dst == CONTIGUOUS:
        return shape[0], shape[2] * shape[3], shape[1]
    if TRANSPOSED in (src, dst) and CHANNELS_LAST not in (src, dst):
        r, s = shape[-2], shape[-1]
        return (math.prod(shape[:-2]),) + ((s, r) if src == TRANSPOSED else (r, s))
    return None


class Relayout(Operator):
    """`forward(x, y)`: y = x in y's layout (same logical shape); returns y. Pairs: contiguous <-> channels_last,
    contiguous <-> transposed, and any layout to itself (a copy)."""

    family = FAMILY

    def bind(self, x: Tensor, y: Tensor) -> tuple:
        return (x.plan_key, y.plan_key), (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor) -> RelayoutProblem | None:
        op = type(self).__name__
        x = self.check_operand("x", x, layouts=layouts.LAYOUTS)
        y = self.check_operand("y", y, layouts=layouts.LAYOUTS)
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{op}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        src, dst = memory_layout(x), memory_layout(y)
        how = transposition(x.shape, src, dst) if src != dst else (1, 1, x.size)   # one 1 x n "transpose": a copy
        if how is None:
            raise ValueError(f"{op}: x is {src} and y is {dst}: {op} converts contiguous <-> channels_last and "
                             "contiguous <-> transposed (convert through cuopjit.contiguous first)")
        if x.size == 0:
            return None
        return RelayoutProblem(self.dtype.name, *how)

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        return 0.0, 2.0 * x.nbytes


RelayoutFloat, RelayoutDouble, RelayoutHalf, RelayoutBFloat16 = typed(Relayout, "Relayout", "layout copy", DTYPES)


_OPS = {cls.dtype: cls() for cls in (RelayoutFloat, RelayoutDouble, RelayoutHalf, RelayoutBFloat16)}


def _tensor(t: Any, who: str) -> Tensor:
    return t if isinstance(t, Tensor) else wrap(t, f"{who}: the array")


def _to(t: Tensor, layout: str) -> Tensor:
    """t in `layout`: itself, a view where the memory already has that order, else a copy on the current stream."""
    if t.layout == layout:
        return t
    if memory_layout(t) == (layouts.of(t.shape, layouts.strides(t.shape, layout)) or layout):
        return Tensor._view(t.ptr, t.shape, t.dtype, t.device, t, layout)
    if t.layout == TRANSPOSED and layout == CHANNELS_LAST:
        return _to(_to(t, CONTIGUOUS), CHANNELS_LAST)
    out = empty(t.shape, t.dtype, layout)
    _OPS[t.dtype].forward(t, out)
    return out


def contiguous(t: Any) -> Tensor:
    """`t` as a contiguous (row-major) Tensor: t itself when it is one, else a new Tensor (a copy; a view when the
    memory is already row-major). Takes Tensors and torch / CuPy / JAX GPU arrays."""
    return _to(_tensor(t, "contiguous()"), CONTIGUOUS)


def channels_last(t: Any) -> Tensor:
    """A 4-D (N, C, H, W) `t` as a channels_last Tensor (memory N, H, W, C): t itself when it is one, else a new
    Tensor (a copy; a view when C == 1 or H == W == 1)."""
    t = _tensor(t, "channels_last()")
    if t.ndim != 4:
        raise ValueError(f"channels_last(): t has shape {list(t.shape)}; channels_last needs a 4-D (N, C, H, W) "
                         "tensor")
    return _to(t, CHANNELS_LAST)
