"""Cache counters shared by every process using one cache directory.

`stats.json` holds the totals; each event adds to it under a flock and rewrites it atomically,
so counts from concurrent processes never get lost and a reader never sees half a file.
Memory-layer hits are counted per process only (they must stay nanoseconds-cheap).
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import fsio

COUNTERS = ("hits", "misses", "compiles", "compile_seconds", "evictions", "rejected")


@dataclass
class CacheStats:
    """What `cuopjit cache stats` shows. hits: served from disk; misses: not on disk at first look
    (a miss then served by another process's compile is a miss and a hit); compiles: build() ran."""
    entries: int = 0
    bytes: int = 0
    hits: int = 0
    misses: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    evictions: int = 0
    rejected: int = 0
    memory_hits: int = 0
    directory: str = ""
    writable: bool = False
    readonly_layers: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class StatsFile:
    """The persisted counters of one writable cache layer."""

    def __init__(self, path: Path, lock: Path):
        self.path, self.lock = path, lock

    def read(self) -> dict[str, float]:
        """Current totals (zeros when the file is missing or unreadable)."""
        totals: dict[str, float] = dict.fromkeys(COUNTERS, 0)
        totals["approx_bytes"] = -1
        with contextlib.suppress(OSError, ValueError, TypeError):
            totals.update({k: v for k, v in json.loads(self.path.read_bytes()).items()
                           if k in totals and isinstance(v, (int, float))})
        return totals

    def add(self, **deltas: float) -> dict[str, float]:
        """Add `deltas` to the persisted totals, race-free across processes (an unknown approx_bytes stays -1)."""
        return self._update(lambda t: {k: t[k] + v if t[k] >= 0 else t[k] for k, v in deltas.items()})

    def set_bytes(self, size: int) -> None:
        """Record the exact size after a directory scan (the estimate eviction checks against)."""
        self._update(lambda t: {"approx_bytes": size})

    def reset(self) -> None:
        """Zero every counter (`cuopjit cache clear`)."""
        self._update(lambda t: {k: 0 for k in t})

    def _update(self, change) -> dict[str, float]:
        with fsio.file_lock(self.lock, timeout=10.0):
            fsio.remove_orphan_tmps(self.path.parent, self.path.name)
            totals = self.read()
            totals.update(change(totals))
            fsio.atomic_write(self.path, json.dumps(totals).encode(), durable=False)
            return totals

