"""Operator families. FAMILIES maps a family name (as the CLI spells it) to its Float and Double classes."""
from __future__ import annotations

from .base import Operator
from .gemm import GemmDouble, GemmFloat

FAMILIES: dict[str, tuple[type[Operator], type[Operator]]] = {
    "gemm": (GemmFloat, GemmDouble),
}

__all__ = ["FAMILIES", "Operator", "GemmFloat", "GemmDouble"]
