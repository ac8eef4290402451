"""The GEMM family's problem (shapes, layouts, alignment, alpha/beta), choice (a kernel shape and its pipeline), and
how a plan's launches move onto other operands (MatMul's outer indices, SYMM, TRSM, the GEMV route)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...build import pipeline
from ...run.plan import Arg, KernelLaunch, ptr
from . import shapes

# Label spellings of the pipeline fields away from their defaults.
_PIPELINE = (("stages", 1), ("raster", "row"), ("cluster", (1, 1)), ("split_k", 1))


@dataclass(frozen=True)
class GemmProblem:
    """One GEMM call, or `batch` of them in one launch. `aligned`: A, B, C 16-byte aligned and lda, ldb,
    ldc (and the batch strides) multiples of 16 bytes. Batch entry z reads A + z * stride_a, B + z * stride_b
    and writes C + z * stride_c (elements; stride 0 broadcasts one matrix over the batch). `epilogue`: a user
    epilogue's key (cuopjit/ops/epilogue.py; its operands follow a, b, c) instead of alpha * acc + beta * C."""
    dtype: str
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    aligned: bool
    alpha: float
    beta: float
    lda: int
    ldb: int
    ldc: int
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    epilogue: str = ""


def packed(dtype: str, m: int, n: int, k: int, trans_a: bool = False, trans_b: bool = False,
           aligned: bool = True, alpha: float = 1.0, beta: float = 0.0) -> GemmProblem:
    """A problem on contiguous row-major matrices (lda, ldb, ldc = their row lengths)."""
    return GemmProblem(dtype, m, n, k, trans_a, trans_b, aligned, alpha, beta,
                       m if trans_a else k, k if trans_b else n, n)


@dataclass(frozen=True)
class GemmChoice:
    """A kernel shape and the pipeline around it (stages, cluster, tile order, split-K), plus switches."""
    shape: shapes.Shape
    stages: int = 1
    cluster: tuple[int, int] = (1, 1)
    raster: str = "row"
    split_k: int = 1
    pad: bool = True
    unroll: bool = True
    coalesce: bool = True
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS

    @property
    def label(self) -> str:
        fields = "".join(f"_{f}{_spell(getattr(self, f))}" for f, plain in _PIPELINE if getattr(self, f) != plain)
        return (self.shape.label + fields + ("" if self.coalesce else "_scalar")
                + ("" if self.pad else "_nopad") + ("" if self.unroll else "_nounroll"))


def _spell(value: object) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)


def retarget(launch: KernelLaunch, pointers: tuple, workspace: Arg | None = None) -> KernelLaunch:
    """A GEMM plan's launch run on other pointers: each `ptr` argument naming one of the plan's operands (a, b, c
    and an epilogue's, one `ptr` each in `pointers`) moves to pointers[i] (offsets add up); `workspace` (a `ptr`)
    moves the GEMM plan's own workspace (the pointer after its operands) into the caller's plan. Other
    arguments are kept."""
    def move(a: Arg) -> Arg:
        if a.kind != "ptr":
            return a
        if a.value < len(pointers):
            return ptr(pointers[a.value].value, pointers[a.value].offset + a.offset)
        if workspace is not None and a.value == len(pointers):
            return ptr(workspace.value, workspace.offset + a.offset)
        return a
    return dataclasses.replace(launch, args=tuple(move(a) for a in launch.args))
