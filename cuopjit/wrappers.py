"""The named JIT wrappers of the cuOP API, one line each: which operator class each one wraps."""
from __future__ import annotations

from .jit import JITWrapper
from .ops import GemmDouble, GemmFloat
from .ops import ReluDouble, ReluFloat
from .ops import (BatchNormDouble, BatchNormFloat, LayerNormDouble, LayerNormFloat, SoftmaxDouble,
                  SoftmaxFloat)


class JITGemmFloat(JITWrapper):
    operator_type = GemmFloat


class JITGemmDouble(JITWrapper):
    operator_type = GemmDouble


class JITReluFloat(JITWrapper):
    operator_type = ReluFloat


class JITReluDouble(JITWrapper):
    operator_type = ReluDouble


class JITSoftmaxFloat(JITWrapper):
    operator_type = SoftmaxFloat


class JITSoftmaxDouble(JITWrapper):
    operator_type = SoftmaxDouble


class JITLayerNormFloat(JITWrapper):
    operator_type = LayerNormFloat


class JITLayerNormDouble(JITWrapper):
    operator_type = LayerNormDouble


class JITBatchNormFloat(JITWrapper):
    operator_type = BatchNormFloat


class JITBatchNormDouble(JITWrapper):
    operator_type = BatchNormDouble
