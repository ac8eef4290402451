"""The Convolution2D family's problem (one layer call: shapes, window, layouts, alignment, epilogue), its choice of
implicit-GEMM / direct kernel, and ConvPlan, the plan that says which of its launches pack the weight."""
from __future__ import annotations

from dataclasses import dataclass

from ...build import pipeline
from ...run.plan import Plan
from .shapes import Shape


@dataclass(frozen=True)
class ConvProblem:
    """One convolution: x N x C x H x W, weight K x C/groups x kh x kw, window and epilogue (bias, relu, or a user
    epilogue's key); `aligned`: y 16-byte aligned, `x_aligned`: x; `x_nhwc` / `y_nhwc`: x / y channels_last
    (memory N, H, W, C) instead of contiguous NCHW."""
    dtype: str
    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1
    groups: int = 1
    bias: bool = False
    relu: bool = False
    aligned: bool = True
    epilogue: str = ""
    x_nhwc: bool = False
    y_nhwc: bool = False
    x_aligned: bool = True

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.ph - self.dh * (self.kh - 1) - 1) // self.sh + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pw - self.dw * (self.kw - 1) - 1) // self.sw + 1

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def kg(self) -> int:
        return self.k // self.groups

    @property
    def pointwise(self) -> bool:
        """A 1x1 window of stride 1, no padding, one group: y = W @ x per pixel (a plain GEMM on NHWC)."""
        return (self.kh, self.kw, self.sh, self.sw, self.ph, self.pw, self.groups) == (1, 1, 1, 1, 0, 0, 1)

    @property
    def layout_tag(self) -> str:
        """'' for NCHW in and out, else '_xnhwc' / '_ynhwc' (kernel names)."""
        return ("_xnhwc" if self.x_nhwc else "") + ("_ynhwc" if self.y_nhwc else "")


@dataclass(frozen=True)
class ConvChoice:
    """The direct kernel (shape None: threads, outputs per thread) or an implicit-GEMM shape, plus switches."""
    shape: Shape | None
    threads: int
    opt: int = 1
    pad: bool = True
    unroll: bool = True
    coalesce: bool = True
    split: bool = False     # 3xTF32 products (float32 mma only)
    opts: pipeline.CompileOpts = pipeline.DEFAULT_OPTS
    split_k: int = 1        # k-slices of the implicit GEMM (conv2d/splitk.py)

    @property
    def label(self) -> str:
        head = self.shape.label if self.shape else f"direct_o{self.opt}_b{self.threads}"
        return (head + ("_3xtf32" if self.split else "") + (f"_k{self.split_k}" if self.split_k > 1 else "")
                + ("" if self.coalesce else "_scalar")
                + ("" if self.pad or not self.shape else "_nopad")
                + ("" if self.unroll else "_nounroll"))


@dataclass(frozen=True)
class ConvPlan(Plan):
    """A plan whose first `pack_launches` launches pack the weight into the workspace bytes [packed_at, workspace),
    which the later launches only read. Run as it is (tuning, prewarm, show) it packs on every call; a
    Convolution2D runs the packing once per set_weight into memory it keeps (operator.py) and forwards the rest."""
    pack_launches: int = 0
    packed_at: int = 0


def problems() -> list[ConvProblem]:
    """The seed's 3x3 layer, ResNet-50's 1x1 / 3x3 stride 2 / 7x7 stride 2 (C = 3) layers, a depthwise 3x3,
    ResNet-50's 1x1 and 3x3 channels_last (the GEMM route, the NHWC kernels), for float64 the seed's layer, an
    odd unaligned one and a channels_last 1x1; float16 / bfloat16: ResNet's 3x3 64 -> 64 channels_last, the stem
    (float16) and a depthwise 3x3 (bfloat16)."""
    nhwc = {"x_nhwc": True, "y_nhwc": True}
    f32 = [ConvProblem("float32", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1),
           ConvProblem("float32", 32, 256, 56, 56, 64, 1, 1),
           ConvProblem("float32", 32, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1),
           ConvProblem("float32", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, bias=True, relu=True),
           ConvProblem("float32", 32, 256, 56, 56, 256, 3, 3, ph=1, pw=1, groups=256),
           ConvProblem("float32", 32, 1024, 14, 14, 256, 1, 1, **nhwc),
           ConvProblem("float32", 32, 256, 14, 14, 256, 3, 3, ph=1, pw=1, **nhwc)]
    f64 = [ConvProblem("float64", 32, 64, 224, 224, 128, 3, 3, ph=1, pw=1),
           ConvProblem("float64", 3, 65, 33, 33, 66, 3, 3, 2, 2, 2, 2, 2, 2, groups=1, bias=True, aligned=False),
           ConvProblem("float64", 32, 256, 14, 14, 256, 1, 1, **nhwc)]
    half = [ConvProblem(dt, 32, 64, 56, 56, 64, 3, 3, ph=1, pw=1, **nhwc) for dt in ("float16", "bfloat16")]
    half += [ConvProblem("float16", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, bias=True, relu=True, **nhwc),
             ConvProblem("bfloat16", 32, 256, 56, 56, 256, 3, 3, ph=1, pw=1, groups=256)]
    return f32 + f64 + half
