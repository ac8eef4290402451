"""The 'cuopjit' logger, configured from CUOPJIT_LOG on first use (never at import)."""
from __future__ import annotations

import functools
import logging

from .config import environment


@functools.cache
def logger() -> logging.Logger:
    """The package logger; CUOPJIT_LOG=debug shows every cache hit, miss, compile and rejection."""
    env = environment()
    log = logging.getLogger("cuopjit")
    log.setLevel(env.log.upper())
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("cuopjit %(levelname)s: %(message)s"))
        log.addHandler(handler)
    if problem := env.problem("CUOPJIT_LOG"):
        _warned.add("env:CUOPJIT_LOG")
        log.warning("%s; it is ignored (warnings and errors are logged)", problem)
    return log


def warn_environment() -> None:
    """Warn once about each CUOPJIT_* variable whose value is not understood (where it is used, it raises)."""
    logger()
    for name, problem in environment().problems:
        warn_once(f"env:{name}", f"{problem}; it is ignored")


def warn_once(key: str, message: str) -> None:
    """Log a warning the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        logger().warning(message)


_warned: set[str] = set()
