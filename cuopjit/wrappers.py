"""The named JIT wrappers of the cuOP API, one line each: which operator class each one wraps."""
from __future__ import annotations

from .jit import JITWrapper
from .ops import GemmDouble, GemmFloat
from .ops import ReluDouble, ReluFloat
from .ops import (BatchMatMulDouble, BatchMatMulFloat, GemvDouble, GemvFloat, MatMulDouble, MatMulFloat,
                  SymmDouble, SymmFloat, TrsmDouble, TrsmFloat)
from .ops import Convolution2DDouble, Convolution2DFloat
from .ops import (BatchNormDouble, BatchNormFloat, LayerNormDouble, LayerNormFloat, SoftmaxDouble,
                  SoftmaxFloat)


class JITGemmFloat(JITWrapper):
    operator_type = GemmFloat


class JITGemmDouble(JITWrapper):
    operator_type = GemmDouble


class JITGemvFloat(JITWrapper):
    operator_type = GemvFloat


class JITGemvDouble(JITWrapper):
    operator_type = GemvDouble


class JITMatMulFloat(JITWrapper):
    operator_type = MatMulFloat


class JITMatMulDouble(JITWrapper):
    operator_type = MatMulDouble


class JITBatchMatMulFloat(JITWrapper):
    operator_type = BatchMatMulFloat


class JITBatchMatMulDouble(JITWrapper):
    operator_type = BatchMatMulDouble


class JITSymmFloat(JITWrapper):
    operator_type = SymmFloat


class JITSymmDouble(JITWrapper):
    operator_type = SymmDouble


class JITTrsmFloat(JITWrapper):
    operator_type = TrsmFloat


class JITTrsmDouble(JITWrapper):
    operator_type = TrsmDouble


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


class JITConvolution2DFloat(JITWrapper):
    operator_type = Convolution2DFloat


class JITConvolution2DDouble(JITWrapper):
    operator_type = Convolution2DDouble
