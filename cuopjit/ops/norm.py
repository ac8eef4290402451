"""LayerNormFloat/Double and BatchNormFloat/Double (cuOP semantics, PyTorch numerics).

LayerNorm normalises over the trailing dimensions that gamma's shape names (PyTorch's
`normalized_shape`): x of shape [..., *gamma.shape]. cuOP's example passes an NCHW input with a
gamma of length C: when gamma is 1-D, does not match x's trailing dimensions, and has x.shape[1]
elements, each sample is normalised over C*H*W and gamma/beta are applied per channel. With no
gamma, the last dimension is normalised and no affine transform is applied. Variance is biased
(divides by the count) and computed from registers as the mean of squared deviations.

BatchNorm normalises each channel (dimension 1) of an N x C (x H x W ...) input. `training` is
False by default (use running_mean/running_var, as `model.eval()`); `train()` / `eval()` or
`bn.training = True` switch it. Training computes the batch mean and biased variance per channel
over N, H, W, normalises with them, and updates running_mean/running_var in place with
`momentum` (running_var takes the unbiased variance), as torch.nn.BatchNorm2d. Parameters not set
default to gamma=1, beta=0, running_mean=0, running_var=1 (created on the first forward).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..tensor import Tensor, empty
from .base import Operator, dtype_tag, scalar_t
from .rows import (BLOCK_SIZES, TILE_SIZES, RowPlan, cluster_available, plan_rows, prefer_shared_memory,
                   sm_count, vector_width)


def _noop(*args: Any) -> None:
    return None


class _EpsMixin:
    """eps (and momentum) are baked into prepared launches: changing them drops those launches."""

    @property
    def eps(self) -> float:
        return self._eps

    @eps.setter
    def eps(self, value: float) -> None:
        value = float(value)
        if not value >= 0.0:
            raise ValueError(f"{type(self).__name__}: eps={value!r} is not allowed: it must be >= 0")
        self._eps = value
        self._launches.clear()


# Stream-kernel table per itemsize (rows.plan_rows): (max row length, threads, blocks per SM, vectors in
# flight, cp.async stash). Measured on H100 against the cluster kernels (NOTES.md 5C, run 2):
# float32 32768: 2731 vs 2710 GB/s; float64 32768: 2793 vs 2530.
LN_STREAM = {4: ((32768, 1024, 1, 2, True),), 8: ((32768, 1024, 1, 2, True),)}


class LayerNorm(_EpsMixin, Operator):
    """`set_gamma(g)`, `set_beta(b)`, `forward(x, y)`: y = (x - mean) / sqrt(var + eps) * gamma + beta."""

    family = "layernorm"
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self._gamma: Tensor | None = None
        self._beta: Tensor | None = None

    def set_gamma(self, gamma: Tensor) -> None:
        """Scale; its shape names the normalised trailing dimensions (or C, for cuOP's NCHW form)."""
        self._gamma = self._check("gamma", gamma)
        self._launches.clear()

    def set_beta(self, beta: Tensor) -> None:
        """Shift; must have gamma's shape."""
        self._beta = self._check("beta", beta)
        self._launches.clear()

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        try:
            key = (x.shape, y.shape, x.dtype, y.dtype, x.device, (x.ptr | y.ptr) & 15)
        except AttributeError:
            key = None
        run = self._launches.get(key)
        if run is None:
            run = self._plan(x, y)
            self._launches[key] = run
        run(x, y)
        return y

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

    def _plan(self, x: Tensor, y: Tensor) -> Callable[[Tensor, Tensor], None]:
        name = type(self).__name__
        self._check("x", x)
        self._check("y", y)
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        rows, length, gdiv = self._layout(x)
        if x.size == 0:
            return _noop
        if length >= 2 ** 31:
            raise ValueError(f"{name}: rows of {length} elements are over 2**31 - 1")
        vw = 16 // self.dtype.itemsize
        affine = 0 if self._gamma is None else (2 if self._beta is not None else 1)
        ptrs = x.ptr | y.ptr | (self._gamma.ptr if self._gamma is not None else 0) | (
            self._beta.ptr if self._beta is not None else 0)
        aligned = (ptrs & 15) == 0 and length % vw == 0
        per_channel = gdiv > 1
        plan = plan_rows(self.dtype, self._config, length, vector_width(self.dtype, self._config, aligned),
                         cluster_available(), **self._long_rows(rows))
        gp = self._gamma.ptr if self._gamma is not None else 0
        bp = self._beta.ptr if self._beta is not None else 0
        sc = dtype_tag(self.dtype)
        if plan.kind == "stream":
            launch = self._prepare(self._row_spec("stream", plan, affine, per_channel), (min(rows, 2 ** 31 - 1),),
                                   (plan.threads,), plan.stash_bytes(self.dtype),
                                   [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", gp), ("ptr", bp), ("i64", rows),
                                    ("i32", length), ("i32", gdiv), (sc, self.eps), ("i32", plan.stash)])
            prefer_shared_memory(launch)
            return lambda x, y: launch(x.ptr, y.ptr)
        if plan.kind == "rows":
            spec = self._row_spec("rows", plan, affine, per_channel)
            grid = min(-(-rows // plan.rpb), (2 ** 31 - 1) // plan.cl) * plan.cl
            launch = self._prepare(spec, (grid,), (plan.threads,), 0,
                                   [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", gp), ("ptr", bp), ("i64", rows),
                                    ("i32", length), ("i32", gdiv), (sc, self.eps)])
            return lambda x, y: launch(x.ptr, y.ptr)
        blocks = rows * plan.chunks
        if blocks >= 2 ** 31:
            raise ValueError(f"{name}: {rows} rows of {length} need too many blocks")
        ws = empty([blocks * 2], self.dtype)
        part = self._prepare(self._row_spec("partials", plan, affine, per_channel), (blocks,), (plan.threads,), 0,
                             [("ptr", x.ptr), ("ptr", ws.ptr), ("i64", rows), ("i32", length),
                              ("i32", plan.chunks)])
        apply = self._prepare(self._row_spec("apply", plan, affine, per_channel), (blocks,), (plan.threads,), 0,
                              [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", gp), ("ptr", bp), ("ptr", ws.ptr),
                               ("i64", rows), ("i32", length), ("i32", plan.chunks), ("i32", gdiv),
                               (sc, self.eps)])

        def run(x: Tensor, y: Tensor, ws: Tensor = ws) -> None:
            part(x.ptr)
            apply(x.ptr, y.ptr)
        return run

    def _long_rows(self, rows: int | None = None) -> dict:
        """Automatic layout of rows longer than 2048 (measured on H100, benchmarks/NOTES.md 5B/5C):
        blocks of 512 threads before clusters, 32 float / 16 double elements per thread; longer
        rows take the stream kernel's (max length, threads, blocks per SM, vectors in flight) where
        it measured faster, and only with a row per block for every SM (fewer rows: clusters)."""
        out = {"long_epts": (32,) if self.dtype == np.float32 else (16,), "long_block": 512}
        if rows is None or rows >= sm_count():
            out["stream"] = LN_STREAM[self.dtype.itemsize]
        return out

    def _row_spec(self, kind: str, plan: RowPlan, affine: int, per_channel: bool):
        params = {"kind": kind, "scalar_t": scalar_t(self.dtype), "unroll": self._config.enable_loop_unroll,
                  "AFFINE": affine, "PER_CHANNEL": int(per_channel), **plan.params()}
        tag = f"{plan.tag()}a{affine}" + ("pc" if per_channel else "")
        return self._spec("layernorm.cu.jinja", f"layernorm_{kind}", f"layernorm_{kind}_{dtype_tag(self.dtype)}_{tag}",
                          params)

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """~8 flops per element; x read once, y written once, gamma and beta read once."""
        params = sum(t.size for t in (self._gamma, self._beta) if t is not None)
        return 8.0 * x.size, float((2 * x.size + params) * self.dtype.itemsize)

    def specs(self) -> list:
        """Row-length buckets (aligned and not), cluster and split-row kernels, cuOP's per-channel form."""
        out = []
        vec = 16 // self.dtype.itemsize if self._config.enable_memory_coalescing else 1
        for length, v, pc in ((128, vec, False), (1024, vec, False), (8192, vec, False), (32768, vec, False),
                              (1000, 1, False), (7, 1, False), (64 * 224 * 224, vec, True)):
            plan = plan_rows(self.dtype, self._config, length, v, True, **self._long_rows())
            kinds = (plan.kind,) if plan.kind != "split" else ("partials", "apply")
            out += [self._row_spec(k, plan, 2, pc) for k in kinds]
        return list(dict.fromkeys(out))


class LayerNormFloat(LayerNorm):
    """float32 layer norm (cuOP `LayerNormFloat`)."""
    dtype = np.dtype(np.float32)


class LayerNormDouble(LayerNorm):
    """float64 layer norm (cuOP `LayerNormDouble`)."""
    dtype = np.dtype(np.float64)


# --- BatchNorm -----------------------------------------------------------------------------------
BN_TEMPLATE = "batchnorm.cu.jinja"


class BatchNorm(_EpsMixin, Operator):
    """Per-channel normalisation of N x C [x H x W]; inference by default, `train()` for batch statistics.

    JITConfig: block_size = threads per block (0: 256); tile_size = elements per thread per tile
    (0: 16 float / 8 double); enable_memory_coalescing = 16-byte accesses; enable_loop_unroll =
    unroll pragmas; enable_shared_memory_opt selects the per-plane tiled kernel (scale/shift
    computed once per tile of one (n, c) plane) vs the flat kernel (channel and scale per element).
    """

    family = "batchnorm"
    tile_sizes = TILE_SIZES
    block_sizes = BLOCK_SIZES

    def __init__(self, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps = eps
        self.momentum = momentum
        self.training = False
        self._params: dict[str, Tensor | None] = dict.fromkeys(("gamma", "beta", "running_mean", "running_var"))

    # --- mode and parameters ----------------------------------------------------------------
    @property
    def momentum(self) -> float:
        return self._momentum

    @momentum.setter
    def momentum(self, value: float) -> None:
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{type(self).__name__}: momentum={value!r} is not allowed: it must be in [0, 1]")
        self._momentum = value
        self._launches.clear()

    def train(self, mode: bool = True) -> "BatchNorm":
        """Training mode: batch statistics, running statistics updated (PyTorch's module.train())."""
        self.training = bool(mode)
        return self

    def eval(self) -> "BatchNorm":
        """Inference mode: running statistics (the default)."""
        return self.train(False)

    def _set(self, name: str, t: Tensor) -> None:
        self._params[name] = self._check(name, t, ndim=1)
        self._launches.clear()

    def set_gamma(self, gamma: Tensor) -> None:
        self._set("gamma", gamma)

    def set_beta(self, beta: Tensor) -> None:
        self._set("beta", beta)

    def set_running_mean(self, mean: Tensor) -> None:
        self._set("running_mean", mean)

    def set_running_var(self, var: Tensor) -> None:
        self._set("running_var", var)

    @property
    def running_mean(self) -> Tensor | None:
        return self._params["running_mean"]

    @property
    def running_var(self) -> Tensor | None:
        return self._params["running_var"]

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        try:
            key = (x.shape, y.shape, x.dtype, y.dtype, x.device, self.training, (x.ptr | y.ptr) & 15)
        except AttributeError:
            key = None
        run = self._launches.get(key)
        if run is None:
            run = self._plan(x, y)
            self._launches[key] = run
        run(x, y)
        return y

    def _plan(self, x: Tensor, y: Tensor) -> Callable[[Tensor, Tensor], None]:
        name = type(self).__name__
        self._check("x", x)
        self._check("y", y)
        if x.ndim < 2:
            raise ValueError(f"{name}: x must be N x C or N x C x H x W (at least 2-D), got shape {list(x.shape)}")
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        n, c, hw = x.shape[0], x.shape[1], math.prod(x.shape[2:])
        defaults = {"gamma": 1.0, "beta": 0.0, "running_mean": 0.0, "running_var": 1.0}
        for key, t in self._params.items():
            if t is not None and tuple(t.shape) != (c,):
                raise ValueError(f"{name}: {key} has shape {list(t.shape)}, expected [{c}] "
                                 f"(x has shape {list(x.shape)}, C = {c})")
        if x.size == 0:
            return _noop
        for key, t in self._params.items():
            if t is None:
                self._params[key] = empty([c], self.dtype).fill(defaults[key])
        if self.training and n * hw < 2:
            raise ValueError(f"{name}: training needs more than one value per channel, x has shape {list(x.shape)}")
        p = self._params
        if not self.training:
            apply = self._apply_launch(x, y, n, c, hw, p["running_mean"].ptr, p["running_var"].ptr)
            return lambda x, y: apply(x.ptr, y.ptr)
        stats_spec, threads = self._bn_spec("stats", 1, 1)
        splits = max(1, min(-(-4 * sm_count() // c), -(-(n * hw) // threads), 1024))
        ws = empty([c * splits * 3], self.dtype)
        batch = empty([2 * c], self.dtype)
        stats = self._prepare(stats_spec, (c * splits,), (threads,), 0,
                              [("ptr", x.ptr), ("ptr", ws.ptr), ("i32", n), ("i32", c), ("i64", hw),
                               ("i32", splits)])
        fin_spec, fthreads = self._bn_spec("finalize", 1, 1)
        fin = self._prepare(fin_spec, (-(-c // fthreads),), (fthreads,), 0,
                            [("ptr", ws.ptr), ("ptr", batch.ptr), ("ptr", batch.ptr + c * self.dtype.itemsize),
                             ("ptr", p["running_mean"].ptr), ("ptr", p["running_var"].ptr), ("i32", c),
                             ("i32", splits), (dtype_tag(self.dtype), self.momentum)])
        apply = self._apply_launch(x, y, n, c, hw, batch.ptr, batch.ptr + c * self.dtype.itemsize)

        def run(x: Tensor, y: Tensor, keep: tuple = (ws, batch)) -> None:
            stats(x.ptr)
            fin()
            apply(x.ptr, y.ptr)
        return run

    def _geometry(self, plane: bool, vec: int) -> tuple[int, int]:
        threads = self._config.block_size or 256
        ept = self._config.tile_size or (16 if self.dtype == np.float32 else 8)
        return threads, max(1, ept // vec) if plane else 1

    def _bn_spec(self, kind: str, vec: int, plane: bool):
        if kind != "apply":
            vec, plane = 1, False
        threads, nv = self._geometry(plane, vec)
        params = {"kind": kind, "scalar_t": scalar_t(self.dtype), "unroll": self._config.enable_loop_unroll,
                  "VEC": vec, "NV": nv, "THREADS": threads, "plane": int(plane)}
        tag = f"{'p' if plane else 'f'}v{vec}n{nv}t{threads}" if kind == "apply" else f"t{threads}"
        return self._spec(BN_TEMPLATE, f"batchnorm_{kind}", f"batchnorm_{kind}_{dtype_tag(self.dtype)}_{tag}",
                          params), threads

    def _apply_launch(self, x: Tensor, y: Tensor, n: int, c: int, hw: int, mean_ptr: int, var_ptr: int):
        vw = 16 // self.dtype.itemsize
        plane = hw > 1 and self._config.enable_shared_memory_opt
        aligned = ((x.ptr | y.ptr) & 15) == 0 and hw % vw == 0
        vec = vector_width(self.dtype, self._config, aligned) if plane else 1
        spec, threads = self._bn_spec("apply", vec, plane)
        _, nv = self._geometry(plane, vec)
        if plane:
            tiles = -(-(hw // vec) // (threads * nv))
            grid = min(n * c * tiles, 2 ** 31 - 1)
        else:
            grid = min(-(-x.size // threads), 2 ** 31 - 1)
        p = self._params
        return self._prepare(spec, (grid,), (threads,), 0,
                             [("ptr", x.ptr), ("ptr", y.ptr), ("ptr", p["gamma"].ptr), ("ptr", p["beta"].ptr),
                              ("ptr", mean_ptr), ("ptr", var_ptr), ("i64", x.size), ("i32", c), ("i64", hw),
                              (dtype_tag(self.dtype), self.eps)])

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """Inference: 2 flops per element, x read and y written once, 4 parameters per channel read."""
        c = x.shape[1] if x.ndim >= 2 else 0
        reads = 2 if self.training else 1
        return 2.0 * x.size, float(((reads + 1) * x.size + 4 * c) * self.dtype.itemsize)

    def specs(self) -> list:
        """Inference kernels (per-plane vectorised and scalar, flat N x C) and the training kernels."""
        vec = 16 // self.dtype.itemsize if self._config.enable_memory_coalescing else 1
        plane = self._config.enable_shared_memory_opt
        out = [self._bn_spec("apply", vec if plane else 1, plane)[0], self._bn_spec("apply", 1, plane)[0],
               self._bn_spec("apply", 1, False)[0], self._bn_spec("stats", 1, True)[0],
               self._bn_spec("finalize", 1, True)[0]]
        return list(dict.fromkeys(out))


class BatchNormFloat(BatchNorm):
    """float32 batch norm (cuOP `BatchNormFloat`)."""
    dtype = np.dtype(np.float32)


class BatchNormDouble(BatchNorm):
    """float64 batch norm (cuOP `BatchNormDouble`)."""
    dtype = np.dtype(np.float64)
