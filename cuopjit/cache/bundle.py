"""Portable bundles: a gzipped tar of entry files and records plus manifest.json with their sha256.

`export_bundle` on a GPU-less build machine, `import_bundle` (or CUOPJIT_CACHE_READONLY on an
unpacked copy) on the target. Import never extracts to the file system directly: it streams the
archive (manifest.json first), refuses a member whose declared size is over MAX_MEMBER before
reading it, checks each member against the manifest and its own header, then installs it
atomically. Anything malformed ends in one BundleError: "<path> is not a readable cuopjit bundle (why)".
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterator

from .._version import __version__
from ..errors import CuopjitError, format_bytes
from . import entry, fsio
from .entry import FORMAT_VERSION, EntryError
from .layer import Layer, UntrustedError, record_file_name

BUNDLE_FORMAT = "cuopjit-bundle-1"
_ENTRY_FILE = re.compile(r"[A-Za-z0-9_.+-]{1,128}-[0-9a-f]{16}\.cubin")
MAX_MEMBER = 64 << 20    # far above any cubin or record; a larger member is refused before it is read
MAX_MANIFEST = 16 << 20
_READ_ERRORS = (OSError, EOFError, zlib.error, tarfile.TarError)


class BundleError(CuopjitError):
    """A bundle that cannot be read (missing or malformed manifest) or installed (no writable cache)."""


@dataclass
class BundleResult:
    """What an export or import did."""
    entries: int = 0
    records: int = 0
    skipped: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)


def check_output(path: str | os.PathLike) -> None:
    """Raise BundleError unless a bundle can be written at `path`: a file name in an existing, writable directory."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        raise BundleError(f"cannot write the bundle {path}: it is a directory; name a file such as kernels.tar.gz")
    if not parent.is_dir():
        raise BundleError(f"cannot write the bundle {path}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BundleError(f"cannot write the bundle {path}: the directory {parent} is not writable; "
                          "choose another place")


def export_bundle(layers: list[Layer], path: str | os.PathLike, keys: Collection[str] | None = None) -> BundleResult:
    """Write the valid entries and records of `layers` (first layer wins on duplicates) to a bundle at `path`.

    With `keys`, only the entries with those cache keys, and no records.
    """
    check_output(path)
    result = BundleResult()
    members: dict[str, bytes] = {}
    manifest: dict = {"format": BUNDLE_FORMAT, "cache_format": FORMAT_VERSION, "cuopjit_version": __version__,
                      "created": time.time(), "entries": [], "records": []}
    wanted = None if keys is None else {k[:16] for k in keys}
    for layer in layers:
        for f in sorted(layer.scan(), key=lambda f: f.path.name):
            name = f"kernels/{f.path.name}"
            if name in members or (wanted is not None and f.path.name[-22:-6] not in wanted):
                continue
            try:
                got = layer.read_entry(f.path)
            except (EntryError, UntrustedError, OSError) as exc:
                result.bad.append((str(f.path), str(exc)))
                continue
            if got is None or (keys is not None and got[1].key not in keys):
                continue
            data, found = got
            members[name] = data
            manifest["entries"].append({"file": f.path.name, "key": found.key, "name": found.name,
                                        "arch": found.arch, "sha256": hashlib.sha256(data).hexdigest()})
            result.entries += 1
        for kind, p in layer.record_files() if keys is None else ():
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
    try:
        fsio.atomic_write(Path(path), buf.getvalue())
    except OSError as exc:
        raise BundleError(f"cannot write the bundle {path} ({exc.strerror or exc})") from None
    return result


def import_bundle(layer: Layer, path: str | os.PathLike) -> BundleResult:
    """Verify each entry of the bundle at `path` and install it atomically into the writable `layer`."""
    result = BundleResult()
    members = _stream(path)
    try:
        first = next(members, None)
        if first is None or first[0] != "manifest.json":
            raise _unreadable(path, f"it does not start with a manifest.json of format {BUNDLE_FORMAT}")
        pending = _manifest(first[1], path, result)
        for name, data in members:
            if (item := pending.pop(name, None)) is not None:
                _install(layer, name, item, data, result)
    finally:
        members.close()
    result.bad.extend((name, "missing from the bundle, or not a regular file") for name in pending)
    return result


def _unreadable(path: str | os.PathLike, why: str) -> BundleError:
    return BundleError(f"{path} is not a readable cuopjit bundle ({why}); make one with `cuopjit cache export`")


def _stream(path: str | os.PathLike) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each regular member in archive order; each is read only after its declared size passed."""
    try:
        tar = tarfile.open(path, mode="r|*")
    except _READ_ERRORS as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a tar archive"
        raise _unreadable(path, why) from None
    with tar:
        members = iter(tar)
        while True:
            try:
                info = next(members, None)
                if info is None:
                    return
                if not info.isfile():
                    continue
                limit = MAX_MANIFEST if info.name == "manifest.json" else MAX_MEMBER
                if info.size > limit:
                    raise _unreadable(path, f"member {info.name} holds {format_bytes(info.size)}, over the "
                                            f"{format_bytes(limit)} a member may hold")
                data = tar.extractfile(info).read()
            except _READ_ERRORS as exc:
                raise _unreadable(path, f"truncated or corrupt: {str(exc) or type(exc).__name__}") from None
            yield info.name, data


def _manifest(data: bytes, path: str | os.PathLike, result: BundleResult) -> dict[str, dict]:
    """The manifest's valid items by member name; items with unsafe names go to result.bad."""
    try:
        manifest = json.loads(data)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise _unreadable(path, f"manifest.json is not of format {BUNDLE_FORMAT}")
    pending: dict[str, dict] = {}
    for part in ("entries", "records"):
        items = manifest.get(part, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise _unreadable(path, f"manifest.json: {part!r} must be a list of objects, not {json.dumps(items)[:40]}")
        for item in items:
            kind, file, sha = (str(item.get(k, "")) for k in ("kind", "file", "sha256"))
            if part == "entries":
                if _ENTRY_FILE.fullmatch(file):
                    pending[f"kernels/{file}"] = {"file": file, "sha256": sha}
                else:
                    result.bad.append((file, "not an entry file name"))
            elif _record_name_ok(kind, file):
                pending[f"records/{kind}/{file}"] = {"kind": kind, "file": file, "sha256": sha}
            else:
                result.bad.append((f"{kind}/{file}", "not a record file name"))
    return pending


def _record_name_ok(kind: str, file: str) -> bool:
    try:
        return file.endswith(".json") and record_file_name(kind, file[:-5]) == file
    except ValueError:
        return False


def _install(layer: Layer, name: str, item: dict, data: bytes, result: BundleResult) -> None:
    """Install one member that the manifest lists, if it matches its sha256 (and, for an entry, its own header)."""
    if hashlib.sha256(data).hexdigest() != item["sha256"]:
        result.bad.append((name, "sha256 differs from the manifest"))
        return
    if "kind" in item:
        layer.ensure_dirs()
        fsio.make_private_dirs(layer.records / item["kind"])
        fsio.atomic_write(layer.records / item["kind"] / item["file"], data)
        result.records += 1
        return
    file = item["file"]
    try:
        found = entry.decode(data)
        if found.file_name != file:
            raise EntryError("name", f"member holds {found.file_name}")
    except EntryError as exc:
        result.bad.append((file, str(exc)))
        return
    existing = layer.kernels / file
    if existing.exists() and _valid(existing):
        result.skipped += 1
        return
    layer.store(file, data)
    result.entries += 1


def _valid(path: Path) -> bool:
    got = fsio.read_bytes(path)
    try:
        return got is not None and entry.decode(got[0]).file_name == path.name
    except EntryError:
        return False
