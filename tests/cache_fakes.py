"""Fakes shared by the cache tests: deterministic specs and builds that record each compile in a file."""
from __future__ import annotations

import collections
import errno
import hashlib
import os
import time
from pathlib import Path
from typing import Callable

from cuopjit.cache import EntrySpec

TINY_KERNEL = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'


def make_spec(i: int, arch: str = "sm_90") -> EntrySpec:
    """The i-th fake kernel for `arch`; different i or arch give different keys."""
    return EntrySpec(name=f"fake_k{i}_{arch.replace('_', '')}", source=f"// fake kernel {i}\n",
                     options=(f"--gpu-architecture={arch}",), arch=arch, nvrtc_version="13.5",
                     template="fake.cu.jinja", params=(("i", str(i)),))


def fake_cubin(spec: EntrySpec, size: int = 4096) -> bytes:
    """Deterministic bytes for a spec: what a single-process compile would produce."""
    seed = hashlib.sha256(spec.key.encode()).digest()
    return (b"\x7fELF" + seed * (size // 32 + 1))[:size]


def counting_build(spec: EntrySpec, log: Path, delay: float = 0.0, size: int = 4096) -> Callable[[], bytes]:
    """A build() that appends the key to `log` (one O_APPEND write, safe across processes), sleeps, returns bytes."""
    def build() -> bytes:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (spec.key + "\n").encode())
        finally:
            os.close(fd)
        time.sleep(delay)
        return fake_cubin(spec, size)
    return build


def build_counts(log: Path) -> collections.Counter:
    """How often each key was built, from a counting_build log."""
    return collections.Counter(log.read_text().split()) if log.exists() else collections.Counter()


def temp_files(root: Path) -> list[Path]:
    """Temp files left anywhere under a cache directory."""
    return [p for p in root.rglob("*") if ".tmp." in p.name]


def fill_disk(monkeypatch) -> None:
    """Make every os.write of over 1000 bytes (an entry, not a stats record) fail with ENOSPC, as a full disk does."""
    real_write = os.write

    def full(fd, data):
        if len(data) > 1000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)
    monkeypatch.setattr(os, "write", full)
