"""File primitives the cache is built on: private directories, atomic writes, per-key flock locks.

Atomic write = temp file in the target's directory + fsync + os.replace, so a reader (or a
process killed mid-write) only ever sees no file or a whole file. Locks use fcntl.flock, which
the kernel drops when the holder dies, so a crashed compiler never blocks anyone for long.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import time
from pathlib import Path
from typing import Iterator

TMP_MARK = ".tmp."
# A store failing with one of these means "this layer cannot take writes": fall back to memory.
NOT_WRITABLE = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT})


def make_private_dirs(path: Path) -> None:
    """Create `path` and any missing parents with mode 0o700 (the umask can only remove bits)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)


def tmp_path(path: Path) -> Path:
    """A unique temp name beside `path`, tagged so orphans are recognisable: `.<name>.tmp.<pid>.<rand>`."""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}.{secrets.token_hex(4)}")


def is_tmp_of(name: str, target_name: str) -> bool:
    """True when `name` is a temp file made by `tmp_path` for `target_name`."""
    return name.startswith(f".{target_name}{TMP_MARK}")


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` so that any reader sees either the old file, no file, or all of `data`."""
    tmp = tmp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_bytes(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The whole file and its fstat, or None when it does not exist (unlink/replace-safe)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, max(st.st_size, 1 << 16)):
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def remove_orphan_tmps(directory: Path, target_name: str | None = None) -> int:
    """Delete temp files left by killed writers (for one target, or all); safe only under that target's lock
    or when no writer runs. Returns how many were removed."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(directory):
            if TMP_MARK in e.name and (target_name is None or is_tmp_of(e.name, target_name)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
                    removed += 1
    return removed


def writer_alive(tmp_name: str) -> bool:
    """Whether the process that made temp file `tmp_name` still runs (pid from the name; unknown = alive)."""
    try:
        pid = int(tmp_name.rsplit(TMP_MARK, 1)[1].split(".")[0])
        os.kill(pid, 0)
    except (IndexError, ValueError, PermissionError):
        return True
    except ProcessLookupError:
        return False
    return True


class LockTimeout(Exception):
    """The lock was still held after the timeout."""


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, poll: float = 0.002) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if needed); LockTimeout after `timeout` seconds.

    After locking we check that `path` still names the locked inode: lock files may be deleted by
    `clear`/`prune`, and holding a lock on a deleted file would not exclude anyone.
    """
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(f"{path} still locked after {timeout:.0f} s") from None
                    time.sleep(poll)
                    poll = min(poll * 1.5, 0.05)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield
                return
        finally:
            os.close(fd)


def try_lock_and_unlink(path: Path) -> bool:
    """Delete a lock file only if nobody holds it; True when it was removed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
        return True
    except (BlockingIOError, FileNotFoundError):
        return False
    finally:
        os.close(fd)
