"""JIT* wrappers: a JITConfig, the persistent-cache switch, auto-tuning and a performance profile.

A wrapper owns no kernels: it configures the operator it wraps (config snapshot and cache
directory) and times each forward with a pair of CUDA events.
"""
from __future__ import annotations

import os
from typing import Any, ClassVar

from . import kernels
from .config import JITConfig, get_default_global_jit_config
from .ops.base import Operator
from .profile import EventPair, PerformanceProfile


class JITWrapper:
    """Base of JITGemmFloat & co.: `forward` runs the wrapped operator with this wrapper's settings."""

    operator_type: ClassVar[type[Operator]] = Operator

    def __init__(self, operator: Operator):
        if not isinstance(operator, self.operator_type):
            raise TypeError(f"{type(self).__name__} wraps a {self.operator_type.__name__}, "
                            f"got {type(operator).__name__}")
        self.operator = operator
        self._config = JITConfig()
        self._jit = True
        self._persistent = True
        self._directory: str | None = None
        self._applied: tuple | None = None
        self._events: EventPair | None = None
        self._profile = PerformanceProfile()
        self._work: tuple[float, float] = (0.0, 0.0)

    # --- the cuOP JIT API -------------------------------------------------------------------
    def enable_jit(self, enable: bool = True) -> None:
        """False runs the operator's default kernel instead of one specialised by this wrapper's config."""
        self._jit = bool(enable)

    def enable_persistent_cache(self, enable: bool = True) -> None:
        """False keeps compiled kernels in this process only (nothing read from or written to disk)."""
        self._persistent = bool(enable)

    def set_persistent_cache_directory(self, path: str | os.PathLike) -> None:
        """Keep this operator's cubins in `path` instead of the global cache directory."""
        self._directory = os.fspath(path)

    def set_jit_config(self, config: JITConfig) -> None:
        """Use `config` from the next forward on; raises ValueError when the operator cannot honour it."""
        if not isinstance(config, JITConfig):
            raise TypeError(f"set_jit_config takes a cuopjit.JITConfig, got {type(config).__name__}")
        self.operator.check_config(config.snapshot())
        self._config = config.copy()

    def get_jit_config(self) -> JITConfig:
        return self._config.copy()

    def get_performance_profile(self) -> PerformanceProfile:
        """Time, GFLOP/s and GB/s of the last forward (waits for it to finish), and how its kernel was built."""
        p = self._profile
        if self._events is not None and p.calls:
            p.execution_time = self._events.elapsed_ms()
            seconds = p.execution_time * 1e-3
            flops, nbytes = self._work
            p.gflops = flops / seconds / 1e9 if seconds else 0.0
            p.bandwidth_gbps = nbytes / seconds / 1e9 if seconds else 0.0
        loaded = self.operator.last_kernel
        if loaded is not None:
            p.kernel_name = loaded.spec.name
            p.cache_hit = loaded.info.cache_hit
            p.build_time = loaded.info.seconds * 1e3
            p.registers = loaded.info.registers
        return p

    # --- running ------------------------------------------------------------------------------
    def _settings(self) -> tuple:
        glob = get_default_global_jit_config()
        use_jit = self._jit and self._config.enable_jit and glob.enable_jit
        cfg = self._config.snapshot() if use_jit else None
        if not self._persistent or not glob.enable_caching:
            directory = kernels.MEMORY_ONLY
        else:
            directory = self._directory
        return cfg, directory, use_jit and glob.enable_auto_tuning

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped operator under this wrapper's settings, timed for the profile."""
        settings = self._settings()
        if settings[2]:  # auto-tuning: one decision per shape bucket
            from .tuning import record_key
            settings = settings + (record_key(self.operator, args),)
        if settings != self._applied:
            cfg, directory, tune = settings[:3]
            if tune:
                from .tuning import tuned_config
                cfg = tuned_config(self.operator, self._config, directory, args, kwargs)
            self.operator._configure(cfg, directory)
            self._applied = settings
        if self._events is None:
            self._events = EventPair()
        self._events.record_start()
        result = self.operator.forward(*args, **kwargs)
        self._events.record_end()
        self._work = self.operator.work(*args, **kwargs)
        self._profile.calls += 1
        return result

    __call__ = forward
