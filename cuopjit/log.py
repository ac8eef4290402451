"""The 'cuopjit' logger, configured from CUOPJIT_LOG on first use (never at import)."""
from __future__ import annotations

import functools
import logging

from .config import environment


@functools.cache
def logger() -> logging.Logger:
    """The package logger; CUOPJIT_LOG=debug shows every cache hit, miss, compile and rejection."""
    log = logging.getLogger("cuopjit")
    log.setLevel(environment().log.upper())
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("cuopjit %(levelname)s: %(message)s"))
        log.addHandler(handler)
    return log


def warn_once(key: str, message: str) -> None:
    """Log a warning the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        logger().warning(message)


_warned: set[str] = set()
