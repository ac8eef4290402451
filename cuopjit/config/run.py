"""RunSettings: what a forward runs under (config snapshot, cache choice, auto-tuning), interned.

A JIT wrapper passes its own settings per call; a bare operator runs under DEFAULT. Equal
settings are one object (`RunSettings.of`), so plan memos hash them by identity: a warm
forward never hashes a config.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .jit import ConfigSnapshot, JITConfig


@dataclass(frozen=True, eq=False)
class RunSettings:
    """Interned: build with `RunSettings.of(...)`, compare with `is`."""
    config: ConfigSnapshot
    cache_dir: str | None = None     # None: the global cache directory
    persistent: bool = True          # False: kernels live in this process only
    tuning: bool = False             # time the family's choices once per problem, keep the fastest

    _interned = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, config: ConfigSnapshot, cache_dir: str | None = None, persistent: bool = True,
           tuning: bool = False) -> "RunSettings":
        """The one RunSettings object with these values."""
        key = (config, cache_dir, persistent, tuning)
        found = cls._interned.get(key)
        if found is None:
            with cls._lock:
                found = cls._interned.setdefault(key, cls(config, cache_dir, persistent, tuning))
        return found


DEFAULT = RunSettings.of(JITConfig().snapshot())
