"""GemmFloat / GemmDouble: C = alpha * op(A) @ op(B) + beta * C, row-major, any M, N, K >= 1."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..config import ConfigSnapshot

from ..tensor import Tensor
from .base import Operator
from .gemm_kernels import (BLOCK_SIZES, KERNEL_TYPES, SUPPORTS_TENSOR_CORE, TILE_SIZES, allowed_combinations,
                           gemm_kernel, uses_tensor_core)


class Gemm(Operator):
    """General matrix multiply. `set_weight(B)` fixes B; `forward(A, C)` writes C."""

    family = "gemm"
    kernel_types = KERNEL_TYPES
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES
    supports_tensor_core = SUPPORTS_TENSOR_CORE

    def __init__(self, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0, beta: float = 0.0):
        super().__init__()
        self.trans_a, self.trans_b = bool(trans_a), bool(trans_b)
        self.alpha, self.beta = float(alpha), float(beta)
        self._weight: Tensor | None = None

    def set_weight(self, weight: Tensor) -> None:
        """B, the right-hand matrix (N×K when trans_b, else K×N)."""
        old = self._weight
        self._weight = self._check("weight", weight, ndim=2)
        if old is None or (old.shape, old.ptr & 15) != (weight.shape, weight.ptr & 15):
            self._launches.clear()

    def _dims(self, a: Tensor, c: Tensor) -> tuple[int, int, int]:
        name = type(self).__name__
        b = self._weight
        if b is None:
            raise ValueError(f"{name}: no weight: call set_weight(B) before forward")
        self._check("a", a, ndim=2)
        self._check("c", c, ndim=2)
        m, k = a.shape[::-1] if self.trans_a else a.shape
        kb, n = b.shape[::-1] if self.trans_b else b.shape
        if k != kb:
            raise ValueError(f"{name}: a has shape {list(a.shape)} and weight has shape {list(b.shape)}: "
                             f"op(a) has {k} columns but op(weight) has {kb} rows")
        if tuple(c.shape) != (m, n):
            raise ValueError(f"{name}: c has shape {list(c.shape)}, expected {[m, n]} "
                             f"(a {list(a.shape)} @ weight {list(b.shape)})")
        return m, n, k

    def forward(self, a: Tensor, c: Tensor) -> Tensor:
        """c = alpha * op(a) @ op(weight) + beta * c; returns c."""
        try:
            key = (a.shape, c.shape, a.dtype, c.dtype, a.device, (a.ptr | c.ptr) & 15)
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            m, n, k = self._dims(a, c)
            if m == 0 or n == 0:
                return c
            if k == 0:
                if self.beta != 0.0:
                    raise ValueError(f"{type(self).__name__}: K is 0, so C = beta*C: scale C with Scal instead")
                return c.zero()
            launch = self._make_launch(a, c, m, n, k)
            self._launches[key] = launch
        launch(a.ptr, self._weight.ptr, c.ptr)
        return c

    def _make_launch(self, a: Tensor, c: Tensor, m: int, n: int, k: int):
        b = self._weight
        vec = 16 // self.dtype.itemsize
        lda, ldb, ldc = a.shape[1], b.shape[1], n
        aligned = ((a.ptr | b.ptr | c.ptr) & 15) == 0 and lda % vec == 0 and ldb % vec == 0 and ldc % vec == 0
        template, name, params, grid, block, shared = gemm_kernel(
            self.dtype, self._config, m, n, k, self.trans_a, self.trans_b, aligned)
        spec = self._spec(template, "gemm", name, params)
        sc = "f32" if self.dtype == np.float32 else "f64"
        args = [("ptr", a.ptr), ("ptr", b.ptr), ("ptr", c.ptr), ("i32", m), ("i32", n), ("i32", k),
                ("i32", lda), ("i32", ldb), ("i32", ldc), (sc, self.alpha), (sc, self.beta)]
        return self._prepare(spec, grid, block, shared, args)

    def work(self, a: Tensor, c: Tensor) -> tuple[float, float]:
        m, n = c.shape
        k = a.shape[0] if self.trans_a else a.shape[1]
        return 2.0 * m * n * k, float((a.size + self._weight.size + c.size * (2 if self.beta else 1))
                                      * self.dtype.itemsize)

    def tuning_candidates(self, cfg: ConfigSnapshot) -> list[ConfigSnapshot]:
        """Every allowed (tile_size, block_size) of the kernel kind `cfg` selects, when both are left at 0."""
        if cfg.tile_size or cfg.block_size:
            return []
        combos = allowed_combinations(self.dtype, uses_tensor_core(cfg, self.dtype.name))
        return [dataclasses.replace(cfg, tile_size=t, block_size=b) for t, b in combos]

    def specs(self) -> list:
        """Representative kernels: large and small square problems, aligned and unaligned, odd shapes."""
        out = []
        for m, n, k, aligned in ((4096, 4096, 4096, True), (1024, 1024, 1024, True), (1000, 1000, 1000, True),
                                 (33, 4097, 1000, False), (7, 7, 7, False)):
            template, name, params, *_ = gemm_kernel(self.dtype, self._config, m, n, k,
                                                    self.trans_a, self.trans_b, aligned)
            spec = self._spec(template, "gemm", name, params)
            if spec not in out:
                out.append(spec)
        return out


class GemmFloat(Gemm):
    """float32 GEMM (cuOP `GemmFloat`)."""
    dtype = np.dtype(np.float32)


class GemmDouble(Gemm):
    """float64 GEMM (cuOP `GemmDouble`)."""
    dtype = np.dtype(np.float64)
