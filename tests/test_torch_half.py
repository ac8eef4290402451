"""The torch.compile backend in float16 and bfloat16 (a model in `.half()` / `.to(torch.bfloat16)`).

CPU: which nodes of a half-precision graph run on cuopjit (the families with 16-bit kernels) and which stay torch
and why (a family without them, torch.autocast's mixed casts, a setting an operator refuses at compile time),
the 16-bit products' epilogue rule (tensor cores: only the cheap ops fuse), and the rewritten graph with reference
operators against eager. GPU: a ResNet-style block (NCHW and channels_last) and an nn.TransformerEncoderLayer in
both dtypes against a float64 model on the same weights, within the dtype's unit roundoff times the depth.
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

import torch.nn as nn  # noqa: E402

from cuopjit.torch import backend, common, fused_attention, fusion, heads, support  # noqa: E402
from conftest import rel_error  # noqa: E402
from test_torch_backend import Block, _RefAttention, groups_of, reference_operators  # noqa: E402
from test_torch_epilogues import Mlp  # noqa: E402
from torch_support import capture  # noqa: E402

HALVES = [torch.float16, torch.bfloat16]
IDS = ["float16", "bfloat16"]
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def _encoder(width: int = 32) -> nn.Module:
    return nn.TransformerEncoderLayer(width, 4, 2 * width, batch_first=True).eval()


def _kinds(p) -> list[tuple[str, int]]:
    return [(kind, len(nodes)) for kind, nodes, _ in groups_of(p)]


# --- planning (CPU) ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_half_block_runs_its_16_bit_families_and_convolutions_where_cuopjit_has_them(dtype):
    p = fusion.plan(*capture(Block().eval().to(dtype), torch.randn(2, 8, 9, 9, dtype=dtype)), "cpu")
    why = {n.name: w for n, w in p.torch.items()}
    name = common.dtype_name(dtype)
    if common.operator_class("conv2d", dtype) is not None:   # the fp32 plan: BatchNorm folded, ReLU fused
        assert _kinds(p) == [("conv2d", 3), ("conv2d", 4), ("conv2d", 2), ("adaptive_avg_pool2d", 1), ("linear", 1)]
    else:   # convolutions stay torch; each BatchNorm (+ residual) + ReLU runs as one elementwise program
        assert _kinds(p) == [("elementwise", 2), ("elementwise", 4), ("adaptive_avg_pool2d", 1), ("linear", 1)]
        assert why["conv2d"] == f"conv2d in {name} (cuopjit has no {name} conv2d kernels)"
        assert groups_of(p)[1][2] == "out = relu(((x0 * k0 + k1) + (x1 * k2 + k3)))"
    assert why["flatten"] == "a view: stays torch (no copy)"


@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_half_encoder_layer_runs_as_the_float32_one_does(dtype):
    p = fusion.plan(*capture(_encoder().to(dtype), torch.randn(2, 5, 32, dtype=dtype)), "cpu")
    assert _kinds(p) == [("linear", 1), ("attention", 1), ("linear", 2), ("layer_norm", 1), ("linear", 2),
                         ("linear", 2), ("layer_norm", 1)]
    assert set(p.torch.values()) == {"a view: stays torch (no copy)"}


def test_a_family_without_16_bit_kernels_stays_torch(monkeypatch):
    real = support.operator_class
    monkeypatch.setattr(support, "operator_class", lambda f, d: None if f == "softmax" else real(f, d))
    model = nn.Sequential(nn.Linear(8, 8), nn.Softmax(-1), nn.ReLU()).eval().half()
    p = fusion.plan(*capture(model, torch.randn(3, 8).half()), "cpu")
    assert [w for w in p.torch.values()] == ["softmax in float16 (cuopjit has no float16 softmax kernels)"]
    assert _kinds(p) == [("linear", 1), ("elementwise", 1)]


def test_autocast_graphs_keep_their_mixed_nodes_on_torch_and_say_so():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    graphs = []
    torch._dynamo.reset()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.compile(model, backend=lambda gm, ex: graphs.append((gm, ex)) or gm.forward)(torch.randn(3, 8))
    p = fusion.plan(*graphs[0], "cpu")
    why = list(p.torch.values())
    assert why[0] == ("linear of float32 input to a bfloat16 output (torch.autocast's casts): stays torch; convert "
                      "the model with .to(torch.bfloat16) to run it on cuopjit")
    assert why[1].startswith("linear of float32 weight to a bfloat16 output")
    assert _kinds(p) == [("elementwise", 1)]     # the ReLU between them is bfloat16 throughout


# --- the rewritten graph with reference operators (CPU) ------------------------------------------------------
def _rewritten(model, x, monkeypatch, check=None):
    reference_operators(monkeypatch)
    monkeypatch.setattr(fused_attention, "Runner", _RefAttention)
    gm, ex = capture(model, x)
    p = fusion.plan(gm, ex, "cpu")
    report = ct.report.new_report({})
    backend.rewrite(p, heads.Launch(), {"conv": False, "matmul": False}, report, check)
    with torch.no_grad():
        return gm(*ex), model(x), report


@pytest.mark.parametrize("name", ["mlp", "block", "encoder"])
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_rewritten_half_graphs_with_reference_operators_equal_eager(name, dtype, monkeypatch):
    model, x = {"mlp": (Mlp(), torch.randn(2, 5, 8)), "block": (Block(), torch.randn(2, 8, 9, 9)),
                "encoder": (_encoder(), torch.randn(2, 5, 32))}[name]
    got, want, report = _rewritten(model.eval().to(dtype), x.to(dtype), monkeypatch)
    got, want = (got, want) if isinstance(want, tuple) else ((got[0],), (want,))
    for g, w in zip(got, want):
        assert g.dtype == dtype and rel_error(g.double().numpy(), w.double().numpy()) < 16 * UNIT_ROUNDOFF[dtype]
    assert report.on_cuopjit
    if name == "mlp":    # a 16-bit product runs on tensor cores: its GELU stays an elementwise pass
        assert any("gelu on a tensor-core kernel costs more in its epilogue" in n for n in report.notes)
        assert any("relu(((acc + k0) + x0))" in k.name for k in report.kernels)


def test_a_half_group_whose_plan_is_refused_stays_torch(monkeypatch):
    def refuse(kernel):
        raise ValueError("Gemm: no such 16-bit kernel\nsecond line")
    got, want, report = _rewritten(Mlp().eval().half(), torch.randn(2, 5, 8).half(), monkeypatch, refuse)
    assert not report.on_cuopjit and all(torch.equal(g, w) for g, w in zip(got, want))
    assert "cuopjit refused it: Gemm: no such 16-bit kernel" in report.on_torch.values()


# --- GPU: real kernels against a float64 model on the same weights -----------------------------------------
def _against_float64(model, x, dtype):
    """(our relative error, torch eager's) against the float64 model on the same (16-bit) weights and input."""
    model, x = model.cuda().eval().to(dtype), x.cuda().to(dtype)
    if x.dim() == 4 and x.stride(1) == 1:
        model = model.to(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="cuopjit")
        got = compiled(x)
        got = compiled(x)
        eager = model(x)
    assert got.dtype == dtype
    err, base = (rel_error(t.double().cpu().numpy(), ref.cpu().numpy()) for t in (got, eager))
    print(f"{dtype} rel error vs float64: cuopjit {err:.2e}, torch eager {base:.2e}")
    return err, base


@pytest.mark.gpu
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_half_resnet_block_matches_float64(dtype, channels_last):
    torch.manual_seed(0)
    x = torch.randn(4, 16, 17, 19)
    x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
    err, _ = _against_float64(Block(16), x, dtype)
    assert err < 4 * 4 * UNIT_ROUNDOFF[dtype]   # four roundings deep (conv, conv + residual, pool, linear)
    report = ct.last_report()
    assert report.fallback is None
    ran = {e.target.split(".")[-1] for e in report.entries if e.where == "cuopjit"}
    assert {"adaptive_avg_pool2d", "linear", "relu", "batch_norm"} <= ran
    assert ("conv2d" in ran) == (common.operator_class("conv2d", dtype) is not None)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALVES, ids=IDS)
def test_half_transformer_encoder_layer_matches_float64(dtype):
    torch.manual_seed(0)
    err, _ = _against_float64(nn.TransformerEncoderLayer(256, 4, 512, batch_first=True), torch.randn(4, 33, 256),
                              dtype)
    assert err < 4 * 8 * UNIT_ROUNDOFF[dtype]   # eight roundings deep (four products, attention, norms)
    report = ct.last_report()
    assert {"linear", "attention", "layer_norm"} <= {e.target.split(".")[-1] for e in report.entries
                                                   if e.where == "cuopjit"}
    assert not [w for w in report.on_torch.values() if w != "a view: stays torch (no copy)"]
    suffix = "Half" if dtype == torch.float16 else "BFloat16"
    assert all(suffix in k.name.split("(")[0] for k in report.kernels), [k.name for k in report.kernels]
