"""Size cap by LRU eviction: delete least-recently-used entries (oldest mtime; hits touch it) until under the cap.

Eviction only unlinks whole files, so a process that has the file open, or already read it,
is unaffected. One pruner at a time (a flock on locks/prune.lock); concurrent unlinks are harmless.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from . import fsio
from .layer import Layer


@dataclass(frozen=True)
class PruneResult:
    """What a prune did: files evicted, bytes freed, bytes left in entries."""
    evicted: int
    freed: int
    remaining: int


def prune(layer: Layer, max_size: int, timeout: float = 60.0) -> PruneResult:
    """Evict entries of a writable layer, oldest first, until their total size is at most `max_size`.

    Rejected files go first (they are never loaded again); lock files of entries that are gone
    and nobody holds are removed too.
    """
    layer.ensure_dirs()
    with fsio.file_lock(layer.locks / "prune.lock", timeout):
        freed = evicted = 0
        with contextlib.suppress(FileNotFoundError):
            for e in os.scandir(layer.rejected):
                with contextlib.suppress(FileNotFoundError):
                    size = e.stat().st_size
                    os.unlink(e.path)
                    freed += size
        files = sorted(layer.scan(), key=lambda f: f.mtime_ns)
        total = sum(f.size for f in files)
        for f in files:
            if total <= max_size:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f.path)
                evicted += 1
                freed += f.size
            total -= f.size
        _drop_idle_locks(layer)
        return PruneResult(evicted, freed, total)


def _drop_idle_locks(layer: Layer) -> None:
    """Remove per-key lock files whose entry is gone, when nobody holds them (they are cheap to recreate)."""
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(layer.locks):
            if e.name.endswith(".lock") and e.name != "prune.lock":
                entry = layer.kernels / (e.name.removesuffix(".lock") + ".cubin")
                if not entry.exists():
                    fsio.try_lock_and_unlink(layer.locks / e.name)
