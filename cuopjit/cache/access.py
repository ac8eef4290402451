"""Whether a cache directory can be used at all: reachable, a directory, readable, writable.

Each check returns None or one sentence naming the directory and what is wrong with it, so a
cache can fall back to memory (or skip a read-only layer) and say why, instead of raising the
errno of whichever file operation happened to run first.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

FIX = ("fix its permissions (chown/chmod) or free space, or set CUOPJIT_CACHE_DIR (or pass --cache-dir) to a "
       "directory you can write")
FILE_FIX = ("point CUOPJIT_CACHE_DIR (or --cache-dir) at a directory, not a file (or move the file out of the "
            "way)")
_IS_A_FILE = " is a file"   # every problem below where a file stands in the cache directory's path says this


def advice(problem: str | None) -> str:
    """What to do about `problem` (one of the sentences below): FILE_FIX when a file stands where the cache
    directory should be, FIX (permissions, space, another directory) otherwise."""
    return FILE_FIX if problem and _IS_A_FILE in problem else FIX


def _stat(path: Path) -> tuple[os.stat_result | None, str | None]:
    """(stat, None), (None, None) when missing, or (None, why it cannot be reached)."""
    try:
        return os.stat(path), None
    except FileNotFoundError:
        return None, None
    except NotADirectoryError:
        return None, f"{path} cannot be a directory: {_file_above(path)} is a file"
    except OSError as exc:
        return None, f"cannot reach {path} ({exc.strerror or exc})"


def _file_above(path: Path) -> Path:
    """The first ancestor of `path` that exists but is not a directory (or `path`'s parent)."""
    for parent in reversed(path.parents):
        try:
            if not stat.S_ISDIR(os.stat(parent).st_mode):
                return parent
        except OSError:
            break
    return path.parent


def read_problem(root: Path, subdirs: tuple[Path, ...] = (), must_exist: bool = False) -> str | None:
    """Why `root` (and those of `subdirs` that exist) cannot be read as a cache directory, or None.

    A missing `root` is fine (it is created on the first write) unless `must_exist`.
    """
    for i, path in enumerate((root, *subdirs)):
        st, problem = _stat(path)
        if problem:
            return problem
        if st is None:
            if i == 0:
                return f"{root} does not exist" if must_exist else None
            continue
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is a file, not a directory"
        if not os.access(path, os.R_OK | os.X_OK):
            return f"cannot read {path} (permission denied)"
    return None


def _not_writable(path: Path) -> str | None:
    """Why the directory `path` does not take new files, or None."""
    if os.access(path, os.W_OK | os.X_OK):
        return None
    try:
        readonly_mount = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        readonly_mount = False
    return "read-only file system" if readonly_mount else "permission denied"


def write_problem(root: Path, subdirs: tuple[Path, ...] = ()) -> str | None:
    """Why entries cannot be written under `root`, or None.

    An existing `root` and its existing `subdirs` must be writable; a missing `root` needs its
    nearest existing ancestor to be a writable directory.
    """
    if problem := read_problem(root, subdirs):
        return problem
    if _stat(root)[0] is None:
        ancestor = root.parent
        while True:
            st, problem = _stat(ancestor)
            if problem:
                return problem
            if st is not None:
                break
            ancestor = ancestor.parent
        if not stat.S_ISDIR(st.st_mode):
            return f"{root} cannot be created: {ancestor} is a file"
        why = _not_writable(ancestor)
        return f"{root} cannot be created: {ancestor} is not writable ({why})" if why else None
    for path in (root, *subdirs):
        if _stat(path)[0] is not None and (why := _not_writable(path)):
            return f"{path} is not writable ({why})"
    return None
