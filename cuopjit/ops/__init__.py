"""Operators. FAMILIES maps a family name (as the CLI spells it) to its Float and Double classes, CLASSES
to every class it has by dtype name (HALF_CLASSES: its float16 and bfloat16 classes, where it has them);
each class's `family` attribute holds the family's pure functions (choices, plan, problems)."""
from __future__ import annotations

from .base import Operator
from .gemm.operator import GemmBFloat16, GemmDouble, GemmFloat, GemmHalf
from .elementwise.relu import ReluBFloat16, ReluDouble, ReluFloat, ReluHalf
from .blas1 import (AxpyBFloat16, AxpyDouble, AxpyFloat, AxpyHalf, CopyBFloat16, CopyDouble, CopyFloat, CopyHalf,
                    DotBFloat16, DotDouble, DotFloat, DotHalf, ScalBFloat16, ScalDouble, ScalFloat, ScalHalf)
from .pool.global_pool import (GlobalAveragePool2DBFloat16, GlobalAveragePool2DDouble, GlobalAveragePool2DFloat,
                               GlobalAveragePool2DHalf, GlobalMaxPool2DBFloat16, GlobalMaxPool2DDouble,
                               GlobalMaxPool2DFloat, GlobalMaxPool2DHalf)
from .pool.windowed import (AveragePool2DBFloat16, AveragePool2DDouble, AveragePool2DFloat, AveragePool2DHalf,
                            MaxPool2DBFloat16, MaxPool2DDouble, MaxPool2DFloat, MaxPool2DHalf)
from .shape import (FlattenBFloat16, FlattenDouble, FlattenFloat, FlattenHalf, ViewBFloat16, ViewDouble, ViewFloat,
                    ViewHalf)
from .rows.softmax import SoftmaxBFloat16, SoftmaxDouble, SoftmaxFloat, SoftmaxHalf
from .rows.layernorm import LayerNormBFloat16, LayerNormDouble, LayerNormFloat, LayerNormHalf
from .batchnorm import BatchNormBFloat16, BatchNormDouble, BatchNormFloat, BatchNormHalf
from .gemm.gemv import GemvDouble, GemvFloat
from .gemm.gemv import GemvBFloat16, GemvHalf
from .gemm.matmul import BatchMatMulDouble, BatchMatMulFloat, MatMulDouble, MatMulFloat
from .gemm.matmul import BatchMatMulBFloat16, BatchMatMulHalf, MatMulBFloat16, MatMulHalf
from .gemm.symm import SymmDouble, SymmFloat
from .gemm.trsm import TrsmDouble, TrsmFloat
from .conv2d.operator import Convolution2DDouble, Convolution2DFloat
from .conv2d.operator import Convolution2DBFloat16, Convolution2DHalf
from .elementwise.custom import ElementwiseBFloat16, ElementwiseDouble, ElementwiseFloat, ElementwiseHalf
from .batchnorm_fold import fold_batchnorm
from .attention.operator import AttentionBFloat16, AttentionDouble, AttentionFloat, AttentionHalf

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
    "attention": (AttentionFloat, AttentionDouble),
}
# The families that compute in float16 and bfloat16: (Half, BFloat16) classes.
HALF_CLASSES: dict[str, tuple[type[Operator], type[Operator]]] = {
    "gemm": (GemmHalf, GemmBFloat16),
    "matmul": (MatMulHalf, MatMulBFloat16),
    "batchmatmul": (BatchMatMulHalf, BatchMatMulBFloat16),
    "scal": (ScalHalf, ScalBFloat16),
    "axpy": (AxpyHalf, AxpyBFloat16),
    "copy": (CopyHalf, CopyBFloat16),
    "dot": (DotHalf, DotBFloat16),
    "relu": (ReluHalf, ReluBFloat16),
    "maxpool2d": (MaxPool2DHalf, MaxPool2DBFloat16),
    "avgpool2d": (AveragePool2DHalf, AveragePool2DBFloat16),
    "globalmaxpool2d": (GlobalMaxPool2DHalf, GlobalMaxPool2DBFloat16),
    "globalavgpool2d": (GlobalAveragePool2DHalf, GlobalAveragePool2DBFloat16),
    "flatten": (FlattenHalf, FlattenBFloat16),
    "view": (ViewHalf, ViewBFloat16),
    "softmax": (SoftmaxHalf, SoftmaxBFloat16),
    "layernorm": (LayerNormHalf, LayerNormBFloat16),
    "batchnorm": (BatchNormHalf, BatchNormBFloat16),
    "elementwise": (ElementwiseHalf, ElementwiseBFloat16),
    "gemv": (GemvHalf, GemvBFloat16),
    "attention": (AttentionHalf, AttentionBFloat16),
    "conv2d": (Convolution2DHalf, Convolution2DBFloat16),
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
           "HALF_CLASSES", "CLASSES", "operator_class",
           *(cls.__name__ for pair in HALF_CLASSES.values() for cls in pair),
           "Convolution2DFloat", "Convolution2DDouble", "ElementwiseFloat", "ElementwiseDouble", "fold_batchnorm",
           "AttentionFloat", "AttentionDouble"]
