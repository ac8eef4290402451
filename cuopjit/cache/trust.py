"""Cubins are code: refuse files and directories that another user could have written.

Trusted means: owned by the current user or root, and not writable by group or others.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def untrusted_reason(path: Path, st: os.stat_result) -> str | None:
    """None when `path` (with stat `st`) is safe to load from; else a sentence that says how to fix it."""
    me = os.getuid()
    if st.st_uid not in (me, 0):
        return (f"{path} is owned by uid {st.st_uid}, not by you (uid {me}) or root, so cuopjit will not load it; "
                f"if you trust it run: chown {me} {path}, else delete it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}), so cuopjit will not "
                f"load it; fix it with: chmod go-w {path}")
    return None


def check_path(path: Path) -> str | None:
    """`untrusted_reason` for a path on disk; a missing path is trusted (there is nothing to load)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return untrusted_reason(path, st)
