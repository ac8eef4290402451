"""Operators. FAMILIES maps a family name (as the CLI spells it) to its Float and Double classes, CLASSES
to every class it has by dtype name (HALF_CLASSES: its float16 and bfloat16 classes, where it has them);
each class's `family` attribute holds the family's pure functions (choices, plan, problems)."""
from __future__ import annotations

from .base import Operator
from .gemm.operator import GemmDouble, GemmFloat
from .elementwise.relu import ReluDouble, ReluFloat
from .blas1 import AxpyDouble, AxpyFloat, CopyDouble, CopyFloat, DotDouble, DotFloat, ScalDouble, ScalFloat
from .pool.global_pool import (GlobalAveragePool2DDouble, GlobalAveragePool2DFloat, GlobalMaxPool2DDouble,
                               GlobalMaxPool2DFloat)
from .pool.windowed import AveragePool2DDouble, AveragePool2DFloat, MaxPool2DDouble, MaxPool2DFloat
from .shape import FlattenDouble, FlattenFloat, ViewDouble, ViewFloat
from .rows.softmax import SoftmaxBFloat16, SoftmaxDouble, SoftmaxFloat, SoftmaxHalf
from .rows.layernorm import LayerNormBFloat16, LayerNormDouble, LayerNormFloat, LayerNormHalf
from .batchnorm import BatchNormDouble, BatchNormFloat
from .gemm.gemv import GemvDouble, GemvFloat
from .gemm.matmul import BatchMatMulDouble, BatchMatMulFloat, MatMulDouble, MatMulFloat
from .gemm.symm import SymmDouble, SymmFloat
from .gemm.trsm import TrsmDouble, TrsmFloat
from .conv2d.operator import Convolution2DDouble, Convolution2DFloat
from .elementwise.custom import ElementwiseDouble, ElementwiseFloat
from .batchnorm_fold import fold_batchnorm

FAMILIES: dict[str, tuple[type[Operator], type[Operator]]] = {
    "gemm": (GemmFloat, GemmDouble),
    "scal": (ScalFloat, ScalDouble),
    "axpy": (AxpyFloat, AxpyDouble),
    "copy": (CopyFloat, CopyDouble),
    "dot": (DotFloat, DotDouble),
    "relu": (ReluFloat, ReluDouble),
    "maxpool2d": (MaxPool2DFloat, MaxPool2DDouble),
    "avgpool2d": (AveragePool2DFloat, AveragePool2DDouble),
    "globalmaxpool2d": (GlobalMaxPool2DFloat, GlobalMaxPool2DDouble),
    "globalavgpool2d": (GlobalAveragePool2DFloat, GlobalAveragePool2DDouble),
    "flatten": (FlattenFloat, FlattenDouble),
    "view": (ViewFloat, ViewDouble),
    "softmax": (SoftmaxFloat, SoftmaxDouble),
    "layernorm": (LayerNormFloat, LayerNormDouble),
    "batchnorm": (BatchNormFloat, BatchNormDouble),
    "gemv": (GemvFloat, GemvDouble),
    "matmul": (MatMulFloat, MatMulDouble),
    "batchmatmul": (BatchMatMulFloat, BatchMatMulDouble),
    "symm": (SymmFloat, SymmDouble),
    "trsm": (TrsmFloat, TrsmDouble),
    "conv2d": (Convolution2DFloat, Convolution2DDouble),
    "elementwise": (ElementwiseFloat, ElementwiseDouble),
}
# The families that compute in float16 and bfloat16: (Half, BFloat16) classes.
HALF_CLASSES: dict[str, tuple[type[Operator], type[Operator]]] = {
    "softmax": (SoftmaxHalf, SoftmaxBFloat16),
    "layernorm": (LayerNormHalf, LayerNormBFloat16),
}
CLASSES: dict[str, dict[str, type[Operator]]] = {
    op: {cls.dtype.name: cls for cls in (*classes, *HALF_CLASSES.get(op, ()))} for op, classes in FAMILIES.items()}


def operator_class(op: str, dtype: str) -> type[Operator]:
    """Family `op`'s class of `dtype` (a dtype name); ValueError names the dtypes the family has."""
    classes = CLASSES[op]
    if dtype not in classes:
        raise ValueError(f"{op} has no {dtype} kernels: it has {', '.join(classes)}")
    return classes[dtype]


__all__ = ["FAMILIES", "Operator", "GemmFloat", "GemmDouble",
           "GemvFloat", "GemvDouble", "MatMulFloat", "MatMulDouble", "BatchMatMulFloat", "BatchMatMulDouble",
           "SymmFloat", "SymmDouble", "TrsmFloat", "TrsmDouble",
           "ScalFloat", "ScalDouble", "AxpyFloat", "AxpyDouble", "CopyFloat", "CopyDouble", "DotFloat", "DotDouble",
           "ReluFloat", "ReluDouble", "MaxPool2DFloat", "MaxPool2DDouble", "AveragePool2DFloat",
           "AveragePool2DDouble", "GlobalMaxPool2DFloat", "GlobalMaxPool2DDouble", "GlobalAveragePool2DFloat",
           "GlobalAveragePool2DDouble", "FlattenFloat", "FlattenDouble", "ViewFloat", "ViewDouble",
           "SoftmaxFloat", "SoftmaxDouble", "LayerNormFloat", "LayerNormDouble", "BatchNormFloat", "BatchNormDouble",
           "HALF_CLASSES", "CLASSES", "operator_class", "SoftmaxHalf", "SoftmaxBFloat16", "LayerNormHalf",
           "LayerNormBFloat16",
           "Convolution2DFloat", "Convolution2DDouble", "ElementwiseFloat", "ElementwiseDouble", "fold_batchnorm"]
