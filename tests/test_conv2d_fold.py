"""The 16-bit stem folded (cuopjit/ops/conv2d/fold.py): which layers fold (small C, a window of several columns, any
stride), the padded copy's geometry, and NumPy emulations of what the kernels compute against the float64
convolution: the copy, then either the tensor map's overlapping rows with TMA's zero fill ("view") or each tile's
patch and the k-tiles built from it, two window rows per k-tile ("smem"), with the folded weight to match. GPU: the
stem class (7x7/2, 3x3/2, one channel 5x5/1, odd sizes, batch 1, two channel tiles) in both 16-bit types and both
modes, every layout pairing, within one rounding of float64 inside NaN-poisoned canaries."""
from __future__ import annotations

import numpy as np
import pytest

from cuopjit.ops.conv2d import fold, plans as ck, wgmma as cw
from cuopjit.target import named

from conftest import compiles_without_spills, make_config
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

SMALL = [l for l in CLASS if l[1] < 100] + [(3, 47, 45, 8, 7, 7, 2, 2, 3, 3, 1, 1),
                                            (3, 33, 35, 8, 3, 3, 2, 2, 1, 1, 1, 1)]


def _mode(monkeypatch, smem: bool) -> None:
    """Make the stem's "smem" builds (auto-tuning candidates) the first choice when `smem`, as a tuning record would."""
    if smem:
        base = cw.fold_choices
        monkeypatch.setattr(cw, "fold_choices", lambda *a: sorted(base(*a), key=lambda c: c.fold != "smem"))


def _problem(layer, dtype="float16", **kw):
    c, h, w, k, kh, kw_, sh, sw, ph, pw, dh, dw = layer
    return P(dtype, 2, c, h, w, k, kh, kw_, sh, sw, ph, pw, dh, dw, **kw)


@pytest.mark.parametrize("layer", CLASS, ids=lambda l: "c{}_{}x{}_{}x{}_s{}x{}_d{}x{}".format(*l[:3], *l[4:8], *l[10:]))
@pytest.mark.parametrize("smem", [False, True], ids=["view", "smem"])
def test_the_stem_class_folds(monkeypatch, layer, smem):
    _mode(monkeypatch, smem)
    mode = "smem" if smem else "view"
    p = _problem(layer, **NHWC)
    assert fold.foldable(p, 90) and not fold.foldable(p, 80)
    cp = fold.channels(p)
    assert cp >= p.c and p.sw * cp % 8 == 0 and fold.row(p) * cp % 8 == 0
    assert fold.span(p) * cp <= fold.BK and fold.row(p) >= p.sw * (p.ow - 1) + fold.span(p)
    plan = ck.FAMILY.default_plan(p, make_config().snapshot(), SM90)
    assert plan.choice.endswith("_foldsmem" if smem else "_fold")
    assert [kl.spec.kernel for kl in plan.launches] == ["conv2d_wfold", "conv2d_fold", "conv2d_wgmma"]
    params = dict(plan.launches[-1].spec.params)
    assert (params["FOLD_STEP"], params["FOLD_TAIL"]) == (p.sw * cp, fold.tail(p) * cp) and params["KW"] == 1
    assert params["FOLD"] == mode and params["KH"] == fold.ktiles(p, mode) <= p.kh
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


def _copy(x, p):
    """Xp's rows, flat: [N][H][WP * CP]."""
    n, c, h, w = x.shape
    cp, wp = fold.channels(p), fold.row(p)
    xp = np.zeros((n, h, wp, cp))
    xp[:, :, p.pw:p.pw + w, :c] = x.transpose(0, 2, 3, 1)[:, :, :max(0, min(w, wp - p.pw))]
    return xp.reshape(n, h, wp * cp)


def _wfold(wt, p, mode):
    """conv2d_wfold's W' [K][KT][64]."""
    cp, t, kt = fold.channels(p), fold.taps(p, mode), fold.ktiles(p, mode)
    width = fold.slot(p) if mode == "smem" else fold.BK
    wf = np.zeros((p.k, kt, fold.BK))
    for t_ in range(kt):
        for k in range(fold.BK):
            j, kk = divmod(k, width)
            r, (tap, c) = t_ * t + j, divmod(kk, cp)
            if j < t and r < p.kh and c < p.c and tap % p.dw == 0 and tap // p.dw < p.kw:
                wf[:, t_, k] = wt[:, c, r, tap // p.dw]
    return wf


def _emulate_smem(x, wt, p, bw, bh):
    """The "smem" kernel, tile by tile: each tile's patch (FOLD_NB blocks of 64 halves x FOLD_ROWS rows, zero
    outside the copy), the builder warps' 16-byte chunks of every k-tile, the wgmma products."""
    flat, wf, prm = _copy(x, p), _wfold(wt, p, "smem"), fold.params(p, "smem", bw, bh)
    step, nb, rows, spanc = prm["FOLD_STEP"], prm["FOLD_NB"], prm["FOLD_ROWS"], prm["FOLD_SPANC"]
    chunks, t = prm["FOLD_SLOT"] // 8, prm["FOLD_T"]
    n, h, width = flat.shape
    y = np.zeros((n, p.k, p.oh, p.ow))
    q = np.arange(bw * bh)
    for img in range(n):
        for oh0 in range(0, p.oh, bh):
            for ow0 in range(0, p.ow, bw):
                patch = np.zeros((rows, nb * 64))
                for row in range(rows):
                    ih, e0 = oh0 * p.sh - p.ph + row, ow0 * step
                    if 0 <= ih < h and e0 < width:
                        got = flat[img, ih, e0:e0 + nb * 64]
                        patch[row, :got.size] = got
                acc = np.zeros((p.k, q.size))
                for kt in range(wf.shape[1]):
                    b = np.zeros((q.size, fold.BK))
                    for ch in range(8):
                        j, c8 = ch // chunks, (ch % chunks) * 8
                        r = kt * t + j
                        if j < t and r < p.kh and c8 < spanc:
                            prow, pcol = (q // bw) * p.sh + r * p.dh, (q % bw) * step + c8
                            assert prow.max() < rows and pcol.max() + 8 <= nb * 64     # inside the patch
                            v = patch[prow[:, None], pcol[:, None] + np.arange(8)[None, :]]
                            v[:, max(0, spanc - c8):] = 0
                            b[:, ch * 8:ch * 8 + 8] = v
                    acc += wf[:, kt] @ b.T
                oh, ow = oh0 + q // bw, ow0 + q % bw
                keep = (oh < p.oh) & (ow < p.ow)
                y[img][:, oh[keep], ow[keep]] = acc[:, keep]
    return y


def _emulate(x, wt, p):
    """What the fold plan computes, in float64: the copy Xp, the kernel's view of it (strides FOLD_STEP and the
    row, zero past SPAN * CP), W', then the KH x 1 convolution of stride SH."""
    n, c, h, w = x.shape
    cp, wp, params, q = fold.channels(p), fold.row(p), fold.params(p, "view"), fold.folded(p)
    flat = _copy(x, p)
    assert params["FOLD_STEP"] * q.w + params["FOLD_TAIL"] == wp * cp          # the kernel's row stride
    idx = params["FOLD_STEP"] * np.arange(p.ow)[:, None] + np.arange(q.c)[None, :]
    assert idx.max() < wp * cp                                                 # no window runs into the next row
    view = np.zeros((n, h, p.ow, fold.BK))
    view[..., :q.c] = flat[:, :, idx]
    wf = _wfold(wt, p, "view")
    y = np.zeros((n, p.k, p.oh, p.ow))
    for r in range(p.kh):
        for oh in range(p.oh):
            ih = oh * p.sh + r * p.dh - p.ph
            if 0 <= ih < h:
                y[:, :, oh] += np.einsum("nwk,ok->now", view[:, ih], wf[:, r])
    return y


@pytest.mark.parametrize("layer", SMALL, ids=lambda l: "c{}_{}x{}_{}x{}_s{}x{}".format(*l[:3], *l[4:8]))
def test_the_view_reproduces_the_convolution(rng, layer):
    p = _problem(layer)
    x = rng.standard_normal((p.n, p.c, p.h, p.w))
    wt = rng.standard_normal((p.k, p.c, p.kh, p.kw))
    ref = _reference(x, wt, None, (p.sh, p.sw), (p.ph, p.pw), (p.dh, p.dw), 1, False)
    np.testing.assert_allclose(_emulate(x, wt, p), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layer", SMALL, ids=lambda l: "c{}_{}x{}_{}x{}_s{}x{}".format(*l[:3], *l[4:8]))
@pytest.mark.parametrize("box", [(16, 16), (8, 5), (14, 4)], ids=lambda b: "{}x{}".format(*b))
def test_the_patches_reproduce_the_convolution(rng, layer, box):
    p = _problem(layer)
    x = rng.standard_normal((p.n, p.c, p.h, p.w))
    wt = rng.standard_normal((p.k, p.c, p.kh, p.kw))
    ref = _reference(x, wt, None, (p.sh, p.sw), (p.ph, p.pw), (p.dh, p.dw), 1, False)
    np.testing.assert_allclose(_emulate_smem(x, wt, p, *box), ref, rtol=1e-12, atol=1e-12)


def test_the_stem_built_in_smem_takes_two_window_rows_per_k_tile():
    p = P("float16", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, **NHWC)
    assert (fold.slot(p), fold.taps(p, "smem"), fold.ktiles(p, "smem"), fold.ktiles(p, "view")) == (32, 2, 4, 7)
    assert (fold.patch_blocks(p, 16), fold.patch_rows(p, 16), fold.patch_bytes(p, 16, 16)) == (3, 37, 3 * 40 * 128)
    assert not fold.builds(p, 112, 1, 4) and not fold.builds(p, 16, 128, 1)


@pytest.mark.parametrize("smem", [True, False], ids=["smem", "view"])
def test_both_modes_compile_without_spills(monkeypatch, smem):
    _mode(monkeypatch, smem)
    specs = {}
    for p in (P("bfloat16", 4, 3, 45, 47, 64, 7, 7, 2, 2, 3, 3, y_nhwc=True),
              P("float16", 4, 1, 30, 30, 24, 5, 5, 1, 1, 2, 2, bias=True, relu=True, **NHWC)):
        specs.update(dict.fromkeys(ck.FAMILY.default_plan(p, make_config().snapshot(), SM90).specs))
    assert sum(s.kernel == "conv2d_wgmma" and dict(s.params)["FOLD"] == ("smem" if smem else "view")
               for s in specs) == 2
    compiles_without_spills(specs, "sm_90a")


def test_the_stem_reads_the_view_unless_smem_is_tuned_first(monkeypatch):
    p = P("bfloat16", 32, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, **NHWC)
    for smem, label, mode, kt in ((False, "_fold", "view", 7), (True, "_foldsmem", "smem", 4)):
        _mode(monkeypatch, smem)
        plan = ck.FAMILY.default_plan(p, make_config().snapshot(), SM90)
        params = dict(plan.launches[-1].spec.params)
        assert plan.choice.endswith(label) and params["FOLD"] == mode and params["KH"] == kt
    monkeypatch.undo()
    labels = [c.label for c in ck.FAMILY.choices(p, make_config().snapshot(), SM90)]
    assert labels[0].endswith("_fold") and any(label.endswith("_foldsmem") for label in labels)


# --- GPU ---------------------------------------------------------------------------------------------------
# (N, C, H, W, K, kernel, stride, pad, groups, bias, relu): test_conv2d_half's layer tuples
STEMS = [(1, 3, 33, 35, 32, 3, 2, 1, 1, False, True),      # 3 -> 32 3x3/2, odd sizes, batch 1
         (2, 1, 12, 13, 24, 5, 1, 2, 1, True, False),      # one channel 5x5/1 (8 padded channels)
         (1, 3, 33, 31, 64, 7, 2, 3, 1, True, True),       # the 7x7/2 stem at odd sizes, batch 1
         (3, 3, 29, 27, 72, 7, 2, 3, 1, False, False)]     # two channel tiles, the second partial


@pytest.mark.gpu
@pytest.mark.parametrize("layer", STEMS, ids=lambda l: "n{}c{}h{}w{}k{}_{}x{}s{}".format(*l[:6], *l[5:7]))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("smem", [True, False], ids=["smem", "view"])
def test_stems_within_one_rounding(rng, monkeypatch, dtype, layer, smem):
    _mode(monkeypatch, smem)
    for x_nhwc, y_nhwc in PAIRS:
        _, jit = _run(rng, dtype, layer, x_nhwc, y_nhwc)
        assert "fold" in jit.get_performance_profile().kernel_name
