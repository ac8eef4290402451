"""Run a scenario as an unprivileged user, so permission cases execute for real even when tests run as root.

Root ignores file permissions, and CI runs as root. `Runner.run(code)` starts a Python child that
imports cuopjit and warms everything a scenario may load lazily (stdlib codecs, Jinja, NVRTC and its
builtins) while it is still root, then drops to uid/gid 65534 (nobody) and runs `code`. cuopjit is
imported from a world-readable copy of the package, because the checkout and the virtual
environment may live where nobody cannot read (e.g. under /root). Run by another user, the child
keeps that user and the scenarios deny access with chmod, which binds every user but root.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

IS_ROOT = os.getuid() == 0
NOBODY = 65534
RUNNER_UID = NOBODY if IS_ROOT else os.getuid()

_PRELUDE = """
import os, sys
sys.path.insert(0, {package_parent!r})
import argparse, concurrent.futures, encodings.idna, encodings.unicode_escape, gzip, importlib.metadata, json
import logging, platform, signal, tarfile, zlib
import platformdirs
import cuopjit, cuopjit.cli, cuopjit.cli.cache, cuopjit.build.pipeline, cuopjit.cli.info
import cache_fakes
from cuopjit.build import compiler, pipeline
from cuopjit.prewarm import representative_plans
assert cuopjit.__file__.startswith({package_parent!r}), cuopjit.__file__
compiler.supported_archs()
pipeline.build(representative_plans(["relu"], ["float32"])[0].plan.specs[0], "sm_80", persistent=False)  # loads NVRTC and its builtins
if os.getuid() == 0:
    os.setgroups([])
    os.setgid({uid})
    os.setuid({uid})
"""


def _world_readable_copy(destination: Path) -> Path:
    """Copy the cuopjit package (templates included) and cache_fakes under `destination`, readable by all."""
    import cuopjit
    from cuopjit.build import codegen
    package = destination / "cuopjit"
    shutil.copytree(Path(cuopjit.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    if not (package / "templates").is_dir():
        shutil.copytree(codegen.templates_dir(), package / "templates")
    shutil.copy(Path(__file__).with_name("cache_fakes.py"), destination)
    for path in [destination, *destination.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return destination


class Runner:
    """Runs scenario code as RUNNER_UID in directories that user can reach."""

    def __init__(self, root: Path):
        self.root = root
        self.package_parent = _world_readable_copy(root / "site")

    def scratch(self) -> Path:
        """A fresh directory, owned by the scenario user, inside a directory everybody may enter."""
        path = Path(tempfile.mkdtemp(dir=self.root))
        path.chmod(0o755)
        self.give(path)
        return path

    def give(self, path: Path, mode: int | None = None) -> None:
        """Hand `path` and everything under it to the scenario user; directories get `mode` if given."""
        for p in [path, *path.rglob("*")]:
            if IS_ROOT:
                os.chown(p, RUNNER_UID, RUNNER_UID)
            if mode is not None and p.is_dir():
                p.chmod(mode)

    @staticmethod
    def deny(path: Path, owner: int = 0, mode: int = 0o700) -> None:
        """Make the directory `path` unusable by the scenario user (as root: `owner` and `mode`; else mode 000)."""
        if IS_ROOT:
            os.chown(path, owner, owner)
            path.chmod(mode)
        else:
            path.chmod(0)

    def run(self, code: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """Run `code` (Python source) as the scenario user; the child sees `env` on top of PATH only."""
        prelude = _PRELUDE.format(package_parent=str(self.package_parent), uid=RUNNER_UID)
        child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1",
                     "HOME": str(self.root), **(env or {})}
        return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                              text=True, env=child_env, cwd=cwd or self.root, timeout=timeout)

    def cli(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`cuopjit *argv` as the scenario user."""
        return self.run(f"sys.exit(cuopjit.cli.main({list(argv)!r}))", env=env)

    def cleanup(self) -> None:
        """Remove everything, first giving the owner back the permissions scenarios took away."""
        def unlock(path: Path) -> None:
            with contextlib.suppress(OSError):
                path.chmod(stat.S_IRWXU)
                for child in path.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        unlock(child)
        unlock(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def make_runner() -> Runner:
    """A Runner in a new directory under the system temp dir (pytest's tmp_path is private to its user)."""
    root = Path(tempfile.mkdtemp(prefix="cuopjit-unprivileged-"))
    root.chmod(0o755)
    return Runner(root)


def one_warning(stderr: str, *fragments: str) -> str:
    """The only line of `stderr`, a cuopjit warning that contains every fragment."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cuopjit WARNING: cache: "), stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]
