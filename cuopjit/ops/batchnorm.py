"""BatchNormFloat / BatchNormDouble / BatchNormHalf / BatchNormBFloat16 (cuOP semantics, PyTorch numerics).

BatchNorm normalises each channel (dimension 1) of an N x C (x H x W ...) input. `training` is False by default
(use running_mean/running_var, as `model.eval()`); `train()` / `eval()` or `bn.training = True` switch it.
Training computes the batch mean and biased variance per channel over N, H, W, normalises with them, and updates
running_mean/running_var in place with `momentum` (running_var takes the unbiased variance), as
torch.nn.BatchNorm2d. Unset parameters default to gamma=1, beta=0, running_mean=0, running_var=1 (at first use).
x and y are contiguous or both channels_last (a mismatch raises naming both layouts); channels_last runs its
own kernels with no layout copy (batchnorm_nhwc.py, where its JITConfig fields are mapped). The plans are in
batchnorm_plans.py.

float16 and bfloat16: x, y, gamma, beta, running_mean and running_var all of that dtype, as torch's
F.batch_norm on half tensors with half parameters (torch.nn.BatchNorm2d(...).half()); statistics, eps and momentum
in float32, each result (y, the updated running statistics) rounded once on store, as torch does.

NCHW kernels (templates/batchnorm/batchnorm.cu.jinja): inference is one `apply` launch; training is `stats`
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
                              (0: 16 float / 8 double / 16 float16 and bfloat16); the flat and
                              finalize kernels ignore it
    enable_shared_memory_opt  per-plane apply and stats kernels (scale/shift computed once per tile of
                              one (n, c) plane) vs the flat kernels
    enable_memory_coalescing  16-byte accesses in the per-plane kernels (where pointers and H x W allow)
    enable_loop_unroll        unroll pragmas (enable_tensor_core, enable_tma: nothing to use them for)
optimization_level and max_registers reach NVRTC.
"""
from __future__ import annotations

import math


from ..layout import CHANNELS_LAST, CONTIGUOUS
from ..tensor import Tensor, empty
from .base import Operator, typed
from .batchnorm_plans import FAMILY, OPERANDS, BatchNormProblem
from .elementwise.kernels import DTYPES
from .layouts import same_layout
from .params import non_negative_eps, plan_setting, unit_interval_momentum

DEFAULTS = {"gamma": 1.0, "beta": 0.0, "running_mean": 0.0, "running_var": 1.0}


class _Unset:
    """A parameter not set yet: pointer 0 until the first non-empty forward creates its default."""
    ptr = 0
    shape = None


UNSET = _Unset()


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
        x = self.check_operand("x", x, layouts=(CONTIGUOUS, CHANNELS_LAST))
        y = self.check_operand("y", y, layouts=(CONTIGUOUS, CHANNELS_LAST))
        if x.ndim < 2:
            raise ValueError(f"{name}: x must be N x C or N x C x H x W (at least 2-D), got shape {list(x.shape)}")
        if tuple(y.shape) != tuple(x.shape):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected x's shape {list(x.shape)}")
        layout = same_layout(name, [("x", x), ("y", y)])
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
                                self._momentum if self._training else 0.0, layout)

    def work(self, x: Tensor, y: Tensor) -> tuple[float, float]:
        """2 flops per element, x read (training: twice) and y written once, 4 parameters per channel read."""
        c = x.shape[1] if x.ndim >= 2 else 0
        reads = 2 if self._training else 1
        return 2.0 * x.size, float(((reads + 1) * x.size + 4 * c) * self.dtype.itemsize)


BatchNormFloat, BatchNormDouble, BatchNormHalf, BatchNormBFloat16 = typed(
    BatchNorm, "BatchNorm", "batch norm (parameters and running statistics in x's dtype)", DTYPES)


