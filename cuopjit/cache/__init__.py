"""The persistent cubin cache: one verified file per entry, layers, locks, eviction, bundles, stats.

`get_cache()` returns the process's KernelCache for the configured directory; the kernel
pipeline calls `get_or_build(spec, build)` and, when the driver rejects a cubin, `invalidate`.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from ..config import environment, get_default_global_jit_config
from .entry import FORMAT_VERSION, EntryError, EntrySpec
from .kernel_cache import KernelCache
from .stats import CacheStats

__all__ = ["FORMAT_VERSION", "CacheStats", "EntryError", "EntrySpec", "KernelCache", "get_cache"]

_caches: dict[tuple, KernelCache] = {}
_caches_lock = threading.Lock()


def get_cache(directory: str | os.PathLike | None = None) -> KernelCache:
    """The KernelCache for `directory` (default: the configured cache dir), one per directory per process.

    With GlobalJITConfig.enable_caching False it is memory-only; CUOPJIT_CACHE_READONLY adds read-only layers.
    """
    config = get_default_global_jit_config()
    readonly = tuple(str(Path(p).expanduser().resolve()) for p in environment().cache_readonly)
    if directory is None and not config.enable_caching:
        resolved = None
    else:
        resolved = str(Path(directory if directory is not None else config.resolved_cache_dir()).expanduser().resolve())
    with _caches_lock:
        cache = _caches.get((resolved, readonly))
        if cache is None:
            cache = _caches[(resolved, readonly)] = KernelCache(resolved, readonly)
        return cache
