"""The 16-bit stem's folded view (cuopjit/ops/conv2d/fold.py): which layers fold (small C, a window of several
columns, any stride), the padded copy's geometry, and a NumPy emulation of what the kernels compute (the copy, the
tensor map's overlapping rows with TMA's zero fill, the folded weight, the KH x 1 convolution) against the float64
convolution. GPU: the stem class (7x7/2, 3x3/2, one channel 5x5/1, dilated, odd sizes, batch 1) in both 16-bit
types, every layout pairing, an epilogue, within one rounding of float64 inside NaN-poisoned canaries."""
from __future__ import annotations

import numpy as np
import pytest

from cuopjit.ops.conv2d import fold, plans as ck, wgmma as cw
from cuopjit.target import named

from conftest import make_config
from test_conv2d import _reference
from test_conv2d_half import NHWC, PAIRS, _run

SM80, SM90 = named("sm_80"), named("sm_90")
P = ck.ConvProblem
# (C, H, W, K, KH, KW, SH, SW, PH, PW, DH, DW)
CLASS = [(3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 1, 1),      # ResNet-50's stem
         (3, 299, 299, 64, 7, 7, 2, 2, 3, 3, 1, 1),      # the same at an odd size
         (3, 224, 224, 32, 3, 3, 2, 2, 1, 1, 1, 1),      # a 3x3/2 stem (EfficientNet, MobileNet)
         (1, 28, 28, 16, 5, 5, 1, 1, 2, 2, 1, 1),        # one channel, stride 1: 8 padded channels
         (3, 31, 29, 16, 3, 5, 1, 2, 1, 2, 2, 3),        # dilated columns, a non-square window
         (4, 60, 63, 24, 3, 3, 4, 4, 0, 1, 1, 1)]        # stride 4 (2 padded channels would do: C = 4 is kept)


def _problem(layer, dtype="float16", **kw):
    c, h, w, k, kh, kw_, sh, sw, ph, pw, dh, dw = layer
    return P(dtype, 2, c, h, w, k, kh, kw_, sh, sw, ph, pw, dh, dw, **kw)


@pytest.mark.parametrize("layer", CLASS, ids=lambda l: "c{}_{}x{}_{}x{}_s{}x{}_d{}x{}".format(*l[:3], *l[4:8], *l[10:]))
def test_the_stem_class_folds(layer):
    p = _problem(layer, **NHWC)
    assert fold.foldable(p, 90) and not fold.foldable(p, 80)
    cp = fold.channels(p)
    assert cp >= p.c and p.sw * cp % 8 == 0 and fold.row(p) * cp % 8 == 0
    assert fold.span(p) * cp <= fold.BK and fold.row(p) >= p.sw * (p.ow - 1) + fold.span(p)
    plan = ck.FAMILY.default_plan(p, make_config().snapshot(), SM90)
    assert plan.choice.endswith("_fold")
    assert [kl.spec.kernel for kl in plan.launches] == ["conv2d_wfold", "conv2d_fold", "conv2d_wgmma"]
    params = dict(plan.launches[-1].spec.params)
    assert (params["FOLD_STEP"], params["FOLD_TAIL"]) == (p.sw * cp, fold.tail(p) * cp) and params["KW"] == 1
    assert plan.workspace >= fold.copy_bytes(p, 2)


def test_the_stem_copy_is_a_third_more_than_x():
    p = P("bfloat16", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, **NHWC)
    assert (fold.channels(p), fold.tail(p), fold.row(p)) == (4, 6, 230)
    assert fold.copy_bytes(p, 2) / (32 * 3 * 224 * 224 * 2) < 1.4          # the old folded copy: 10.7x


@pytest.mark.parametrize("problem, why", [
    (P("float16", 2, 32, 20, 20, 64, 3, 3, 2, 2, 1, 1), "C < 32"),
    (P("float16", 2, 8, 20, 20, 64, 11, 11, 1, 1, 5, 5), "columns times the padded channels <= 64"),
    (P("float16", 2, 6, 20, 20, 64, 3, 3, 1, 1, 1, 1, groups=2), "one group"),
    (P("float32", 2, 3, 20, 20, 64, 7, 7, 2, 2, 3, 3), "16-bit"),
    (P("float16", 2, 3, 20, 20, 64, 7, 1, 2, 2, 3, 0), "16-bit layers"),
])
def test_layers_that_do_not_fold_say_why(problem, why):
    reason = cw.why_not(problem, SM90, fold=True)
    assert reason is not None and why in reason
    assert not ck.FAMILY.default_plan(problem, make_config().snapshot(), SM90).choice.endswith("_fold")


def _emulate(x, wt, p):
    """What the fold plan computes, in float64: the copy Xp, the kernel's view of it (strides FOLD_STEP and the
    row, zero past SPAN * CP), W', then the KH x 1 convolution of stride SH."""
    n, c, h, w = x.shape
    cp, wp, params, q = fold.channels(p), fold.row(p), fold.view(p), fold.folded(p)
    xp = np.zeros((n, h, wp, cp))
    xp[:, :, p.pw:p.pw + w, :c] = x.transpose(0, 2, 3, 1)[:, :, :max(0, min(w, wp - p.pw))]
    flat = xp.reshape(n, h, wp * cp)
    assert params["FOLD_STEP"] * q.w + params["FOLD_TAIL"] == wp * cp          # the kernel's row stride
    idx = params["FOLD_STEP"] * np.arange(p.ow)[:, None] + np.arange(q.c)[None, :]
    assert idx.max() < wp * cp                                                 # no window runs into the next row
    view = np.zeros((n, h, p.ow, fold.BK))
    view[..., :q.c] = flat[:, :, idx]
    wf = np.zeros((p.k, p.kh, fold.BK))
    for s in range(p.kw):
        wf[:, :, s * p.dw * cp:s * p.dw * cp + c] = wt[:, :, :, s].transpose(0, 2, 1)
    y = np.zeros((n, p.k, p.oh, p.ow))
    for r in range(p.kh):
        for oh in range(p.oh):
            ih = oh * p.sh + r * p.dh - p.ph
            if 0 <= ih < h:
                y[:, :, oh] += np.einsum("nwk,ok->now", view[:, ih], wf[:, r])
    return y


@pytest.mark.parametrize("layer", [l for l in CLASS if l[1] < 100] + [(3, 47, 45, 8, 7, 7, 2, 2, 3, 3, 1, 1)],
                         ids=lambda l: "c{}_{}x{}_{}x{}_s{}x{}".format(*l[:3], *l[4:8]))
def test_the_view_reproduces_the_convolution(rng, layer):
    p = _problem(layer)
    x = rng.standard_normal((p.n, p.c, p.h, p.w))
    wt = rng.standard_normal((p.k, p.c, p.kh, p.kw))
    ref = _reference(x, wt, None, (p.sh, p.sw), (p.ph, p.pw), (p.dh, p.dw), 1, False)
    np.testing.assert_allclose(_emulate(x, wt, p), ref, rtol=1e-12, atol=1e-12)


# --- GPU ---------------------------------------------------------------------------------------------------
# (N, C, H, W, K, kernel, stride, pad, groups, bias, relu): test_conv2d_half's layer tuples
STEMS = [(1, 3, 33, 35, 32, 3, 2, 1, 1, False, True),      # 3 -> 32 3x3/2, odd sizes, batch 1
         (2, 1, 12, 13, 24, 5, 1, 2, 1, True, False),      # one channel 5x5/1 (8 padded channels)
         (1, 3, 33, 31, 64, 7, 2, 3, 1, True, True),       # the 7x7/2 stem at odd sizes, batch 1
         (3, 3, 29, 27, 72, 7, 2, 3, 1, False, False)]     # two channel tiles, the second partial


@pytest.mark.gpu
@pytest.mark.parametrize("layer", STEMS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}".format(*l[:6], *l[5:7]))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_stems_within_one_rounding(rng, dtype, layer):
    for x_nhwc, y_nhwc in PAIRS:
        _, jit = _run(rng, dtype, layer, x_nhwc, y_nhwc)
        assert "fold" in jit.get_performance_profile().kernel_name
