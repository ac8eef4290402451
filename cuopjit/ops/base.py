"""What every operator shares: its dtype, the JIT settings a wrapper sets, checks, prepared launches."""
from __future__ import annotations

from typing import Any, ClassVar, Hashable, Sequence

import numpy as np

from .. import driver, kernels
from ..config import ConfigSnapshot, JITConfig
from ..launch import Launch
from ..tensor import Tensor

DEFAULT_CONFIG = JITConfig().snapshot()


class Operator:
    """Base class: subclasses set `dtype` and the JITConfig choices they support, and implement forward.

    A `JIT*` wrapper calls `_configure` to swap the config or cache directory. Prepared launches
    live in `_launches`, keyed by whatever decides the kernel (shapes, dtypes, device, alignment);
    `forward` probes that dict first, so a warm call does no checks beyond the key itself.
    """

    dtype: ClassVar[np.dtype]
    family: ClassVar[str] = ""
    kernel_types: ClassVar[tuple[str, ...]] = ("auto",)
    tile_sizes: ClassVar[tuple[int, ...]] = (0,)
    block_sizes: ClassVar[tuple[int, ...]] = (0, 64, 128, 256, 512, 1024)
    supports_tensor_core: ClassVar[bool] = False
    supports_tma: ClassVar[bool] = False
    uses_shared_memory: ClassVar[bool] = True  # False: no shared-memory stage for enable_shared_memory_opt to change

    def __init__(self) -> None:
        self._config: ConfigSnapshot = DEFAULT_CONFIG
        self._cache_dir: str | None = None
        self._launches: dict[Hashable, Launch] = {}
        self.last_kernel: kernels.LoadedKernel | None = None
        self._timing = None  # a JIT wrapper's EventPair: its start is re-recorded after a cold build

    # --- configuration (set by JIT wrappers) --------------------------------------------------
    @classmethod
    def check_config(cls, cfg: ConfigSnapshot) -> None:
        """Raise ValueError when this operator cannot honour a field of `cfg`."""
        name = cls.__name__
        if cfg.kernel_type not in cls.kernel_types:
            raise ValueError(f"{name} has no kernel_type={cfg.kernel_type!r}: choose one of "
                             f"{', '.join(map(repr, cls.kernel_types))}")
        if cfg.tile_size not in cls.tile_sizes:
            raise ValueError(f"{name} does not take tile_size={cfg.tile_size}: choose one of "
                             f"{', '.join(map(str, cls.tile_sizes))} (0 = automatic)")
        if cfg.block_size not in cls.block_sizes:
            raise ValueError(f"{name} does not take block_size={cfg.block_size}: choose one of "
                             f"{', '.join(map(str, cls.block_sizes))} (0 = automatic)")
        if cfg.enable_tensor_core and not cls.supports_tensor_core:
            raise ValueError(f"{name} has no tensor-core kernel: set enable_tensor_core=False")
        if cfg.enable_tma and not cls.supports_tma:
            raise ValueError(f"{name} has no TMA kernel: set enable_tma=False")
        if not cfg.enable_shared_memory_opt and not cls.uses_shared_memory:
            raise ValueError(f"{name} streams through registers and keeps nothing in shared memory, so "
                             "enable_shared_memory_opt=False has nothing to turn off: leave it True")

    def _configure(self, cfg: ConfigSnapshot | None, cache_dir: str | None) -> None:
        cfg = cfg or DEFAULT_CONFIG
        if cfg != DEFAULT_CONFIG:
            self.check_config(cfg)
        if (cfg, cache_dir) != (self._config, self._cache_dir):
            self._config, self._cache_dir = cfg, cache_dir
            self._launches.clear()

    # --- kernels and launches -----------------------------------------------------------------
    def _prepare(self, spec: kernels.KernelSpec, grid: Sequence[int], block: Sequence[int], shared: int,
                 args: Sequence[tuple[str, Any]]) -> Launch:
        """Load (or build) the kernel for `spec` on the current device and pack its launch."""
        loaded = kernels.get_function(spec, driver.current_ordinal(), self._cache_dir)
        self.last_kernel = loaded
        launch = Launch(loaded.function, grid, block, shared, args)
        if self._timing is not None:  # the profile times the kernels, not the compile before them
            self._timing.record_start()
        return launch

    def _spec(self, template: str, kernel: str, name: str, params: dict, arch_specific: bool = False
              ) -> kernels.KernelSpec:
        return kernels.make_spec(template, kernel, name, params, self._config, arch_specific)

    # --- checks ---------------------------------------------------------------------------------
    def _check(self, name: str, t: Any, ndim: int | None = None, shape: Sequence[int] | None = None) -> Tensor:
        """`t` must be a Tensor of this operator's dtype on the current device (and of `shape`, if given)."""
        op = type(self).__name__
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: {name} must be a cuopjit Tensor, got {type(t).__name__} "
                            "(wrap arrays with cuopjit.tensor(...))")
        if t.dtype != self.dtype:
            raise TypeError(f"{op}: {name} is {t.dtype.name}, {op} works on {self.dtype.name}")
        if ndim is not None and t.ndim != ndim:
            raise ValueError(f"{op}: {name} must be {ndim}-D, got shape {list(t.shape)}")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: {name} has shape {list(t.shape)}, expected {list(shape)}")
        if t.device != driver.current_ordinal():
            raise ValueError(f"{op}: {name} is on device {t.device} but the current device is "
                             f"{driver.current_ordinal()}: call cuopjit.set_device({t.device})")
        t._live()
        return t

    # --- work figures for profiles ------------------------------------------------------------
    def work(self, *args: Any, **kwargs: Any) -> tuple[float, float]:
        """(floating-point operations, bytes moved) of one forward with these arguments."""
        return 0.0, 0.0

    def tuning_candidates(self, cfg: ConfigSnapshot) -> list[ConfigSnapshot]:
        """Configs auto-tuning may time for this operator, derived from `cfg`; none means nothing to tune."""
        return []

    def specs(self) -> list[kernels.KernelSpec]:
        """The kernels this operator uses under its current config, for prewarm and show."""
        return []


def dtype_tag(dtype: np.dtype) -> str:
    """'f32' / 'f64' for readable kernel names."""
    return "f32" if dtype == np.float32 else "f64"


def scalar_t(dtype: np.dtype) -> str:
    return "float" if dtype == np.float32 else "double"
