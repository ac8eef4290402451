"""cuopjit: CUDA operators compiled at run time from Jinja templates with NVRTC, cached as cubins.

Importing cuopjit never touches the GPU; the first call that needs one initialises the driver.
"""
from ._version import __version__
from .config import GlobalJITConfig, JITConfig, get_default_global_jit_config, get_default_jit_config
from .device.driver import synchronize
from .errors import CompileError, CuopjitError, ExecutionError, MemoryError, NoDeviceError
from .jit import (JITBatchMatMulDouble, JITBatchMatMulFloat, JITBatchNormDouble, JITBatchNormFloat,
                  JITConvolution2DDouble, JITConvolution2DFloat, JITGemmDouble, JITGemmFloat, JITGemvDouble,
                  JITGemvFloat, JITLayerNormDouble, JITLayerNormFloat, JITMatMulDouble, JITMatMulFloat,
                  JITReluDouble, JITReluFloat, JITSoftmaxDouble, JITSoftmaxFloat, JITSymmDouble, JITSymmFloat,
                  JITTrsmDouble, JITTrsmFloat, JITWrapper)
from .jit import JITElementwiseDouble, JITElementwiseFloat
from .jit import JITLayerNormBFloat16, JITLayerNormHalf, JITSoftmaxBFloat16, JITSoftmaxHalf
from .jit import (JITBatchNormBFloat16, JITBatchNormHalf, JITElementwiseBFloat16, JITElementwiseHalf, JITReluBFloat16,
                  JITReluHalf)
from .ops import LayerNormBFloat16, LayerNormHalf, SoftmaxBFloat16, SoftmaxHalf
from .ops import (AveragePool2DBFloat16, AveragePool2DHalf, AxpyBFloat16, AxpyHalf, BatchNormBFloat16, BatchNormHalf,
                  CopyBFloat16, CopyHalf, DotBFloat16, DotHalf, ElementwiseBFloat16, ElementwiseHalf, FlattenBFloat16,
                  FlattenHalf, GlobalAveragePool2DBFloat16, GlobalAveragePool2DHalf, GlobalMaxPool2DBFloat16,
                  GlobalMaxPool2DHalf, MaxPool2DBFloat16, MaxPool2DHalf, ReluBFloat16, ReluHalf, ScalBFloat16, ScalHalf,
                  ViewBFloat16, ViewHalf)
from .ops import ElementwiseDouble, ElementwiseFloat, fold_batchnorm
from .ops import GemvBFloat16, GemvHalf
from .jit import JITGemvBFloat16, JITGemvHalf
from .ops import BatchMatMulBFloat16, BatchMatMulHalf, GemmBFloat16, GemmHalf, MatMulBFloat16, MatMulHalf
from .jit import (JITBatchMatMulBFloat16, JITBatchMatMulHalf, JITGemmBFloat16, JITGemmHalf, JITMatMulBFloat16,
                  JITMatMulHalf)
from .ops import AttentionBFloat16, AttentionDouble, AttentionFloat, AttentionHalf
from .jit import JITAttentionBFloat16, JITAttentionDouble, JITAttentionFloat, JITAttentionHalf
from .ops import Convolution2DBFloat16, Convolution2DHalf
from .jit import JITConvolution2DBFloat16, JITConvolution2DHalf
from .device.memory import empty_cache, memory_context, memory_stats, reset_peak_memory_stats, set_memory_fraction
from .explain import explain
from .listing import show
from .ops import (AveragePool2DDouble, AveragePool2DFloat, AxpyDouble, AxpyFloat, BatchMatMulDouble,
                  BatchMatMulFloat, BatchNormDouble, BatchNormFloat, Convolution2DDouble, Convolution2DFloat,
                  CopyDouble, CopyFloat, DotDouble, DotFloat, FlattenDouble, FlattenFloat, GemmDouble, GemmFloat,
                  GemvDouble, GemvFloat, GlobalAveragePool2DDouble, GlobalAveragePool2DFloat, GlobalMaxPool2DDouble,
                  GlobalMaxPool2DFloat, LayerNormDouble, LayerNormFloat, MatMulDouble, MatMulFloat, MaxPool2DDouble,
                  MaxPool2DFloat, ReluDouble, ReluFloat, ScalDouble, ScalFloat, SoftmaxDouble, SoftmaxFloat,
                  SymmDouble, SymmFloat, TrsmDouble, TrsmFloat, ViewDouble, ViewFloat)
from .device.graph import Graph, graph
from .profile import PerformanceProfile, benchmark
from .device.streams import Stream, use as stream
from .cli.info import print_system_info
from .device.driver import current_device as get_device, device_count as get_device_count
from .device.driver import memory_info as get_memory_info, set_device
from .tensor import Tensor, TensorBFloat16, TensorDouble, TensorFloat, TensorHalf, empty, from_dlpack, ones, zeros
from .creation import eye, linspace, logspace, meshgrid, random, tensor
from .layout import CHANNELS_LAST, CONTIGUOUS, TRANSPOSED
from .ops.layouts import channels_last, contiguous

__all__ = [
    "__version__", "JITConfig", "GlobalJITConfig", "get_default_jit_config", "get_default_global_jit_config",
    "CompileError", "CuopjitError", "ExecutionError", "MemoryError", "NoDeviceError",
    "Tensor", "TensorFloat", "TensorDouble", "TensorHalf", "TensorBFloat16", "tensor", "from_dlpack", "zeros", "ones", "empty", "random", "eye",
    "linspace", "logspace", "meshgrid", "CONTIGUOUS", "CHANNELS_LAST", "TRANSPOSED", "contiguous", "channels_last",
    "get_device_count", "get_device", "set_device", "synchronize", "get_memory_info", "print_system_info",
    "empty_cache", "memory_context", "memory_stats", "reset_peak_memory_stats", "set_memory_fraction", "explain",
    "show",
    "benchmark", "PerformanceProfile", "Stream", "stream", "graph", "Graph",
    "GemmFloat", "GemmDouble", "JITWrapper", "JITGemmFloat", "JITGemmDouble",
    "GemvFloat", "GemvDouble", "MatMulFloat", "MatMulDouble", "BatchMatMulFloat", "BatchMatMulDouble",
    "SymmFloat", "SymmDouble", "TrsmFloat", "TrsmDouble", "JITGemvFloat", "JITGemvDouble", "JITMatMulFloat",
    "JITMatMulDouble", "JITBatchMatMulFloat", "JITBatchMatMulDouble", "JITSymmFloat", "JITSymmDouble",
    "JITTrsmFloat", "JITTrsmDouble",
    "ScalFloat", "ScalDouble", "AxpyFloat", "AxpyDouble", "CopyFloat", "CopyDouble", "DotFloat", "DotDouble",
    "ReluFloat", "ReluDouble", "JITReluFloat", "JITReluDouble",
    "MaxPool2DFloat", "MaxPool2DDouble", "AveragePool2DFloat", "AveragePool2DDouble",
    "GlobalMaxPool2DFloat", "GlobalMaxPool2DDouble", "GlobalAveragePool2DFloat", "GlobalAveragePool2DDouble",
    "FlattenFloat", "FlattenDouble", "ViewFloat", "ViewDouble",
    "SoftmaxFloat", "SoftmaxDouble", "LayerNormFloat", "LayerNormDouble", "BatchNormFloat", "BatchNormDouble",
    "JITSoftmaxFloat", "JITSoftmaxDouble", "JITLayerNormFloat", "JITLayerNormDouble", "JITBatchNormFloat",
    "JITBatchNormDouble",
    "SoftmaxHalf", "SoftmaxBFloat16", "LayerNormHalf", "LayerNormBFloat16", "JITSoftmaxHalf", "JITSoftmaxBFloat16",
    "JITLayerNormHalf", "JITLayerNormBFloat16",
    "ScalHalf", "ScalBFloat16", "AxpyHalf", "AxpyBFloat16", "CopyHalf", "CopyBFloat16", "DotHalf", "DotBFloat16",
    "ReluHalf", "ReluBFloat16", "JITReluHalf", "JITReluBFloat16", "MaxPool2DHalf", "MaxPool2DBFloat16",
    "AveragePool2DHalf", "AveragePool2DBFloat16", "GlobalMaxPool2DHalf", "GlobalMaxPool2DBFloat16",
    "GlobalAveragePool2DHalf", "GlobalAveragePool2DBFloat16", "FlattenHalf", "FlattenBFloat16", "ViewHalf",
    "ViewBFloat16", "BatchNormHalf", "BatchNormBFloat16", "JITBatchNormHalf", "JITBatchNormBFloat16",
    "ElementwiseHalf", "ElementwiseBFloat16", "JITElementwiseHalf", "JITElementwiseBFloat16",
    "Convolution2DFloat", "Convolution2DDouble", "JITConvolution2DFloat", "JITConvolution2DDouble",
    "ElementwiseFloat", "ElementwiseDouble", "JITElementwiseFloat", "JITElementwiseDouble", "fold_batchnorm",
    "GemvHalf", "GemvBFloat16", "JITGemvHalf", "JITGemvBFloat16",
    "GemmHalf", "GemmBFloat16", "JITGemmHalf", "JITGemmBFloat16", "MatMulHalf", "MatMulBFloat16", "JITMatMulHalf",
    "JITMatMulBFloat16", "BatchMatMulHalf", "BatchMatMulBFloat16", "JITBatchMatMulHalf", "JITBatchMatMulBFloat16",
    "AttentionFloat", "AttentionDouble", "JITAttentionFloat", "JITAttentionDouble", "AttentionHalf", "AttentionBFloat16",
    "JITAttentionHalf", "JITAttentionBFloat16",
    "Convolution2DHalf", "Convolution2DBFloat16", "JITConvolution2DHalf", "JITConvolution2DBFloat16",
]
