"""Portable bundles: a gzipped tar of entry files and records plus manifest.json with their sha256.

`export_bundle` on a GPU-less build machine, `import_bundle` (or CUOPJIT_CACHE_READONLY on an
unpacked copy) on the target. Import never extracts to the file system directly: each member is
read into memory, checked against the manifest and its own header, then installed atomically.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .._version import __version__
from ..errors import CuopjitError
from . import entry, fsio
from .entry import FORMAT_VERSION, EntryError
from .layer import Layer, UntrustedError, record_file_name

BUNDLE_FORMAT = "cuopjit-bundle-1"
_ENTRY_FILE = re.compile(r"[A-Za-z0-9_.+-]{1,128}-[0-9a-f]{16}\.cubin")


class BundleError(CuopjitError):
    """A bundle that cannot be read (missing or malformed manifest) or installed (no writable cache)."""


@dataclass
class BundleResult:
    """What an export or import did."""
    entries: int = 0
    records: int = 0
    skipped: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)


def export_bundle(layers: list[Layer], path: str | os.PathLike) -> BundleResult:
    """Write every valid entry and record of `layers` (first layer wins on duplicates) to a bundle at `path`."""
    result = BundleResult()
    members: dict[str, bytes] = {}
    manifest: dict = {"format": BUNDLE_FORMAT, "cache_format": FORMAT_VERSION, "cuopjit_version": __version__,
                      "created": time.time(), "entries": [], "records": []}
    for layer in layers:
        for f in sorted(layer.scan(), key=lambda f: f.path.name):
            name = f"kernels/{f.path.name}"
            if name in members:
                continue
            try:
                got = layer.read_entry(f.path)
            except (EntryError, UntrustedError, OSError) as exc:
                result.bad.append((str(f.path), str(exc)))
                continue
            if got is None:
                continue
            data, found = got
            members[name] = data
            manifest["entries"].append({"file": f.path.name, "key": found.key, "name": found.name,
                                        "arch": found.arch, "sha256": hashlib.sha256(data).hexdigest()})
            result.entries += 1
        for kind, p in layer.record_files():
            name = f"records/{kind}/{p.name}"
            if name in members:
                continue
            try:
                got = layer.read(p)
            except (UntrustedError, OSError) as exc:
                result.bad.append((str(p), str(exc)))
                continue
            if got is not None:
                members[name] = got[0]
                manifest["records"].append({"kind": kind, "file": p.name, "sha256": hashlib.sha256(got[0]).hexdigest()})
                result.records += 1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in [("manifest.json", json.dumps(manifest, indent=1).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(manifest["created"])
            tar.addfile(info, io.BytesIO(data))
    target = Path(path)
    fsio.atomic_write(target, buf.getvalue())
    return result


def import_bundle(layer: Layer, path: str | os.PathLike) -> BundleResult:
    """Verify each entry of the bundle at `path` and install it atomically into the writable `layer`."""
    result = BundleResult()
    try:
        tar = tarfile.open(path, mode="r:*")
    except (OSError, tarfile.TarError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a tar archive"
        raise BundleError(f"{path} is not a readable cuopjit bundle ({why}); "
                          "make one with `cuopjit cache export`") from None
    with tar:
        manifest = _manifest(tar, path)
        for item in manifest["entries"]:
            file = str(item.get("file", ""))
            if not _ENTRY_FILE.fullmatch(file):
                result.bad.append((file, "not an entry file name"))
                continue
            if (data := _member(tar, f"kernels/{file}", item, result)) is None:
                continue
            try:
                found = entry.decode(data)
                if found.file_name != file:
                    raise EntryError("name", f"member holds {found.file_name}")
            except EntryError as exc:
                result.bad.append((file, str(exc)))
                continue
            existing = layer.kernels / file
            if existing.exists() and _valid(existing):
                result.skipped += 1
                continue
            layer.store(file, data)
            result.entries += 1
        for item in manifest["records"]:
            kind, file = str(item.get("kind", "")), str(item.get("file", ""))
            try:
                ok_name = file.endswith(".json") and record_file_name(kind, file[:-5]) == file
            except ValueError:
                ok_name = False
            if not ok_name:
                result.bad.append((f"{kind}/{file}", "not a record file name"))
                continue
            if (data := _member(tar, f"records/{kind}/{file}", item, result)) is None:
                continue
            layer.ensure_dirs()
            fsio.make_private_dirs(layer.records / kind)
            fsio.atomic_write(layer.records / kind / file, data)
            result.records += 1
    return result


def _manifest(tar: tarfile.TarFile, path: str | os.PathLike) -> dict:
    try:
        member = tar.extractfile("manifest.json")
        manifest = json.loads(member.read()) if member else None
    except (KeyError, ValueError, tarfile.TarError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path} has no valid manifest.json of format {BUNDLE_FORMAT}; "
                          "make bundles with `cuopjit cache export` from this cuopjit version")
    manifest.setdefault("entries", [])
    manifest.setdefault("records", [])
    return manifest


def _member(tar: tarfile.TarFile, name: str, item: dict, result: BundleResult) -> bytes | None:
    """A regular member's bytes if they match the manifest's sha256; else None with the reason in result.bad."""
    try:
        info = tar.getmember(name)
        data = tar.extractfile(info).read() if info.isfile() else None
    except (KeyError, tarfile.TarError, OSError) as exc:
        result.bad.append((name, f"missing or unreadable member ({exc})"))
        return None
    if data is None or hashlib.sha256(data).hexdigest() != item.get("sha256"):
        result.bad.append((name, "sha256 differs from the manifest"))
        return None
    return data


def _valid(path: Path) -> bool:
    got = fsio.read_bytes(path)
    try:
        return got is not None and entry.decode(got[0]).file_name == path.name
    except EntryError:
        return False
