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

_GLOBAL = get_default_global_jit_config()


class JITWrapper:
    """Base of JITGemmFloat & co.: `forward` runs the wrapped operator with this wrapper's settings."""

    operator_type: ClassVar[type[Operator]] = Operator

    def __init__(self, operator: Operator):
        if not isinstance(operator, self.operator_type):
            raise TypeError(f"{type(self).__name__} wraps a {self.operator_type.__name__}, "
                            f"got {type(operator).__name__}")
        self.operator = operator
        self._config = JITConfig()
        self._snapshot = self._config.snapshot()
        self._jit = True
        self._persistent = True
        self._directory: str | None = None
        self._version = 0           # bumped by every setter, so forward re-applies settings only then
        self._applied: tuple | None = None
        self._events: EventPair | None = None
        self._profile = PerformanceProfile()
        self._last: tuple = ((), {})

    # --- the cuOP JIT API -------------------------------------------------------------------
    def enable_jit(self, enable: bool = True) -> None:
        """False runs the operator's default kernel instead of one specialised by this wrapper's config."""
        self._jit = bool(enable)
        self._version += 1

    def enable_persistent_cache(self, enable: bool = True) -> None:
        """False keeps compiled kernels in this process only (nothing read from or written to disk)."""
        self._persistent = bool(enable)
        self._version += 1

    def set_persistent_cache_directory(self, path: str | os.PathLike) -> None:
        """Keep this operator's cubins in `path` instead of the global cache directory."""
        self._directory = os.fspath(path)
        self._version += 1

    def set_jit_config(self, config: JITConfig) -> None:
        """Use `config` from the next forward on; raises ValueError when the operator cannot honour it."""
        if not isinstance(config, JITConfig):
            raise TypeError(f"set_jit_config takes a cuopjit.JITConfig, got {type(config).__name__}")
        snapshot = config.snapshot()
        self.operator.check_config(snapshot)
        self._config, self._snapshot = config.copy(), snapshot
        self._version += 1

    def get_jit_config(self) -> JITConfig:
        return self._config.copy()

    def get_performance_profile(self) -> PerformanceProfile:
        """Time, GFLOP/s and GB/s of the last forward (waits for it to finish), and how its kernel was built."""
        p = self._profile
        if self._events is not None and p.calls:
            p.execution_time = self._events.elapsed_ms()
            seconds = p.execution_time * 1e-3
            args, kwargs = self._last
            flops, nbytes = self.operator.work(*args, **kwargs)
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
    def _apply(self, state: tuple, args: tuple, kwargs: dict) -> None:
        """Configure the operator for the current settings (and, when auto-tuning, this shape bucket)."""
        _, glob_jit, caching, tuning = state[:4]
        use_jit = self._jit and self._snapshot.enable_jit and glob_jit
        cfg = self._snapshot if use_jit else None
        directory = self._directory if (self._persistent and caching) else kernels.MEMORY_ONLY
        if use_jit and tuning:
            from .tuning import tuned_config
            cfg = tuned_config(self.operator, self._config, directory, args, kwargs)
        self.operator._configure(cfg, directory)
        self._applied = state

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped operator under this wrapper's settings, timed for the profile."""
        glob = _GLOBAL
        state = (self._version, glob.enable_jit, glob.enable_caching, glob.enable_auto_tuning)
        if glob.enable_auto_tuning:
            from .tuning import record_key
            state += (record_key(self.operator, args),)
        if state != self._applied:
            self._apply(state, args, kwargs)
        events = self._events
        if events is None:
            events = self._events = self.operator._timing = EventPair()
        events.record_start()
        result = self.operator.forward(*args, **kwargs)
        events.record_end()
        self._last = (args, kwargs)
        self._profile.calls += 1
        return result

    __call__ = forward
