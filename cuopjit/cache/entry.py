"""One cache entry = one file: a small JSON header (key parts, checksum) followed by the cubin.

Layout: MAGIC (8 bytes) | format version (u32 LE) | header length (u32 LE) | sha256 of the header (32 bytes)
| header JSON | payload. The header holds the payload's sha256, so every bit of the file is covered.
Keeping the metadata and the cubin in one file means they can never be mixed up; the header
alone is enough to recompute the key, so `verify` needs no template or source.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

from .._version import __version__

FORMAT_VERSION = 1
MAGIC = b"CUOPJITC"
SUFFIX = ".cubin"
_PREFIX = struct.Struct("<8sII32s")
_MAX_HEADER = 1 << 20
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


class EntryError(Exception):
    """An entry file failed verification; `reason` is a short tag (truncated, checksum, key, arch, ...)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def compute_key(source_sha256: str, options: tuple[str, ...], arch: str, nvrtc_version: str) -> str:
    """sha256 hex over (FORMAT_VERSION, source, options, arch, NVRTC version): the whole cache key."""
    parts = json.dumps([FORMAT_VERSION, source_sha256, list(options), arch, nvrtc_version], separators=(",", ":"))
    return hashlib.sha256(parts.encode()).hexdigest()


@dataclass(frozen=True)
class EntrySpec:
    """Everything that identifies one compiled kernel; `key` decides identity, the rest is for people."""
    name: str
    source: str
    options: tuple[str, ...]
    arch: str
    nvrtc_version: str
    template: str
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not _SAFE_NAME.fullmatch(self.name):
            raise ValueError(f"EntrySpec name {self.name!r} is not allowed: use 1-128 of A-Z a-z 0-9 _ . + -")
        if not re.fullmatch(r"sm_\d{2,3}a?", self.arch):
            raise ValueError(f"EntrySpec arch {self.arch!r} is not allowed: write e.g. sm_80, sm_90 or sm_90a")
        object.__setattr__(self, "options", tuple(self.options))
        object.__setattr__(self, "params", tuple(sorted((str(k), str(v)) for k, v in self.params)))

    @functools.cached_property
    def source_sha256(self) -> str:
        """sha256 of the rendered source; stored in the header so the key can be recomputed."""
        return hashlib.sha256(self.source.encode()).hexdigest()

    @functools.cached_property
    def key(self) -> str:
        """The cache key (64 hex digits)."""
        return compute_key(self.source_sha256, self.options, self.arch, self.nvrtc_version)

    @property
    def file_name(self) -> str:
        """`gemm_f32_t128x128_sm90-0123456789abcdef.cubin`: readable, and unique by key prefix."""
        return f"{self.name}-{self.key[:16]}{SUFFIX}"


@dataclass(frozen=True)
class Entry:
    """A decoded, self-consistent entry: the header's fields and the cubin."""
    header: dict[str, Any]
    payload: bytes

    @property
    def key(self) -> str:
        return self.header["key"]

    @property
    def name(self) -> str:
        return self.header["name"]

    @property
    def arch(self) -> str:
        return self.header["arch"]

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.key[:16]}{SUFFIX}"


def encode(spec: EntrySpec, payload: bytes, created: float = 0.0) -> bytes:
    """Header + payload bytes for `spec`, ready for an atomic write."""
    header = {
        "key": spec.key, "name": spec.name, "template": spec.template, "params": [list(p) for p in spec.params],
        "options": list(spec.options), "arch": spec.arch, "nvrtc_version": spec.nvrtc_version,
        "source_sha256": spec.source_sha256, "cuopjit_version": __version__, "created": created,
        "payload_size": len(payload), "payload_sha256": hashlib.sha256(payload).hexdigest(),
    }
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(raw), hashlib.sha256(raw).digest()) + raw + payload


def decode(data: bytes) -> Entry:
    """Parse and self-check an entry (magic, format, length, checksum, key); EntryError says what is wrong."""
    if len(data) < _PREFIX.size:
        raise EntryError("truncated", f"{len(data)} bytes is shorter than the {_PREFIX.size}-byte prefix")
    magic, version, size, digest = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise EntryError("format", "not a cuopjit cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise EntryError("format", f"format version {version}, this cuopjit reads {FORMAT_VERSION}")
    if size > _MAX_HEADER or _PREFIX.size + size > len(data):
        raise EntryError("truncated", f"header of {size} bytes does not fit in {len(data)} bytes")
    raw = data[_PREFIX.size:_PREFIX.size + size]
    if hashlib.sha256(raw).digest() != digest:
        raise EntryError("checksum", "header sha256 does not match")
    try:
        header = json.loads(raw)
        payload = data[_PREFIX.size + size:]
        if len(payload) != header["payload_size"]:
            raise EntryError("truncated", f"payload is {len(payload)} bytes, header says {header['payload_size']}")
        if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
            raise EntryError("checksum", "payload sha256 does not match the header")
        recomputed = compute_key(header["source_sha256"], tuple(header["options"]), header["arch"],
                                 header["nvrtc_version"])
        if recomputed != header["key"] or not _SAFE_NAME.fullmatch(header["name"]):
            raise EntryError("key", "header key does not match its own parts")
    except (ValueError, KeyError, TypeError) as exc:
        raise EntryError("format", f"unreadable header ({exc})") from None
    return Entry(header, payload)


def peek_header(path: str) -> dict[str, Any]:
    """Just the header of an entry file (for listings); EntryError if it is not a readable entry."""
    with open(path, "rb") as f:
        prefix = f.read(_PREFIX.size)
        if len(prefix) < _PREFIX.size:
            raise EntryError("truncated", f"{len(prefix)} bytes is shorter than the {_PREFIX.size}-byte prefix")
        magic, version, size, _ = _PREFIX.unpack(prefix)
        if magic != MAGIC or version != FORMAT_VERSION or size > _MAX_HEADER:
            raise EntryError("format", "not a cuopjit cache entry of this format version")
        try:
            header = json.loads(f.read(size))
            header["name"], header["key"], header["arch"]
        except (ValueError, KeyError, TypeError) as exc:
            raise EntryError("format", f"unreadable header ({exc})") from None
    return header


def check_matches(entry: Entry, spec: EntrySpec) -> None:
    """Raise EntryError unless `entry` is the one `spec` asks for (key, arch, NVRTC version, options)."""
    if entry.arch != spec.arch:
        raise EntryError("arch", f"entry is for {entry.arch}, wanted {spec.arch}")
    if entry.key != spec.key:
        raise EntryError("key", f"entry has key {entry.key[:16]}…, wanted {spec.key[:16]}…")
    if entry.header["nvrtc_version"] != spec.nvrtc_version or tuple(entry.header["options"]) != spec.options:
        raise EntryError("key", "entry's NVRTC version or options differ from the request")
