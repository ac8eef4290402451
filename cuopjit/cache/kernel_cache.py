"""KernelCache: memory → read-only layers → writable layer → per-key lock → re-check → build → atomic store.
Every entry is verified on load; a bad one is moved aside, counted, logged once and rebuilt.
When nothing is writable the cache keeps working from memory and says so once.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Callable, Collection, Iterator

from ..config import get_default_global_jit_config
from ..log import logger, warn_once
from . import access, bundle, entry, evict, fsio, maintain
from .entry import EntryError, EntrySpec
from .layer import Layer, UntrustedError, first_record, record_file_name, usable_layers
from .stats import COUNTERS, CacheStats, StatsFile

_INVALID = "invalidated"


class KernelCache:
    """The persistent cubin cache of one writable directory (or none: memory only) plus read-only layers."""

    def __init__(self, directory: str | os.PathLike | None, readonly: tuple[str | os.PathLike, ...] = (),
                 max_size: int | None = None):
        self.layer = Layer(Path(directory), writable=True) if directory is not None else None
        self.readonly = tuple(Layer(Path(d), writable=False) for d in readonly)
        self._max_size = max_size
        self._memory: dict[str, bytes] = {}
        self._records: dict[tuple[str, str], dict] = {}
        self._origin: dict[str, Layer] = {}
        self._local = dict.fromkeys(COUNTERS, 0)
        self._memory_hits = 0
        self._guards: dict[str, threading.Lock] = {}
        self._stats = StatsFile(self.layer.stats_path) if self.layer else None

    @property
    def directory(self) -> Path | None:
        """The writable directory, or None when this cache lives in memory only."""
        return self.layer.root if self.layer else None

    @property
    def readable(self) -> bool:
        """Whether the (possibly no longer writable) directory layer may be read."""
        return self.layer is not None and not self.layer.dir_problem()

    @property
    def writable(self) -> bool:
        """Whether entries are currently stored on disk."""
        return self.problem() is None

    def problem(self) -> str | None:
        """Why compiled kernels are not stored on disk now (a sentence naming the directory), or None."""
        if self.layer is None:
            return "caching is switched off (GlobalJITConfig.enable_caching is False)"
        return self.layer.problem()

    def persisted(self, key: str) -> bool:
        """Whether the entry with this key was loaded from, or stored into, a directory layer by this process."""
        return key in self._origin

    def max_size(self) -> int:
        """The size cap: this cache's own, else GlobalJITConfig / CUOPJIT_MAX_CACHE_SIZE (4 GiB)."""
        return self._max_size or get_default_global_jit_config().resolved_max_cache_size()

    def get_or_build(self, spec: EntrySpec, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        """The cubin for `spec`, and True when it came from a cache layer (False: `build()` ran here)."""
        cubin = self._memory.get(spec.key)
        if cubin is not None:
            self._memory_hits += 1
            return cubin, True
        with self._guards.setdefault(spec.key, threading.Lock()):
            return self._get_or_build_locked(spec, build)

    def contains(self, spec: EntrySpec) -> bool:
        """True when a layer (or this process's memory) holds a valid entry for `spec`; builds nothing."""
        return self._memory.get(spec.key) is not None or self._lookup(spec) is not None

    def _get_or_build_locked(self, spec: EntrySpec, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        if (cubin := self._memory.get(spec.key)) is not None:
            return cubin, True
        if (cubin := self._lookup(spec)) is not None:
            return cubin, True
        self._count(misses=1)
        logger().debug("cache miss %s (%s)", spec.name, spec.key[:16])
        with self._key_lock(spec) as locked:
            if locked and (cubin := self._load(self.layer, spec)) is not None:
                return cubin, True
            start = time.perf_counter()
            cubin = bytes(build())
            seconds = time.perf_counter() - start
            logger().debug("cache compile %s: %.1f ms", spec.name, seconds * 1e3)
            self._memory[spec.key] = cubin
            self._store(spec, cubin, seconds)
        return cubin, False

    def _lookup(self, spec: EntrySpec) -> bytes | None:
        if self.readonly and not (self.readable and first_record((self.layer,), _INVALID, spec.key)):
            for layer in usable_layers(self.readonly):
                if (cubin := self._load(layer, spec)) is not None:
                    return cubin
        if self.layer is None or not usable_layers((self.layer,)):
            return None
        return self._load(self.layer, spec)

    def _load(self, layer: Layer, spec: EntrySpec) -> bytes | None:
        """Read and verify one layer's entry; a bad entry is rejected (moved aside when writable)."""
        path = layer.entry_path(spec)
        try:
            got = layer.read(path)
        except UntrustedError as exc:
            warn_once(f"untrusted:{path}", f"cache: {exc}")
            return None
        except OSError as exc:
            warn_once(f"unreadable:{path}", f"cache: cannot read {path} ({exc.strerror}); rebuilding")
            return None
        if got is None:
            return None
        data, st = got
        try:
            found = entry.decode(data)
            entry.check_matches(found, spec)
        except EntryError as exc:
            self._reject(layer, path, exc.reason, str(exc), st)
            return None
        if layer.writable:
            layer.touch(path)
        self._memory[spec.key] = found.payload
        self._origin[spec.key] = layer
        self._count(hits=1)
        logger().debug("cache hit %s (%s) from %s", spec.name, spec.key[:16], layer.root)
        return found.payload

    def _reject(self, layer: Layer, path: Path, reason: str, detail: str, st: os.stat_result | None) -> None:
        dest = layer.move_aside(path, reason, st) if layer.writable else None
        where = f"moved to {dest}" if dest else "left in place"
        warn_once(f"reject:{path}", f"cache: rejected {path} ({detail}); {where}; the kernel is rebuilt")
        logger().debug("cache reject %s: %s", path.name, detail)
        self._count(rejected=1)

    @contextlib.contextmanager
    def _key_lock(self, spec: EntrySpec) -> Iterator[bool]:
        """Hold the per-key lock of the writable layer; yields False when there is none or it timed out."""
        stack = contextlib.ExitStack()
        locked = False
        if self.writable:
            timeout = get_default_global_jit_config().compilation_timeout
            try:
                stack.enter_context(self.layer.key_lock(spec.file_name, timeout))
                locked = True
            except fsio.LockTimeout:
                warn_once(f"locktimeout:{spec.key}", f"cache: another process has been compiling {spec.name} for "
                          f"over {timeout:g} s (compilation_timeout); compiling it here as well")
            except OSError as exc:
                self._writes_failed(exc)
        with stack:
            yield locked

    def _store(self, spec: EntrySpec, cubin: bytes, seconds: float) -> None:
        data, stored = entry.encode(spec, cubin, created=time.time()), False
        if self.writable:
            try:
                self.layer.store(spec.file_name, data)
                stored = True
            except OSError as exc:
                self._writes_failed(exc)
        if not stored:
            if self.layer is not None:
                self.layer.warn_unusable()
            self._count(compiles=1, compile_seconds=seconds)
            return
        self._origin[spec.key] = self.layer
        totals = self._count(compiles=1, compile_seconds=seconds, approx_bytes=len(data))
        if totals is not None and not 0 <= totals["approx_bytes"] <= self.max_size():
            try:
                self.prune(self.max_size())
            except fsio.LockTimeout:
                logger().debug("cache prune skipped: another process has been pruning for a minute")
            except OSError as exc:
                self._writes_failed(exc)

    def _writes_failed(self, exc: OSError) -> None:
        """A write failed: a full, read-only or forbidden disk turns this cache memory-only for the process."""
        if exc.errno in fsio.NOT_WRITABLE:
            self.layer.writes_failed(f"{self.layer.root} is not writable ({exc.strerror or exc})")
            self.layer.warn_unusable()
        else:
            warn_once(f"writefail:{self.layer.root}", f"cache: could not store in {self.layer.root} ({exc}); "
                      "the kernel stays in memory for this process")

    def _count(self, **deltas: float) -> dict[str, float] | None:
        """Add to this process's counters and, when writable, to the persisted totals (which it returns)."""
        for k, v in deltas.items():
            if k in self._local:
                self._local[k] += v
        if not self.writable:
            return None
        try:
            self.layer.ensure_dirs()
            return self._stats.add(**deltas)
        except OSError as exc:
            self._writes_failed(exc)
            return None

    def invalidate(self, spec: EntrySpec, reason: str) -> None:
        """The driver rejected this cubin: move the entry aside, count it, warn once; the next lookup rebuilds.
        An entry of a read-only layer cannot be moved: a tombstone record in the writable layer makes every
        later process skip the read-only layers for this key."""
        with self._guards.setdefault(spec.key, threading.Lock()):
            self._memory.pop(spec.key, None)
            origin = self._origin.pop(spec.key, None) or self.layer
            if origin is not None and not origin.writable and self.writable:
                self._write_record(self.layer, _INVALID, spec.key, {"reason": reason, "layer": str(origin.root)})
            if origin is not None:
                self._reject(origin, origin.entry_path(spec), "driver", f"the driver rejected it: {reason}", None)
            else:
                warn_once(f"reject:{spec.key}", f"cache: the driver rejected {spec.name} ({reason}); rebuilding")
                self._count(rejected=1)

    def load_record(self, kind: str, key: str) -> dict | None:
        """A small JSON record (e.g. an autotuning timing): memory, then the writable layer, then read-only."""
        if (value := self._records.get((kind, key))) is None:
            value = first_record(tuple(usable_layers(self.layers())), kind, key)
            if value is not None:
                self._records[(kind, key)] = value
        return value

    def store_record(self, kind: str, key: str, value: dict) -> None:
        """Save a record in memory and, when writable, atomically on disk."""
        record_file_name(kind, key)
        self._records[(kind, key)] = dict(value)
        if self.writable:
            self._write_record(self.layer, kind, key, value)

    def _write_record(self, layer: Layer, kind: str, key: str, value: dict) -> None:
        try:
            layer.write_record(kind, key, value)
        except OSError as exc:
            self._writes_failed(exc)

    def prune(self, max_size: int) -> evict.PruneResult:
        """Evict least-recently-used entries until the writable layer holds at most `max_size` bytes."""
        if not self.writable:
            return evict.PruneResult(0, 0, 0)
        result = evict.prune(self.layer, max_size)
        self._stats.set_bytes(result.remaining)
        if result.evicted:
            self._count(evictions=result.evicted)
            logger().debug("cache evicted %d entries (%d bytes)", result.evicted, result.freed)
        return result

    def layers(self, usable: bool = False) -> list[Layer]:
        """The directory layers, writable first; `usable` drops (and warns once about) unreadable read-only ones."""
        return ([self.layer] if self.layer else []) + (usable_layers(self.readonly) if usable else list(self.readonly))

    def entries(self) -> list[maintain.EntryInfo]:
        """Every entry on disk (all usable layers), most recently used first."""
        return maintain.list_entries(self.layers(usable=True))

    def verify(self, fix: bool = False) -> maintain.VerifyReport:
        """Check every entry fully; with `fix`, move bad ones aside (counted as rejected) and drop stale temp files."""
        report = maintain.verify(self.layers(), fix=fix and self.writable)
        if report.moved:
            self._count(rejected=report.moved)
        return report

    def clear(self) -> int:
        """Delete everything in the writable layer and zero the counters; returns how many entries were removed."""
        self._memory.clear()
        self._records.clear()
        self._origin.clear()
        if not self.writable:
            return 0
        removed = maintain.clear(self.layer)
        self._stats.reset()
        return removed

    def export_bundle(self, path: str | os.PathLike, keys: Collection[str] | None = None) -> bundle.BundleResult:
        """Write every valid entry and record (all layers), or only the entries with `keys`, into a bundle file."""
        return bundle.export_bundle(self.layers(usable=True), path, keys)

    def import_bundle(self, path: str | os.PathLike) -> bundle.BundleResult:
        """Verify and atomically install a bundle's entries and records into the writable layer."""
        if problem := self.problem():
            raise bundle.BundleError(f"cannot import {path}: {problem}; {access.advice(problem)}")
        result = bundle.import_bundle(self.layer, path)
        self.prune(self.max_size())
        return result

    def stats(self) -> CacheStats:
        """Counters (persisted across processes when writable) plus the current entry count and size."""
        totals = self._stats.read() if self.writable else self._local
        files = self.layer.scan() if self.layer else []
        return CacheStats(entries=len(files), bytes=sum(f.size for f in files),
                          **{k: totals[k] for k in COUNTERS}, memory_hits=self._memory_hits,
                          directory=str(self.directory or ""), writable=self.writable,
                          readonly_layers=[str(layer.root) for layer in self.readonly])
