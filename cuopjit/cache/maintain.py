"""Listing, verifying and clearing cache layers: what `cuopjit cache ls / verify / clear` do."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import entry, fsio
from .entry import SUFFIX, EntryError
from .layer import Layer, UntrustedError


@dataclass(frozen=True)
class EntryInfo:
    """One entry as `cache ls` shows it (from its header; the payload is not read)."""
    name: str
    key: str
    arch: str
    template: str
    params: tuple[tuple[str, str], ...]
    nvrtc_version: str
    cuopjit_version: str
    size: int
    mtime: float
    path: str
    writable: bool


@dataclass
class VerifyReport:
    """`verify`'s findings: good entries, bad ones as (path, reason), and what --fix did."""
    ok: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    moved: int = 0
    temp_files_removed: int = 0


def list_entries(layers: list[Layer]) -> list[EntryInfo]:
    """Every readable entry of `layers`, most recently used first; unreadable files are skipped (see verify)."""
    out = []
    for layer in layers:
        for f in layer.scan():
            with contextlib.suppress(EntryError, OSError):
                h = entry.peek_header(str(f.path))
                out.append(EntryInfo(h["name"], h["key"], h["arch"], h.get("template", ""),
                                     tuple(tuple(p) for p in h.get("params", ())), h.get("nvrtc_version", ""),
                                     h.get("cuopjit_version", ""), f.size, f.mtime_ns / 1e9, str(f.path),
                                     layer.writable))
    return sorted(out, key=lambda e: -e.mtime)


def verify(layers: list[Layer], fix: bool = False) -> VerifyReport:
    """Fully check every entry (trust, checksum, key, file name); with `fix`, move bad ones of writable
    layers aside and delete temp files that no writer holds."""
    report = VerifyReport()
    for layer in layers:
        if problem := layer.dir_problem():
            report.bad.append((str(layer.root), problem))
            continue
        for f in sorted(layer.scan(), key=lambda f: f.path.name):
            try:
                if layer.read_entry(f.path) is None:
                    continue
                report.ok += 1
            except (EntryError, UntrustedError, OSError) as exc:
                reason = getattr(exc, "reason", "untrusted" if isinstance(exc, UntrustedError) else "unreadable")
                text = f"unreadable: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
                report.bad.append((str(f.path), text))
                if fix and layer.writable and layer.move_aside(f.path, reason):
                    report.moved += 1
        if fix and layer.writable:
            report.temp_files_removed += remove_idle_tmps(layer)
    return report


def remove_idle_tmps(layer: Layer) -> int:
    """Delete temp files left by killed writers: entry temps whose key lock is free, record temps whose
    writer is gone."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for e in list(os.scandir(layer.kernels)):
            if not (e.name.startswith(".") and fsio.TMP_MARK in e.name):
                continue
            target = e.name[1:e.name.index(fsio.TMP_MARK)]
            if not target.endswith(SUFFIX):
                continue
            with contextlib.suppress(fsio.LockTimeout, OSError), \
                    fsio.file_lock(layer.lock_path(target), timeout=0):
                removed += fsio.remove_orphan_tmps(layer.kernels, target)
    for directory in _subdirs(layer.records):
        for e in list(os.scandir(directory)):
            if fsio.TMP_MARK in e.name and not fsio.writer_alive(e.name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
                    removed += 1
    return removed


def clear(layer: Layer) -> int:
    """Delete every entry, record, rejected and idle temp/lock file of a writable layer; how many entries went."""
    removed = 0
    for f in layer.scan():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.path)
            removed += 1
    remove_idle_tmps(layer)
    for directory in (layer.rejected, *(p for p in _subdirs(layer.records))):
        with contextlib.suppress(FileNotFoundError):
            for e in os.scandir(directory):
                if e.is_file(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(layer.locks):
            if e.name != "prune.lock":
                fsio.try_lock_and_unlink(Path(e.path))
    return removed


def _subdirs(path: Path) -> list[Path]:
    with contextlib.suppress(FileNotFoundError):
        return [p for p in path.iterdir() if p.is_dir()]
    return []
