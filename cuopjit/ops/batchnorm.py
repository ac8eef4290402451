"""BatchNormFloat / BatchNormDouble (cuOP semantics, PyTorch numerics).

BatchNorm normalises each channel (dimension 1) of an N x C (x H x W ...) input. `training` is False by default
(use running_mean/running_var, as `model.eval()`); `train()` / `eval()` or `bn.training = True` switch it.
Training computes the batch mean and biased variance per channel over N, H, W, normalises with them, and updates
running_mean/running_var in place with `momentum` (running_var takes the unbiased variance), as
torch.nn.BatchNorm2d. Unset parameters default to gamma=1, beta=0, running_mean=0, running_var=1 (at first use).

Kernels (templates/batchnorm/batchnorm.cu.jinja): inference is one `apply` launch; training is `stats`
(per-(channel, split) partials: per-plane, 16-byte loads and shifted sums; flat, Welford), `finalize` (a warp
per channel: batch statistics, running update) and `apply` (per-plane: tiles in reverse order, so what stats
read last is re-read from L2 first; an x that fits in L2 is re-read from L2 entirely), with the partials and the
batch mean/variance in one plan workspace. Per-plane training folds the finalize into the apply (FOLD_FINALIZE:
each apply block combines its channel's splits, one block per channel updates the running statistics): two
launches. How each JITConfig field changes the code:

    kernel_type               "simple": the flat apply kernel (one element per thread per
                              grid-stride step, channel and scale computed per element); every
                              other kind ("auto", "tiled", "warp_optimized", "tensor_core"): the
                              per-plane apply kernel where H x W > 1 (see enable_shared_memory_opt)
    block_size                threads per block of every kernel (0: 256)
    tile_size                 per-plane apply and stats: elements per thread per tile / step, 8 .. 128
                              (0: 16 float / 8 double); the flat and finalize kernels ignore it
    enable_shared_memory_opt  per-plane apply and stats kernels (scale/shift computed once per tile of
                              one (n, c) plane) vs the flat kernels
    enable_memory_coalescing  16-byte accesses in the per-plane kernels (where pointers and H x W allow)
    enable_loop_unroll        unroll pragmas (enable_tensor_core, enable_tma: nothing to use them for)
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..build import pipeline
from ..config import ConfigSnapshot
from ..run.plan import Arg, Family, KernelLaunch, Plan, i32, i64, ptr, scalar
from ..target import Target
from ..tensor import Tensor, empty
from .base import Operator, cdiv, dtype_tag, scalar_t, vector_width
from .params import non_negative_eps, plan_setting, unit_interval_momentum
from . import knobs

TEMPLATE = "batchnorm/batchnorm.cu.jinja"
DEFAULT_THREADS = 256
STATS_STEPS = 4   # per-plane stats: loads of NV vectors per thread in one work unit
FOLD_FINALIZE = True  # per-plane training: the finalize folded into the apply (two launches; NOTES.md 16 v2)
OPERANDS = ("x", "y", "gamma", "beta", "running_mean", "running_var")
DEFAULTS = {"gamma": 1.0, "beta": 0.0, "running_mean": 0.0, "running_var": 1.0}


class _Unset:
    """A parameter not set yet: pointer 0 until the first non-empty forward creates its default."""
    ptr = 0
    shape = None


UNSET = _Unset()


@dataclass(frozen=True)
class BatchNormProblem:
    """x of N x C x HW (HW = 1 for N x C); `aligned`: x and y 16-byte aligned; momentum only when training."""
    dtype: str
    n: int
    c: int
    hw: int
    aligned: bool
    training: bool
    eps: float
    momentum: float = 0.0


@dataclass(frozen=True)
class BatchNormChoice:
    """Threads per block; the apply kernel's scalars per access, vectors per thread and per-plane form."""
    threads: int
    vec: int
    nv: int
    plane: bool
    unroll: bool
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS

    @property
    def label(self) -> str:
        return f"{'p' if self.plane else 'f'}v{self.vec}n{self.nv}t{self.threads}"


def choices(problem: BatchNormProblem, cfg: ConfigSnapshot, target: Target) -> list[BatchNormChoice]:
    """The one kernel shape `cfg` names for this problem."""
    knobs.check("batch norm", cfg)
    dtype = np.dtype(problem.dtype)
    vw = vector_width(dtype)
    plane = problem.hw > 1 and cfg.enable_shared_memory_opt and cfg.kernel_type != "simple"
    aligned = problem.aligned and problem.hw % vw == 0
    vec = vw if (plane and cfg.enable_memory_coalescing and aligned) else 1
    ept = cfg.tile_size or (16 if dtype == np.float32 else 8)
    nv = max(1, ept // vec) if plane else 1
    return [BatchNormChoice(cfg.block_size or DEFAULT_THREADS, vec, nv, plane, cfg.enable_loop_unroll,
                            pipeline.compile_opts(cfg))]


def _spec(dtype: np.dtype, kind: str, choice: BatchNormChoice, training: bool = False) -> pipeline.KernelSpec:
    """The apply kernel of `choice` (tiles reversed when training; per-plane training with FOLD_FINALIZE:
    the finalize folded in), its stats kernel (per-plane: the same vectors; else scalar), or the finalize
    kernel."""
    vec, nv, plane = (choice.vec, choice.nv, choice.plane) if kind != "finalize" else (1, 1, False)
    if kind == "stats" and not plane:
        vec, nv = 1, 1
    reverse = int(kind == "apply" and plane and training)
    fold = reverse and FOLD_FINALIZE
    params = {"kind": kind, "scalar_t": scalar_t(dtype), "unroll": choice.unroll, "VEC": vec, "NV": nv,
              "THREADS": choice.threads, "plane": int(plane), "REVERSE": reverse}
    if fold:
        params["FOLD"] = 1
    if kind == "stats" and plane:
        params["SEG"] = stats_segment(choice)
    tag = {"apply": choice.label + ("r" if reverse else "") + ("f" if fold else ""), "stats": choice.label if plane else f"t{choice.threads}",
           "finalize": f"t{choice.threads}"}[kind]
    name = f"batchnorm_{kind}_{dtype_tag(dtype)}_{tag}" + ("" if choice.unroll else "_nounroll")
    return pipeline.make_spec(TEMPLATE, f"batchnorm_{kind}", name, params, choice.opts)


def stats_segment(choice: BatchNormChoice) -> int:
    """Vectors of one plane in a per-plane stats work unit: four steps of the block's loads."""
    return choice.threads * choice.nv * STATS_STEPS


def stats_splits(problem: BatchNormProblem, choice: BatchNormChoice, target: Target) -> int:
    """Blocks per channel of the stats kernel: per-plane, enough for every SM's resident blocks (one
    wave, so every block walks its units in step and the last planes read are the last in x); else
    four blocks per SM."""
    n, c, hw, threads = problem.n, problem.c, problem.hw, choice.threads
    if choice.plane:
        units = n * cdiv(hw // choice.vec, stats_segment(choice))
        return max(1, min(units, target.sm_count * (2048 // threads) // c))
    return max(1, min(cdiv(4 * target.sm_count, c), cdiv(n * hw, threads), 1024))


def plan(problem: BatchNormProblem, choice: BatchNormChoice, target: Target) -> Plan:
    """Operands x, y, gamma, beta, running_mean, running_var; training adds the workspace (index 6):
    c * splits * 3 partials, then (with a finalize kernel) the batch mean and variance (c each)."""
    dtype = np.dtype(problem.dtype)
    units = "FP32 cores" if dtype == np.float32 else "FP64 cores"
    n, c, hw, threads = problem.n, problem.c, problem.hw, choice.threads
    total = n * c * hw
    if choice.plane:
        tiles = cdiv(hw // choice.vec, threads * choice.nv)
        grid = min(n * c * tiles, 2 ** 31 - 1)
    else:
        grid = min(cdiv(total, threads), 2 ** 31 - 1)

    def apply(mean: Arg, var: Arg) -> KernelLaunch:
        return KernelLaunch(_spec(dtype, "apply", choice, problem.training), (grid,), (threads,),
                            (ptr(0), ptr(1), ptr(2), ptr(3), mean, var, i64(total), i32(c), i64(hw),
                             scalar(dtype, problem.eps)), units=units)

    if not problem.training:
        return Plan((apply(ptr(4), ptr(5)),), OPERANDS, choice=choice.label)
    splits = stats_splits(problem, choice, target)
    ws = len(OPERANDS)
    partials = c * splits * 3 * dtype.itemsize
    mean, var = ptr(ws, partials), ptr(ws, partials + c * dtype.itemsize)
    stats = KernelLaunch(_spec(dtype, "stats", choice), (c * splits,), (threads,),
                         (ptr(0), ptr(ws), i32(n), i32(c), i64(hw), i32(splits)), units=units)
    if choice.plane and FOLD_FINALIZE:
        fold = KernelLaunch(_spec(dtype, "apply", choice, True), (grid,), (threads,),
                            (ptr(0), ptr(1), ptr(2), ptr(3), ptr(ws), ptr(4), ptr(5), i64(total), i32(c), i64(hw),
                             scalar(dtype, problem.eps), i32(splits), scalar(dtype, problem.momentum)), units=units)
        return Plan((stats, fold), OPERANDS, workspace=partials, choice=choice.label)
    finalize = KernelLaunch(_spec(dtype, "finalize", choice), (cdiv(c, threads // 32),), (threads,),
                            (ptr(ws), mean, var, ptr(4), ptr(5), i32(c), i32(splits),
                             scalar(dtype, problem.momentum)), units=units)
    return Plan((stats, finalize, apply(mean, var)), OPERANDS, workspace=partials + 2 * c * dtype.itemsize,
                choice=choice.label)


def problems() -> list[BatchNormProblem]:
    """Inference and training on NCHW (aligned planes: vectorised; 5 x 7 planes: scalar) and N x C (flat),
    both dtypes."""
    out = []
    for dt in ("float32", "float64"):
        out += [BatchNormProblem(dt, 32, 64, 56 * 56, True, False, 1e-5),
                BatchNormProblem(dt, 2, 3, 5 * 7, True, False, 1e-5),
                BatchNormProblem(dt, 32, 64, 1, True, False, 1e-5),
                BatchNormProblem(dt, 32, 64, 56 * 56, True, True, 1e-5, 0.1),
                BatchNormProblem(dt, 2, 3, 5 * 7, True, True, 1e-5, 0.1),
                BatchNormProblem(dt, 32, 64, 1, True, True, 1e-5, 0.1)]
    return out


FAMILY = Family("batchnorm", choices, plan, problems)


class BatchNorm(Operator):
    """Per-channel normalisation of N x C [x H x W]: `forward(x, y)` returns y; inference by default,
    `train()` for batch statistics."""

    family = FAMILY

    def __init__(self, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self._params: dict[str, Tensor | _Unset] = dict.fromkeys(OPERANDS[2:], UNSET)
        self._momentum, self._training = float(momentum), False
        self.eps = eps
        self.momentum = momentum

    # --- mode and parameters ----------------------------------------------------------------
    def _plan_settings(self) -> tuple:
        """eps, momentum, the mode and the parameters' shapes decide the plan."""
        return self._eps, self._momentum, self._training, tuple(t.shape for t in self._params.values())

    eps = plan_setting("eps", check=non_negative_eps)
    momentum = plan_setting("momentum", check=unit_interval_momentum)
    training = plan_setting("training", convert=bool)

    def train(self, mode: bool = True) -> "BatchNorm":
        """Training mode: batch statistics, running statistics updated (PyTorch's module.train())."""
        self.training = mode
        return self

    def eval(self) -> "BatchNorm":
        """Inference mode: running statistics (the default)."""
        return self.train(False)

    def _set(self, name: str, t: Tensor) -> None:
        self._params[name] = self.check_operand(name, t, ndim=1)
        self._settings_changed()

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
        t = self._params["running_mean"]
        return None if t is UNSET else t

    @property
    def running_var(self) -> Tensor | None:
        t = self._params["running_var"]
        return None if t is UNSET else t

    # --- the forward's two halves --------------------------------------------------------------
    def bind(self, x: Tensor, y: Tensor) -> tuple:
        g, b, m, v = self._params.values()
        pointers = (x.ptr, y.ptr, g.ptr, b.ptr, m.ptr, v.ptr)
        key = (x.plan_key, y.plan_key, self._state)
        return key, pointers, y

    def problem(self, x: Tensor, y: Tensor) -> BatchNormProblem | None:
        name = type(self).__name__
        self.check_operand("x", x)
        self.check_operand("y", y)
        if x.ndim < 2:
            raise ValueError(f"{name}: x must be N x C or N x C x H x W (at least 2-D), got shape {list(x.shape)}")
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        n, c, hw = x.shape[0], x.shape[1], math.prod(x.shape[2:])
        for key, t in self._params.items():
            if t is not UNSET and tuple(t.shape) != (c,):
                raise ValueError(f"{name}: {key} has shape {list(t.shape)}, expected [{c}] "
                                 f"(x has shape {list(x.shape)}, C = {c})")
        if x.size == 0:
            return None
        missing = [key for key, t in self._params.items() if t is UNSET]
        for key in missing:
            self._params[key] = empty([c], self.dtype).fill(DEFAULTS[key])
        if missing:
            self._settings_changed()
        if self._training and n * hw < 2:
            raise ValueError(f"{name}: training needs more than one value per channel, x has shape {list(x.shape)}")
        return BatchNormProblem(self.dtype.name, n, c, hw, ((x.ptr | y.ptr) & 15) == 0, self._training, self._eps,
                                self._momentum if self._training else 0.0)

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """2 flops per element, x read (training: twice) and y written once, 4 parameters per channel read."""
        c = x.shape[1] if x.ndim >= 2 else 0
        reads = 2 if self._training else 1
        return 2.0 * x.size, float(((reads + 1) * x.size + 4 * c) * self.dtype.itemsize)


class BatchNormFloat(BatchNorm):
    """float32 batch norm (cuOP `BatchNormFloat`)."""
    dtype = np.dtype(np.float32)


class BatchNormDouble(BatchNorm):
    """float64 batch norm (cuOP `BatchNormDouble`)."""
    dtype = np.dtype(np.float64)
