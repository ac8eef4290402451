"""MatMul / BatchMatMul: C = A @ B with NumPy `matmul` rules, as plans of the GEMM family.

A 2-D MatMul is exactly a GemmFloat problem (the same choices, kernel and plan). Batch dimensions
broadcast as NumPy does; the trailing batch dimensions where every operand either runs along C's
batch or is broadcast over it (a batch of 1) become ONE batched GEMM launch (gemm.cu.jinja's
`batched`: blockIdx.z picks the entry, stride 0 broadcasts); only leading dimensions broadcast in
mixed ways (A [3, 1, m, k] @ B [1, 4, k, n]) add a launch per outer index, planned once. The JITConfig
fields act as in the GEMM family (cuopjit/ops/gemm_plans.py). `set_epilogue` (cuopjit/ops/epilogue_operator.py)
applies a user epilogue where C is stored (acc = A @ B; operands' kinds against C's shape).

Transposed operands: `trans_a` / `trans_b` (settings, as cuOP's) multiply op(A) = A.mT, and an operand whose
layout is "transposed" (torch's `x.mT` / `K.transpose(-1, -2)` of a contiguous x, cuopjit/layout.py) is read
where it lies: either becomes the GEMM problem's trans_a / trans_b (the stored matrix read K-major or
MN-major), never a copy. C is contiguous.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ...config import ConfigSnapshot
from ...expr import FULL, PER_ROW
from ...layout import CONTIGUOUS, TRANSPOSED
from ...run.plan import Family, Plan, ptr
from ...target import Target
from ...tensor import Tensor
from . import plans as gemm_plans
from .problem import retarget
from .. import epilogue
from ..base import HALF_DTYPES, Operator, vector_width, typed
from ..epilogue_operator import Fusable
from ..params import plan_setting


DTYPES = ("float32", "float64", *HALF_DTYPES)


@dataclass(frozen=True)
class MatMulProblem:
    """One batched GEMM (`gemm`) run once per entry of `outer`: (A, B, C) element offsets of each launch."""
    gemm: gemm_plans.GemmProblem
    outer: tuple[tuple[int, int, int], ...] = ((0, 0, 0),)

    @property
    def dtype(self) -> str:
        return self.gemm.dtype


def choices(problem: MatMulProblem, cfg: ConfigSnapshot, target: Target) -> list:
    """The GEMM family's choices for the batched GEMM."""
    return gemm_plans.choices(problem.gemm, cfg, target)


def plan(problem: MatMulProblem, choice: gemm_plans.GemmChoice, target: Target) -> Plan:
    """The GEMM plan of the batched problem; its launches once per outer index (once in all but mixed
    broadcasts; the repeats run one after another, so they share the GEMM plan's workspace)."""
    base = gemm_plans.plan(problem.gemm, choice, target)
    if problem.outer == ((0, 0, 0),):
        return base
    size, g = np.dtype(problem.dtype).itemsize, problem.gemm
    kinds = epilogue.kinds_of(g.epilogue)

    def moved(kind: str, c: int) -> int:   # an epilogue operand moves with C: output-shaped by C's offset, per row
        return c * size if kind == FULL else c // g.n * size if kind == PER_ROW else 0   # by its rows
    launches = [retarget(launch, tuple(ptr(i, off * size) for i, off in enumerate(offsets))
                         + tuple(ptr(3 + k, moved(kind, offsets[2])) for k, kind in enumerate(kinds)))
                for offsets in problem.outer for launch in base.launches]
    return Plan(tuple(launches), base.operands, workspace=base.workspace, choice=base.choice)


def _batched(dt: str, batch: int, m: int, n: int, k: int, broadcast_b: bool = False,
             aligned: bool = True) -> MatMulProblem:
    g = gemm_plans.packed(dt, m, n, k, aligned=aligned)
    return MatMulProblem(dataclasses.replace(g, batch=batch, stride_a=m * k, stride_b=0 if broadcast_b else k * n,
                                             stride_c=m * n))


def problems() -> list[MatMulProblem]:
    """2-D products (the GEMM family's own square ones) and the batched goal shape."""
    return [MatMulProblem(gemm_plans.packed(dt, s, s, s)) for dt in DTYPES for s in (4096, 1000)] \
        + [_batched(dt, 100, 256, 256, 256) for dt in DTYPES]


def batch_problems() -> list[MatMulProblem]:
    """The seed's 100 x 256³ batch, a broadcast weight, and an odd unaligned batch."""
    return [p for dt in DTYPES
            for p in (_batched(dt, 100, 256, 256, 256), _batched(dt, 64, 128, 128, 128, broadcast_b=True),
                      _batched(dt, 7, 33, 33, 33, aligned=False))]


FAMILY = Family("matmul", choices, plan, problems)
BATCH_FAMILY = Family("batchmatmul", choices, plan, batch_problems)


class MatMul(Fusable, Operator):
    """C = op(A) @ op(B) (NumPy `matmul`): `forward(A, B, C, **operands)` writes C and returns it.

    2-D operands are a GEMM; more dimensions batch and broadcast; a 1-D A (B) is a row (column) whose
    dimension C drops, as in NumPy. C must have the broadcast shape exactly. op(X) is X.mT where `trans_a`
    (`trans_b`) is set, else X; A and B may be contiguous or transposed views (layout "transposed").
    `set_epilogue(expr, **bound)`: C = expr over acc, c and operands.
    """

    family = FAMILY
    forward_names = ("a", "b", "c")
    trans_a = plan_setting("trans_a", bool)
    trans_b = plan_setting("trans_b", bool)

    def __init__(self, trans_a: bool = False, trans_b: bool = False):
        super().__init__()
        self._trans_a, self._trans_b = bool(trans_a), bool(trans_b)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        """The two transposes decide the plan (with the operands' layouts, in their plan keys)."""
        return self._trans_a, self._trans_b

    def bind(self, a: Tensor, b: Tensor, c: Tensor) -> tuple:
        return (a.plan_key, b.plan_key, c.plan_key, self._state), (a.ptr, b.ptr, c.ptr), c

    def _check_ndim(self, a: Tensor, b: Tensor) -> None:
        name = type(self).__name__
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"{name}: a has shape {list(a.shape)} and b has shape {list(b.shape)}: "
                             "matmul needs at least 1-D operands")

    def problem(self, a: Tensor, b: Tensor, c: Tensor, **operands) -> MatMulProblem | None:
        name = type(self).__name__
        a = self.check_operand("a", a, layouts=(CONTIGUOUS, TRANSPOSED))
        b = self.check_operand("b", b, layouts=(CONTIGUOUS, TRANSPOSED))
        self.check_operand("c", c)
        self._check_ndim(a, b)
        for label, t, flag in (("a", a, self._trans_a), ("b", b, self._trans_b)):
            if flag and t.ndim < 2:
                raise ValueError(f"{name}: trans_{label}=True needs a matrix (2 or more dimensions), {label} has "
                                 f"shape {list(t.shape)}: set trans_{label}=False")
        sa = (1, *a.shape) if a.ndim == 1 else _op_shape(a.shape, self._trans_a)
        sb = (*b.shape, 1) if b.ndim == 1 else _op_shape(b.shape, self._trans_b)
        (m, k), (kb, n) = sa[-2:], sb[-2:]
        if k != kb:
            ops = "".join(f" (trans_{x})" for x, f in (("a", self._trans_a), ("b", self._trans_b)) if f)
            raise ValueError(f"{name}: a has shape {list(a.shape)} and b has shape {list(b.shape)}{ops}: op(a) has "
                             f"{k} columns but op(b) has {kb} rows")
        try:
            batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
        except ValueError:
            raise ValueError(f"{name}: the batch dimensions of a {list(a.shape)} and b {list(b.shape)} do not "
                             "broadcast") from None
        want = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
        if tuple(c.shape) != want:
            raise ValueError(f"{name}: c has shape {list(c.shape)}, expected {list(want)} "
                             f"(a {list(a.shape)} @ b {list(b.shape)})")
        fused = self.epilogue_key(c.shape, operands, vectors=a.ndim > 1 and b.ndim > 1)
        if c.size == 0:
            return None
        # stored transposed: a trans flag on a contiguous operand, or no flag on a transposed view
        ta = self._trans_a != (a.layout == TRANSPOSED)
        tb = self._trans_b != (b.layout == TRANSPOSED)
        vec = vector_width(self.dtype)
        lda, ldb = (m if ta else k), (k if tb else n)
        aligned = ((a.ptr | b.ptr | c.ptr) & 15) == 0 and lda % vec == 0 and ldb % vec == 0 and n % vec == 0
        found = _plan_batch(self.dtype.name, batch, sa, sb, m, n, k, aligned, ta, tb)
        return dataclasses.replace(found, gemm=dataclasses.replace(found.gemm, epilogue=fused)) if fused else found

    def work(self, a: Tensor, b: Tensor, c: Tensor, **operands) -> tuple[float, float]:
        k = a.shape[-2] if self._trans_a and a.ndim > 1 else a.shape[-1]
        reads_c = self._fused is not None and "c" in self._fused.names
        return 2.0 * c.size * k, float((a.size + b.size + c.size * (2 if reads_c else 1)) * self.dtype.itemsize
                                       + self.epilogue_bytes(operands))


def _op_shape(shape: tuple, trans: bool) -> tuple:
    """The shape of op(X): X's last two dimensions swapped where `trans`."""
    return (*shape[:-2], shape[-1], shape[-2]) if trans else tuple(shape)


def _plan_batch(dt: str, batch: tuple, sa: tuple, sb: tuple, m: int, n: int, k: int, aligned: bool,
                trans_a: bool = False, trans_b: bool = False) -> MatMulProblem:
    """Split C's batch dims into outer (a launch each) and inner (one batched launch): inner is the longest
    suffix where each operand runs along C's batch or is broadcast over all of it. `sa`, `sb`: the shapes of
    op(A), op(B); `trans_a` / `trans_b`: the stored matrices are op(A)^T / op(B)^T (k x m / n x k), packed."""
    da = (1,) * (len(batch) - len(sa[:-2])) + tuple(sa[:-2])
    db = (1,) * (len(batch) - len(sb[:-2])) + tuple(sb[:-2])
    split = len(batch)
    while split > 0:
        inner = batch[split - 1:]
        if all(d[split - 1:] == inner or all(x == 1 for x in d[split - 1:]) for d in (da, db)):
            split -= 1
        else:
            break
    inner = batch[split:]
    count = math.prod(inner)
    full_a, full_b = da[split:] == inner and count > 1, db[split:] == inner and count > 1
    g = gemm_plans.GemmProblem(dt, m, n, k, trans_a, trans_b, aligned, 1.0, 0.0, m if trans_a else k,
                               k if trans_b else n, n, batch=count,
                                 stride_a=m * k if full_a else 0, stride_b=k * n if full_b else 0,
                                 stride_c=m * n if count > 1 else 0)
    if split == 0:
        return MatMulProblem(g)
    steps = (_strides(da[:split], math.prod(da[split:]) * m * k), _strides(db[:split], math.prod(db[split:]) * k * n),
             _strides(batch[:split], count * m * n))
    outer = tuple(tuple(sum(i * s for i, s in zip(index, st)) for st in steps) for index in np.ndindex(*batch[:split]))
    return MatMulProblem(g, outer)


def _strides(dims: tuple, inner_size: int) -> list[int]:
    """Element strides of broadcast dims `dims` over blocks of `inner_size` (0 where a dim is 1)."""
    out, step = [], inner_size
    for d in reversed(dims):
        out.append(step if d > 1 else 0)
        step *= d
    return out[::-1]


class BatchMatMul(MatMul):
    """[b, m, k] @ [b, k, n] -> [b, m, n] in one launch; a batch of 1 on either side is broadcast.

    `BatchMatMul(trans_a=False, trans_b=False)`: with trans_b, B is [b, n, k] and C = A @ B.mT (attention's
    Q @ K^T with K as stored); a transposed view (torch `K.transpose(-1, -2)`) is read as it lies too."""

    family = BATCH_FAMILY

    def _check_ndim(self, a: Tensor, b: Tensor) -> None:
        name = type(self).__name__
        if a.ndim != 3 or b.ndim != 3:
            raise ValueError(f"{name}: a has shape {list(a.shape)} and b has shape {list(b.shape)}: both must be "
                             "3-D [batch, rows, columns] (MatMul takes other ranks)")


MatMulFloat, MatMulDouble = typed(MatMul, "MatMul", "MatMul")
BatchMatMulFloat, BatchMatMulDouble = typed(BatchMatMul, "BatchMatMul", "batched MatMul")
MatMulHalf, MatMulBFloat16 = typed(MatMul, "MatMul", "MatMul", HALF_DTYPES)
BatchMatMulHalf, BatchMatMulBFloat16 = typed(BatchMatMul, "BatchMatMul", "batched MatMul", HALF_DTYPES)


