"""The environment: the only module of cuopjit that reads os.environ (CUOPJIT_* variables), typed and checked."""
from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Iterator

from .jit import LOG_LEVELS
from .values import parse_size, split_list

@dataclass(frozen=True)
class Environment:
    """Every CUOPJIT_* variable, typed. Read on each call to `environment()` so tests can scope them.

    A value that is not understood leaves its field at the default and is listed in `problems`;
    whatever needs that value calls `require`, so commands that do not (`info`, `cache ls`) still run.
    """
    cache_dir: str | None
    cache_readonly: tuple[str, ...]
    max_cache_size: int | None
    log: str
    debug: bool
    arch: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()
    problems: tuple[tuple[str, str], ...] = ()

    def problem(self, variable: str) -> str | None:
        """Why `variable`'s value is not understood, or None."""
        return dict(self.problems).get(variable)

    def require(self, *variables: str) -> None:
        """Raise ValueError (saying what to write) for the first of `variables` whose value is not understood."""
        for variable in variables:
            if problem := self.problem(variable):
                raise ValueError(problem)


def _env_bool(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}={raw!r} is not understood: use 1/0, true/false, yes/no or on/off")


def environment() -> Environment:
    """Read the CUOPJIT_* variables now; bad values are kept in `problems`, named with what to write instead."""
    problems: dict[str, str] = {}
    log = os.environ.get("CUOPJIT_LOG", "warning").strip().lower() or "warning"
    if log not in LOG_LEVELS:
        problems["CUOPJIT_LOG"] = f"CUOPJIT_LOG={log!r} is not understood: use one of {', '.join(LOG_LEVELS)}"
        log = "warning"
    size, max_size = os.environ.get("CUOPJIT_MAX_CACHE_SIZE"), None
    try:
        max_size = parse_size(size) if size else None
    except ValueError as exc:
        problems["CUOPJIT_MAX_CACHE_SIZE"] = f"CUOPJIT_MAX_CACHE_SIZE: {exc}"
    raw_arch = os.environ.get("CUOPJIT_ARCH", "")
    arch = tuple(split_list(raw_arch))
    if not all(re.fullmatch(r"sm_\d{2,3}a?", a) for a in arch):
        problems["CUOPJIT_ARCH"] = (f"CUOPJIT_ARCH={raw_arch!r} is not understood: write one architecture or a comma "
                                    "list, e.g. sm_80 or sm_80,sm_90")
        arch = ()
    debug = False
    try:
        debug = _env_bool("CUOPJIT_DEBUG")
    except ValueError as exc:
        problems["CUOPJIT_DEBUG"] = str(exc)
    ro = os.environ.get("CUOPJIT_CACHE_READONLY", "")
    return Environment(
        cache_dir=os.environ.get("CUOPJIT_CACHE_DIR") or None,
        cache_readonly=tuple(p for p in ro.split(os.pathsep) if p),
        max_cache_size=max_size,
        log=log,
        debug=debug,
        arch=arch,
        variables=tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CUOPJIT_"))),
        problems=tuple(problems.items()),
    )


@contextlib.contextmanager
def scoped_env(**values: str | None) -> Iterator[None]:
    """Set (or with None, unset) CUOPJIT_<NAME> variables for the duration of a block; tests use it."""
    saved = {}
    for key, value in values.items():
        var = "CUOPJIT_" + key.upper()
        saved[var] = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    try:
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old
