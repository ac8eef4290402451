"""The `cuopjit` command: `main` parses the arguments and dispatches to one module per command group."""
from __future__ import annotations

from .main import main

__all__ = ["main"]
