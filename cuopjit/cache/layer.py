"""One cache directory (a layer): where entries, records, locks and rejected files live on disk.

    <root>/kernels/<name>-<key16>.cubin      one entry per file (entry.py)
    <root>/records/<kind>/<key>.json         small JSON records (autotuning timings)
    <root>/locks/<name>-<key16>.lock         per-key compile locks (flock)
    <root>/rejected/<file>.<reason>.<ns>     entries that failed verification, kept for inspection
    <root>/stats.json                        persisted counters (stats.py)

A read-only layer has the same layout; cuopjit only ever reads it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..log import warn_once
from . import access, entry, fsio, trust
from .entry import SUFFIX, EntrySpec

_SAFE = re.compile(r"[A-Za-z0-9_.+-]{1,100}")


def record_file_name(kind: str, key: str) -> str:
    """`<key>.json` for a file-name-safe key, else `<sha256(key)>.json`; ValueError for a bad kind."""
    if not _SAFE.fullmatch(kind) or kind.startswith("."):
        raise ValueError(f"record kind {kind!r} is not allowed: use 1-100 of A-Z a-z 0-9 _ . + -")
    stem = key if _SAFE.fullmatch(key) and not key.startswith(".") else hashlib.sha256(key.encode()).hexdigest()
    return f"{stem}.json"


class UntrustedError(Exception):
    """A file or directory another user could have written; the message says how to fix it."""


@dataclass(frozen=True)
class FileInfo:
    """An entry file found by a directory scan."""
    path: Path
    size: int
    mtime_ns: int


class Layer:
    """A cache directory; `writable` layers also get locks, stats, rejected/ and eviction."""

    def __init__(self, root: Path, writable: bool):
        self.root = Path(root)
        self.writable = writable
        self.kernels = self.root / "kernels"
        self.records = self.root / "records"
        self.locks = self.root / "locks"
        self.rejected = self.root / "rejected"
        self.stats_path = self.root / "stats.json"
        self._must_exist = not writable
        self._dir_problem: str | None | bool = False
        self._write_problem: str | None | bool = False
        self._made = False

    def __repr__(self) -> str:
        return f"Layer({str(self.root)!r}, writable={self.writable})"

    def dir_problem(self) -> str | None:
        """Why this layer must not be read: unreachable, not a directory, or not to be trusted (checked once)."""
        if self._dir_problem is False:
            self._dir_problem = self.access_problem() or next(filter(None, (
                trust.check_path(d) for d in (self.root, self.kernels, self.records))), None)
        return self._dir_problem

    def access_problem(self) -> str | None:
        """Why this layer's directories cannot be read at all (a read-only layer must also exist), or None."""
        return access.read_problem(self.root, (self.kernels, self.records), must_exist=self._must_exist)

    def write_problem(self) -> str | None:
        """Why entries cannot be written into this layer, or None (checked once per process)."""
        if self._write_problem is False:
            self._write_problem = (access.write_problem(self.root, (self.kernels, self.records, self.locks))
                                   if self.writable else f"{self.root} is a read-only layer")
        return self._write_problem

    def problem(self) -> str | None:
        """Why this layer cannot be used as configured (read; the writable layer also written), or None."""
        return self.dir_problem() or (None if self._must_exist else self.write_problem())

    def warn_unusable(self) -> None:
        """Warn once per process that this layer is skipped (read-only) or leaves kernels in memory, and why."""
        if not (problem := self.problem()):
            return
        if self._must_exist:
            text = f"cache: skipping the read-only layer {self.root} (CUOPJIT_CACHE_READONLY): {problem}"
        elif self.access_problem() is None and self.dir_problem():
            text = f"cache: {problem}; until then compiled kernels are kept in memory only"
        else:
            text = (f"cache: {problem}; compiled kernels are kept in memory for this process only. To keep them "
                    f"on disk, {access.advice(problem)}")
        warn_once(f"unusable:{self.root}", text)

    def writes_failed(self, problem: str) -> None:
        """Stop writing into this layer for the rest of the process, because of `problem`."""
        self.writable = False
        self._write_problem = problem

    def ensure_dirs(self) -> None:
        """Create the layout (mode 0o700) before the first write."""
        if self._made:
            return
        for d in (self.kernels, self.records, self.locks):
            if not d.is_dir():
                fsio.make_private_dirs(d)
                self._dir_problem = False
        self._made = True

    def entry_path(self, spec: EntrySpec) -> Path:
        return self.kernels / spec.file_name

    def lock_path(self, file_name: str) -> Path:
        return self.locks / (file_name.removesuffix(SUFFIX) + ".lock")

    def read(self, path: Path) -> tuple[bytes, os.stat_result] | None:
        """The file's bytes and stat, None if absent; UntrustedError if another user could have written it."""
        problem = self.dir_problem()
        if problem:
            raise UntrustedError(problem)
        got = fsio.read_bytes(path)
        if got is not None and (problem := trust.untrusted_reason(path, got[1])):
            raise UntrustedError(problem)
        return got

    def read_entry(self, path: Path):
        """(bytes, decoded entry) of an entry file whose header names this very file, None if absent.

        Raises EntryError for a bad entry, UntrustedError or OSError as `read` does.
        """
        got = self.read(path)
        if got is None:
            return None
        found = entry.decode(got[0])
        if found.file_name != path.name:
            raise entry.EntryError("name", f"file holds {found.file_name}")
        return got[0], found

    def store(self, file_name: str, data: bytes) -> None:
        """Atomically install an entry (call under its key lock: orphan temp files of the key are removed)."""
        self.ensure_dirs()
        fsio.remove_orphan_tmps(self.kernels, file_name)
        try:
            fsio.atomic_write(self.kernels / file_name, data)
        except FileNotFoundError:
            self._made = False
            self.ensure_dirs()
            fsio.atomic_write(self.kernels / file_name, data)

    @contextlib.contextmanager
    def key_lock(self, file_name: str, timeout: float) -> Iterator[None]:
        """Exclusive per-entry lock held while compiling and storing it."""
        self.ensure_dirs()
        with fsio.file_lock(self.lock_path(file_name), timeout):
            yield

    def move_aside(self, path: Path, reason: str, seen: os.stat_result | None = None) -> Path | None:
        """Move a bad entry into rejected/ (only if it is still the file that was read); the new path or None."""
        try:
            if seen is not None and os.stat(path).st_ino != seen.st_ino:
                return None
            fsio.make_private_dirs(self.rejected)
            dest = self.rejected / f"{path.name}.{reason}.{time.time_ns()}"
            os.replace(path, dest)
            return dest
        except OSError:
            return None

    def scan(self) -> list[FileInfo]:
        """Every entry file (temp files excluded), unsorted."""
        out = []
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for e in os.scandir(self.kernels):
                if e.name.endswith(SUFFIX) and not e.name.startswith("."):
                    with contextlib.suppress(FileNotFoundError):
                        st = e.stat(follow_symlinks=False)
                        out.append(FileInfo(Path(e.path), st.st_size, st.st_mtime_ns))
        return out

    def touch(self, path: Path) -> None:
        """Mark an entry as just used (LRU eviction reads mtimes)."""
        with contextlib.suppress(OSError):
            os.utime(path)

    def record_path(self, kind: str, key: str) -> Path:
        return self.records / kind / record_file_name(kind, key)

    def read_record(self, kind: str, key: str) -> dict | None:
        """A record's value, or None if absent, unreadable or for another key (UntrustedError as for entries)."""
        path = self.record_path(kind, key)
        got = self.read(path)
        if got is None:
            return None
        with contextlib.suppress(ValueError, TypeError, KeyError):
            doc = json.loads(got[0])
            if doc["key"] == key and isinstance(doc["value"], dict):
                return doc["value"]
        return None

    def write_record(self, kind: str, key: str, value: dict[str, Any]) -> None:
        """Atomically write a record."""
        path = self.record_path(kind, key)
        self.ensure_dirs()
        fsio.make_private_dirs(path.parent)
        fsio.atomic_write(path, json.dumps({"key": key, "value": value}, sort_keys=True).encode())

    def record_files(self) -> Iterator[tuple[str, Path]]:
        """(kind, path) of every record file."""
        with contextlib.suppress(FileNotFoundError):
            for kind_dir in sorted(self.records.iterdir()):
                for p in sorted(kind_dir.glob("*.json")):
                    yield kind_dir.name, p


def usable_layers(layers: tuple[Layer, ...] | list[Layer]) -> list[Layer]:
    """`layers` less those that cannot be read (each of those is warned about once per process)."""
    for layer in layers:
        if layer.dir_problem():
            layer.warn_unusable()
    return [layer for layer in layers if not layer.dir_problem()]


def first_record(layers: tuple[Layer, ...], kind: str, key: str) -> dict | None:
    """The record from the first layer that has a trusted, readable copy (untrusted ones are warned about)."""
    for layer in layers:
        try:
            if (value := layer.read_record(kind, key)) is not None:
                return value
        except UntrustedError as exc:
            warn_once(f"untrusted:{layer.record_path(kind, key)}", f"cache: {exc}")
        except OSError:
            continue
    return None
