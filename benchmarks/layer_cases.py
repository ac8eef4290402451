"""The layers benchmarks/layers.py times, and their cuopjit operators and plans (no GPU needed here).

Layer sets:
  resnet50  the distinct Conv2d and Linear layers of torchvision's ResNet-50 (weights=None) at 224², found
            with forward hooks on a model built on the meta device (`hooked_layers`); without torchvision,
            the same list from the architecture (`resnet50_formula`: stem, bottleneck stages of 3/4/6/3
            blocks, stride on the 3x3 as torchvision's v1.5, 1x1 downsample after conv3). `count` says how
            often a layer occurs.
  bert      one BERT-base encoder layer at 8 x 512 tokens: the four Linear layers as C = A @ Wᵀ (QKV
            4096x2304x768, out-proj 4096x768x768, FFN 4096x3072x768 and 4096x768x3072) and the two
            attention products per head, [96,512,64] @ Kᵀ (a transposed view) and [96,512,512] @ [96,512,64].

Operators: a conv is Convolution2DFloat (no bias, as ResNet's), a Linear GemmFloat(trans_b=True) with the
weight [N, K], an attention product BatchMatMulFloat. PRECISIONS are the JITConfig fields of each mode.
`planned(cases, arch)` plans every case as forward would (placeholders and a named target without a GPU),
so prewarm (`kernels_to_build`) and the GPU run build the same cubins.
"""
from __future__ import annotations

import math
import os
import sys
from collections import Counter
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from cuopjit import prewarm  # noqa: E402
from cuopjit.config import JITConfig, RunSettings  # noqa: E402
from cuopjit.layout import CHANNELS_LAST, CONTIGUOUS, TRANSPOSED, storage_shape  # noqa: E402
from cuopjit.listing import plan_of  # noqa: E402
from cuopjit.recipes import placeholder  # noqa: E402
from cuopjit.tensor import Tensor  # noqa: E402

PRECISIONS = {"fp32": {}, "tf32": {"enable_tensor_core": True},
              "3xtf32": {"enable_tensor_core": True, "precision": "3xtf32"}}
RESNET_BATCHES = (32, 1)
BERT = {"batch": 8, "seq": 512, "hidden": 768, "heads": 12, "ffn": 3072}


@dataclass(frozen=True)
class Layer:
    """One distinct layer. dims: conv (N, C, H, W, K, kh, kw, stride, pad, groups); linear (M, N, K) for
    C[M,N] = A[M,K] @ W[N,K]ᵀ; bmm (B, M, N, K) for C[B,M,N] = A[B,M,K] @ B[B,K,N], B a transposed view when
    trans_b. `role`: what the layer is in its network (BERT's names; ResNet's from the dims)."""
    net: str
    kind: str
    dims: tuple
    count: int = 1
    trans_b: bool = False
    role: str = ""

    @property
    def batch(self) -> int:
        return BERT["batch"] if self.net == "bert" else self.dims[0]

    @property
    def name(self) -> str:
        d = self.dims
        if self.kind == "conv":
            n, c, h, w, k, kh, kw, s, p, g = d
            return (f"{kh}x{kw}{'/' + str(s) if s > 1 else ''} {c}->{k} {h}²" + (f" g{g}" if g > 1 else "")
                    + f" b{n}")
        what = f"{d[0]}x{d[1]}x{d[2]}" if self.kind == "linear" else f"{d[0]}x[{d[1]}x{d[3]}]@[{d[3]}x{d[2]}]"
        return f"{self.role + ' ' if self.role else ''}{what}"

    @property
    def flops(self) -> float:
        d = self.dims
        if self.kind == "conv":
            n, c, h, w, k, kh, kw, s, p, g = d
            return 2.0 * n * k * out_size(h, kh, s, p) * out_size(w, kw, s, p) * (c // g) * kh * kw
        return 2.0 * math.prod(d)


def out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def distinct(found: list[tuple[str, tuple]], net: str) -> list[Layer]:
    """One Layer per distinct (kind, dims) in first-seen order, with its number of occurrences (a Linear is 'fc')."""
    counts = Counter(found)
    return [Layer(net, kind, dims, counts[(kind, dims)], role="fc" if kind == "linear" else "")
            for kind, dims in dict.fromkeys(found)]


def hooked_layers(model, x, net: str) -> list[Layer]:
    """The distinct Conv2d and Linear layers that `model(x)` runs, read by forward hooks (meta tensors work)."""
    import torch
    found = []

    def hook(module, inputs, output):
        a = inputs[0]
        if isinstance(module, torch.nn.Conv2d):
            if module.dilation != (1, 1) or len(set(module.stride)) > 1 or len(set(module.padding)) > 1:
                raise ValueError(f"{module}: the benchmark takes square strides and paddings without dilation")
            found.append(("conv", (*a.shape, module.out_channels, *module.kernel_size, module.stride[0],
                                   module.padding[0], module.groups)))
        else:
            found.append(("linear", (math.prod(a.shape[:-1]), module.out_features, module.in_features)))
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    try:
        with torch.no_grad():
            model.eval()(x)
    finally:
        for h in handles:
            h.remove()
    return distinct([(kind, tuple(int(v) for v in dims)) for kind, dims in found], net)


def resnet50_formula(batch: int) -> list[Layer]:
    """ResNet-50's distinct conv and Linear layers at 224², from the architecture (torchvision's order)."""
    found = [("conv", (batch, 3, 224, 224, 64, 7, 7, 2, 3, 1))]
    c, h = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            found += [("conv", (batch, c, h, h, width, 1, 1, 1, 0, 1)),
                      ("conv", (batch, width, h, h, width, 3, 3, s, 1, 1)),
                      ("conv", (batch, width, h // s, h // s, 4 * width, 1, 1, 1, 0, 1))]
            if b == 0:
                found.append(("conv", (batch, c, h, h, 4 * width, 1, 1, s, 0, 1)))
            c, h = 4 * width, h // s
    return distinct(found + [("linear", (batch, 1000, 2048))], "resnet50")


def resnet50_layers(batch: int) -> tuple[list[Layer], str]:
    """(layers, source): torchvision's ResNet-50 through hooks on the meta device, else the formula."""
    try:
        import torch
        import torchvision
    except Exception:   # no torch, or a torchvision whose extension does not load with this torch
        return resnet50_formula(batch), "architecture formula (torchvision not importable)"
    with torch.device("meta"):
        model = torchvision.models.resnet50(weights=None)
    layers = hooked_layers(model, torch.empty(batch, 3, 224, 224, device="meta"), "resnet50")
    return layers, f"torchvision {torchvision.__version__} forward hooks"


def bert_layers(batch: int = BERT["batch"], seq: int = BERT["seq"], hidden: int = BERT["hidden"],
                heads: int = BERT["heads"], ffn: int = BERT["ffn"]) -> list[Layer]:
    """A BERT-base encoder layer's four Linear layers and two attention products per head."""
    t, b, d = batch * seq, batch * heads, hidden // heads
    return [Layer("bert", "linear", (t, 3 * hidden, hidden), role="QKV"),
            Layer("bert", "linear", (t, hidden, hidden), role="out-proj"),
            Layer("bert", "linear", (t, ffn, hidden), role="FFN up"),
            Layer("bert", "linear", (t, hidden, ffn), role="FFN down"),
            Layer("bert", "bmm", (b, seq, seq, d), trans_b=True, role="Q@Kᵀ"),
            Layer("bert", "bmm", (b, seq, d, seq), role="P@V")]


def operands(layer: Layer, conv_layout: str, kt_layout: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (logical shape, layout) of each tensor a layer's forward reads or writes."""
    d = layer.dims
    if layer.kind == "conv":
        n, c, h, w, k, kh, kw, s, p, g = d
        return {"x": ((n, c, h, w), conv_layout), "w": ((k, c // g, kh, kw), CONTIGUOUS),
                "y": ((n, k, out_size(h, kh, s, p), out_size(w, kw, s, p)), conv_layout)}
    if layer.kind == "linear":
        m, n, k = d
        return {"a": ((m, k), CONTIGUOUS), "w": ((n, k), CONTIGUOUS), "c": ((m, n), CONTIGUOUS)}
    b, m, n, k = d
    return {"a": ((b, m, k), CONTIGUOUS), "b": ((b, k, n), kt_layout if layer.trans_b else CONTIGUOUS),
            "c": ((b, m, n), CONTIGUOUS)}


def operator(layer: Layer):
    """The cuopjit operator of a layer (weights are set by `call`)."""
    if layer.kind == "conv":
        n, c, h, w, k, kh, kw, s, p, g = layer.dims
        return cuopjit.Convolution2DFloat(c, k, kh, kw, s, s, groups=g)
    return cuopjit.GemmFloat(trans_b=True) if layer.kind == "linear" else cuopjit.BatchMatMulFloat()


def call(layer: Layer, op, t: dict[str, Tensor]) -> tuple[tuple, dict]:
    """Set `op`'s weight from `t` and return the forward's (args, kwargs)."""
    if layer.kind == "conv":
        op.set_weight(t["w"])
        return (t["x"], t["y"]), {"pad_h": layer.dims[8], "pad_w": layer.dims[8]}
    if layer.kind == "linear":
        op.set_weight(t["w"])
        return (t["a"], t["c"]), {}
    return (t["a"], t["b"], t["c"]), {}


def fake(shape: tuple[int, ...], layout: str) -> Tensor:
    """A placeholder (no memory: planning only) of `shape` in `layout`."""
    if layout == TRANSPOSED:
        return placeholder(storage_shape(shape, layout)).mT
    p = placeholder(shape)
    return p if layout == CONTIGUOUS else Tensor._view(p.ptr, p.shape, p.dtype, p.device, None, layout)


def settings(precision: str) -> RunSettings:
    """The run settings of a JIT wrapper configured for `precision` (cuopjit's default cache, no tuning)."""
    return RunSettings.of(config(precision).snapshot())


def config(precision: str) -> JITConfig:
    cfg = JITConfig()
    for name, value in PRECISIONS[precision].items():
        setattr(cfg, name, value)
    return cfg


def refusal(layer: Layer, layouts: dict[str, str]) -> str:
    """'' when the layer's operator plans these layouts (placeholders, sm_90), else its one-line reason."""
    conv, kt = layouts.get("conv", CONTIGUOUS), layouts.get("kt", CONTIGUOUS)
    op = operator(layer)
    args, kwargs = call(layer, op, {k: fake(*v) for k, v in operands(layer, conv, kt).items()})
    try:
        plan_of(op, settings("fp32"), args, kwargs, "sm_90")
    except (ValueError, TypeError) as exc:
        return str(exc)
    return ""


def layouts() -> dict[str, dict]:
    """The layouts the run uses, each with why: convs channels_last and Kᵀ as a transposed view where cuopjit's
    operators take them (else NCHW and a contiguous copy of Kᵀ made once, outside the timing)."""
    conv_probe = Layer("resnet50", "conv", (2, 64, 8, 8, 64, 1, 1, 1, 0, 1))
    bmm_probe = Layer("bert", "bmm", (2, 16, 16, 8), trans_b=True)
    out = {}
    for name, layer, wanted in (("conv", conv_probe, CHANNELS_LAST), ("kt", bmm_probe, TRANSPOSED)):
        why = refusal(layer, {name: wanted})
        out[name] = {"layout": CONTIGUOUS if why else wanted, "why": why or "taken by the operator"}
    return out


@dataclass
class Case:
    """One layer in one precision: a JIT wrapper and its forward's arguments."""
    layer: Layer
    precision: str
    jit: object
    args: tuple
    kwargs: dict = field(default_factory=dict)


def cases(layers: list[Layer], precisions: list[str], tensors) -> list[Case]:
    """Every layer in every precision; `tensors(layer)` gives its operands (name -> Tensor). One operator per
    layer, one JIT wrapper per precision around it."""
    out = []
    for layer in layers:
        op = operator(layer)
        args, kwargs = call(layer, op, tensors(layer))
        for precision in precisions:
            jit = (cuopjit.JITConvolution2DFloat if layer.kind == "conv" else cuopjit.JITGemmFloat
                   if layer.kind == "linear" else cuopjit.JITBatchMatMulFloat)(op)
            jit.set_jit_config(config(precision))
            out.append(Case(layer, precision, jit, args, kwargs))
    return out


def planned(all_cases: list[Case], arch: str | None = None) -> list[prewarm.PlannedProblem]:
    """Each case's plan as its forward makes it (arch None: the live GPU; else that named target)."""
    out = []
    for c in all_cases:
        op = c.jit.operator
        plan, target = plan_of(op, settings(c.precision), c.args, c.kwargs, arch)
        out.append(prewarm.PlannedProblem(c.layer.kind, op.problem(*c.args, **c.kwargs), target, plan))
    return out


def fake_tensors(lay: dict[str, dict]):
    """`tensors` for `cases` without a GPU: placeholders in the run's layouts."""
    return lambda layer: {k: fake(*v) for k, v in operands(layer, lay["conv"]["layout"], lay["kt"]["layout"]).items()}


def all_layers(batches=RESNET_BATCHES) -> tuple[list[Layer], str]:
    """ResNet-50 at the first batch, the BERT layer, ResNet-50 at the other batches (the goal rows that matter
    most are timed first); and where ResNet-50's list came from."""
    layers, source = [], ""
    for i, b in enumerate(batches):
        found, source = resnet50_layers(b)
        layers += found + (bert_layers() if i == 0 else [])
    return (layers or bert_layers()), source

