"""The named JIT wrappers of the cuOP API, one line each: which operator class each one wraps."""
from __future__ import annotations

from .jit import JITWrapper
from .ops import GemmDouble, GemmFloat


class JITGemmFloat(JITWrapper):
    operator_type = GemmFloat


class JITGemmDouble(JITWrapper):
    operator_type = GemmDouble
