"""Cache counters shared by every process using one cache directory.

`stats.json` holds the totals; each event adds to it under a flock on that file, so counts from
concurrent processes never get lost and a reader (holding a shared lock) never sees half a record.
Memory-layer hits are counted per process only (they must stay nanoseconds-cheap).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
    """The persisted counters of one writable cache layer: a fixed-size JSON record rewritten in place.

    Each update is flock + pread + one pwrite of RECORD bytes: a single small write is never torn
    by a killed process, and no rename is needed (a rename over a file can cost a disk flush).
    """
    RECORD = 512

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> dict[str, float]:
        """Current totals (zeros when the file is missing or unreadable)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return self._parse(b"")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._parse(os.pread(fd, self.RECORD, 0))
        finally:
            os.close(fd)

    def add(self, **deltas: float) -> dict[str, float]:
        """Add `deltas` to the persisted totals, race-free across processes (an unknown approx_bytes stays -1)."""
        return self._update(lambda t: {k: t[k] + v if t[k] >= 0 else t[k] for k, v in deltas.items()})

    def set_bytes(self, size: int) -> None:
        """Record the exact size after a directory scan (the estimate eviction checks against)."""
        self._update(lambda t: {"approx_bytes": size})

    def reset(self) -> None:
        """Zero every counter (`cuopjit cache clear`); the size estimate becomes unknown."""
        with contextlib.suppress(FileNotFoundError):  # no cache directory yet: nothing to reset
            self._update(lambda t: {**dict.fromkeys(COUNTERS, 0), "approx_bytes": -1})

    def _update(self, change) -> dict[str, float]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            totals = self._parse(os.pread(fd, self.RECORD, 0))
            totals.update(change(totals))
            os.pwrite(fd, json.dumps(totals).encode().ljust(self.RECORD), 0)
            return totals
        finally:
            os.close(fd)

    @staticmethod
    def _parse(raw: bytes) -> dict[str, float]:
        totals: dict[str, float] = dict.fromkeys(COUNTERS, 0)
        totals["approx_bytes"] = -1
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            totals.update({k: v for k, v in json.loads(raw).items()
                           if k in totals and isinstance(v, (int, float))})
        return totals
