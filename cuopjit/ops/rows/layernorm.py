"""LayerNormFloat / LayerNormDouble / LayerNormHalf / LayerNormBFloat16 (cuOP semantics, PyTorch numerics).

LayerNorm normalises over the trailing dimensions that gamma's shape names (PyTorch's
`normalized_shape`): x of shape [..., *gamma.shape]. cuOP's example passes an NCHW input with a
gamma of length C: when gamma is 1-D, does not match x's trailing dimensions, and has x.shape[1]
elements, each sample is normalised over C*H*W and gamma/beta are applied per channel. With no
gamma, the last dimension is normalised and no affine transform is applied. Variance is biased
(divides by the count) and computed from registers as the mean of squared deviations. float16 and
bfloat16 (x, y, gamma and beta all of that dtype) are computed in float32 and rounded once on store.

Kernels (templates/rows/layernorm.cu.jinja) are the row kernels of rows.py, whose docstring gives
the JITConfig mapping: a row in registers of one block or a cluster, the stream kernel, the
resident kernel (split-row in one launch, each chunk re-read from L2 rather than device memory;
rows of up to rows.resident's L2 share; H100 measured about 1.5 reads of x, benchmarks/NOTES.md 16),
or split-row (partial (mean, M2) per chunk in the plan's workspace, then
a combine-and-write kernel: two reads).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from ...tensor import Tensor
from . import common as rows
from ..base import HALF_DTYPES, Operator, compute_dtype, dtype_tag, scalar_t, storage_t, vector_width, typed
from ..params import non_negative_eps, plan_setting

TEMPLATE = "rows/layernorm.cu.jinja"
# Stream-kernel table per itemsize (rows.plan_rows): (max row length, threads, blocks per SM, vectors in
# flight, cp.async stash). Measured on H100 against the cluster kernels (NOTES.md 5C, run 2):
# float32 32768: 2731 vs 2710 GB/s; float64 32768: 2793 vs 2530. 16-bit types: 512 threads, 2 blocks per SM
# (benchmarks/mb_half_sweep.py, H100, float16: geomean 2423 GB/s vs 1867 for 1024 x 1, 2340 for 256 x 4, 1810
# for clusters).
LN_STREAM = {4: ((32768, 1024, 1, 2, True),), 8: ((32768, 1024, 1, 2, True),), 2: ((32768, 512, 2, 2, True),)}
DTYPES = ("float32", "float64", *HALF_DTYPES)
OPERANDS = ("x", "y", "gamma", "beta")
RESIDENT_SLACK = 0.0   # resident kernel: extra lead, in blocks the target holds at once (resident_lead;
                       # H100 NCHW 32x64x224x224 with RESIDENT_KEEP: 0 / 0.25 / 0.5 -> 0.376 / 0.382 / 0.402 ms)
RESIDENT_KEEP = True   # resident kernel: P's loads keep x's lines in L2 (evict-last hint) for A: 0.392 -> 0.382 ms


@dataclass(frozen=True)
class LayerNormProblem:
    """`rows` rows of `length` normalised scalars; gamma/beta index = column // gdiv (gdiv > 1: cuOP's
    per-channel form); affine 0 (no gamma), 1 (gamma) or 2 (gamma and beta); `aligned`: every pointer
    16-byte aligned and length a multiple of the vector width."""
    dtype: str
    rows: int
    length: int
    gdiv: int
    affine: int
    aligned: bool
    eps: float


def long_rows(dtype: np.dtype) -> rows.LongRows:
    """Automatic layout of rows longer than 2048 (measured on H100, benchmarks/NOTES.md 5B/5C):
    blocks of 512 threads before clusters, 32 float / 16 double elements per thread; longer
    rows take the stream kernel's (max length, threads, blocks per SM, vectors in flight) where
    it measured faster, and only with a row per block for every SM (fewer rows: clusters)."""
    epts = (32,) if compute_dtype(dtype) == np.float32 else (16,)
    return rows.LongRows(epts, 512, LN_STREAM[np.dtype(dtype).itemsize])


def choices(problem: LayerNormProblem, cfg: ConfigSnapshot, target: Target) -> list[rows.RowChoice]:
    """The one row kernel `cfg` names for this problem on `target`: split-row becomes the resident
    kernel (one launch, L2 re-reads) where rows.resident allows it."""
    dtype = np.dtype(problem.dtype)
    choice = rows.choose(dtype, cfg, target, problem.rows, problem.length, problem.aligned, long_rows(dtype))
    return [rows.resident(choice, dtype, cfg, target, problem.rows)]


def _spec(problem: LayerNormProblem, kind: str, choice: rows.RowChoice) -> pipeline.KernelSpec:
    dtype, per_channel = np.dtype(problem.dtype), problem.gdiv > 1
    params = {"kind": kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, "AFFINE": problem.affine,
              "PER_CHANNEL": int(per_channel), **choice.layout.params()}
    if dtype.name in HALF_DTYPES:
        params["elem_t"] = storage_t(dtype)
    tag = f"{choice.layout.tag()}a{problem.affine}" + ("pc" if per_channel else "")
    if kind == "resident" and RESIDENT_KEEP:
        params["KEEP"] = 1
        tag += "k"
    name = f"layernorm_{kind}_{dtype_tag(dtype)}_{tag}" + ("" if choice.unroll else "_nounroll")
    return pipeline.make_spec(TEMPLATE, f"layernorm_{kind}", name, params, choice.opts)


def plan(problem: LayerNormProblem, choice: rows.RowChoice, target: Target) -> Plan:
    """Operands x, y, gamma, beta (0 when absent); the split-row path's partial results are the workspace."""
    dtype, cdt = np.dtype(problem.dtype), compute_dtype(problem.dtype)
    units = "FP32 cores" if cdt == np.float32 else "FP64 cores"
    layout, n_rows, length = choice.layout, problem.rows, problem.length
    tail = (i64(n_rows), i32(length), i32(problem.gdiv), scalar(cdt, problem.eps))
    if layout.kind == "stream":
        launch = KernelLaunch(_spec(problem, "stream", choice), (min(n_rows, 2 ** 31 - 1),), (layout.threads,),
                              (ptr(0), ptr(1), ptr(2), ptr(3), *tail, i32(layout.stash)),
                              shared=layout.stash_bytes(dtype), units=units, max_carveout=True)
        return Plan((launch,), OPERANDS, choice=choice.label)
    if layout.kind == "rows":
        launch = KernelLaunch(_spec(problem, "rows", choice), (rows.row_grid(layout, n_rows),), (layout.threads,),
                              (ptr(0), ptr(1), ptr(2), ptr(3), *tail), cluster=(layout.cl, 1, 1), units=units)
        return Plan((launch,), OPERANDS, choice=choice.label)
    blocks = n_rows * layout.chunks
    if blocks >= 2 ** 31:
        raise ValueError(f"LayerNorm: {n_rows} rows of {length} need too many blocks")
    if layout.kind == "resident":
        return _resident_plan(problem, choice, target, units)
    part = KernelLaunch(_spec(problem, "partials", choice), (blocks,), (layout.threads,),
                        (ptr(0), ptr(4), i64(n_rows), i32(length), i32(layout.chunks)), units=units)
    apply = KernelLaunch(_spec(problem, "apply", choice), (blocks,), (layout.threads,),
                         (ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), i64(n_rows), i32(length), i32(layout.chunks),
                          i32(problem.gdiv), scalar(cdt, problem.eps)), units=units)
    return Plan((part, apply), OPERANDS, workspace=blocks * 2 * cdt.itemsize, choice=choice.label)


def resident_lead(n_rows: int, layout: rows.RowPlan, target: Target) -> int:
    """P items the resident kernel hands out before its first A: a row's chunks (no deadlock), plus
    RESIDENT_SLACK of the blocks the target holds at once (so an A rarely waits for its row's last P),
    at most one more row (what L2 holds: rows.resident); at most every item."""
    held = target.sm_count * max(1, layout.occ // layout.threads)
    return min(n_rows * layout.chunks, layout.chunks + min(layout.chunks, int(RESIDENT_SLACK * held)))


def _resident_plan(problem: LayerNormProblem, choice: rows.RowChoice, target: Target, units: str) -> Plan:
    """reset, then resident: workspace = counters (1 + 2 rows u32, 16-byte padded), partials
    (rows x chunks x 2), then (mean, rstd) per row, in the compute dtype."""
    dtype, layout, n_rows = compute_dtype(problem.dtype), choice.layout, problem.rows
    counters = 1 + 2 * n_rows
    ctr_bytes = -(-counters * 4 // 16) * 16
    part_bytes = n_rows * layout.chunks * 2 * dtype.itemsize
    reset = KernelLaunch(pipeline.make_spec(TEMPLATE, "layernorm_reset", "layernorm_reset",
                                           {"kind": "reset", "scalar_t": "unsigned int", "unroll": True},
                                           choice.opts),
                         (min(-(-counters // 256), 1024),), (256,), (ptr(4), i32(counters)), units="FP32 cores")
    main = KernelLaunch(_spec(problem, "resident", choice), (2 * n_rows * layout.chunks,), (layout.threads,),
                        (ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(4, ctr_bytes), ptr(4, ctr_bytes + part_bytes),
                         i64(n_rows), i32(problem.length), i32(layout.chunks),
                         i32(resident_lead(n_rows, layout, target)), i32(problem.gdiv), scalar(dtype, problem.eps)),
                        units=units)
    return Plan((reset, main), OPERANDS, workspace=ctr_bytes + part_bytes + 2 * n_rows * dtype.itemsize,
                choice=choice.label)


def problems() -> list[LayerNormProblem]:
    """Row-length buckets (aligned and not; many rows: stream kernels, few: clusters), no affine,
    cuOP's per-channel NCHW form (the resident kernel), rows too long for L2 (split-row), every dtype."""
    out = []
    for dt in DTYPES:
        out += [LayerNormProblem(dt, n, length, 1, 2, aligned, 1e-5) for n, length, aligned in (
            (4096, 128, True), (4096, 1024, True), (1024, 8192, True), (1024, 32768, True), (8, 32768, True),
            (4096, 1000, False), (4096, 7, False))]
        out += [LayerNormProblem(dt, 4096, 1024, 1, 0, True, 1e-5),
                LayerNormProblem(dt, 8, 64 * 224 * 224, 224 * 224, 2, True, 1e-5),
                LayerNormProblem(dt, 4, 1 << 23, 1, 2, True, 1e-5)]
    return out


FAMILY = Family("layernorm", choices, plan, problems)


class LayerNorm(Operator):
    """`set_gamma(g)`, `set_beta(b)`, `forward(x, y)`: y = (x - mean) / sqrt(var + eps) * gamma + beta; returns y."""

    family = FAMILY
    eps = plan_setting("eps", check=non_negative_eps)

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self._gamma: Tensor | None = None
        self._beta: Tensor | None = None
        self._weights: tuple[int, int] = (0, 0)
        self.eps = eps

    def set_gamma(self, gamma: Tensor) -> None:
        """Scale; its shape names the normalised trailing dimensions (or C, for cuOP's NCHW form)."""
        self._gamma = self.check_operand("gamma", gamma)
        self._weights_changed()

    def set_beta(self, beta: Tensor) -> None:
        """Shift; must have gamma's shape."""
        self._beta = self.check_operand("beta", beta)
        self._weights_changed()

    def _weights_changed(self) -> None:
        """Keep the pointers forward passes (0: absent) beside the tensors, then re-key the plans."""
        g, b = self._gamma, self._beta
        self._weights = (0 if g is None else g.ptr, 0 if b is None else b.ptr)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        """eps, gamma's and beta's shapes (None: absent) and their alignment decide the plan."""
        g, b = self._gamma, self._beta
        return (self._eps, None if g is None else tuple(g.shape), None if b is None else tuple(b.shape),
                (self._weights[0] | self._weights[1]) & 15)

    def bind(self, x: Tensor, y: Tensor) -> tuple:
        return (x.plan_key, y.plan_key, self._state), (x.ptr, y.ptr, *self._weights), y

    def _layout(self, x: Tensor) -> tuple[int, int, int]:
        """(rows, L, gdiv): rows of L normalised scalars; gamma index = column // gdiv."""
        name = type(self).__name__
        g, b = self._gamma, self._beta
        if b is not None and (g is None or tuple(b.shape) != tuple(g.shape)):
            raise ValueError(f"{name}: beta has shape {list(b.shape)} but gamma has shape "
                             f"{None if g is None else list(g.shape)}: set a gamma of beta's shape")
        if g is None:
            if x.ndim == 0:
                raise ValueError(f"{name}: x is 0-D: layer norm needs at least one dimension")
            return math.prod(x.shape[:-1]), x.shape[-1], 1
        if g.ndim <= x.ndim and tuple(x.shape[x.ndim - g.ndim:]) == tuple(g.shape):
            return math.prod(x.shape[:x.ndim - g.ndim]), g.size, 1
        if g.ndim == 1 and x.ndim >= 2 and x.shape[1] == g.shape[0]:
            return x.shape[0], math.prod(x.shape[1:]), math.prod(x.shape[2:])
        raise ValueError(f"{name}: gamma has shape {list(g.shape)} and x has shape {list(x.shape)}: gamma must "
                         f"match x's trailing dimensions (PyTorch normalized_shape) or be [C] = [x.shape[1]]")

    def problem(self, x: Tensor, y: Tensor) -> LayerNormProblem | None:
        name = type(self).__name__
        self.check_operand("x", x)
        self.check_operand("y", y)
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        n_rows, length, gdiv = self._layout(x)
        if x.size == 0:
            return None
        if length >= 2 ** 31:
            raise ValueError(f"{name}: rows of {length} elements are over 2**31 - 1")
        affine = 0 if self._gamma is None else (2 if self._beta is not None else 1)
        ptrs = x.ptr | y.ptr | self._weights[0] | self._weights[1]
        aligned = (ptrs & 15) == 0 and length % vector_width(self.dtype) == 0
        return LayerNormProblem(self.dtype.name, n_rows, length, gdiv, affine, aligned, self._eps)

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """~8 flops per element; x read once, y written once, gamma and beta read once."""
        params = sum(t.size for t in (self._gamma, self._beta) if t is not None)
        return 8.0 * x.size, float((2 * x.size + params) * self.dtype.itemsize)


LayerNormFloat, LayerNormDouble, LayerNormHalf, LayerNormBFloat16 = typed(
    LayerNorm, "LayerNorm", "layer norm (gamma and beta in x's dtype)", ("float32", "float64", "float16", "bfloat16"))


