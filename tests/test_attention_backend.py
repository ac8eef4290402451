"""Attention through PyTorch: the backend lowers F.scaled_dot_product_attention (no mask, no dropout; causal or
not) and an eval TransformerEncoderLayer's attention to one fused attention node run by AttentionFloat / Double
(q, k, v read where the QKV projection left them, the output written heads-last), and `torch.ops.cuopjit.attention`.
CPU: the plan over Dynamo's graphs; GPU: results against float64 eager."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cuopjit.torch import fusion  # noqa: E402
from conftest import rel_error  # noqa: E402
from torch_support import capture, tf32  # noqa: E402


class Sdpa(nn.Module):
    def __init__(self, causal: bool, scale=None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale) * 2.0


def _heads(p):
    return [g.head for g in p.groups if g.head is not None]


def test_encoder_layer_attention_is_one_node_reading_the_qkv_slices():
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    p = fusion.plan(*capture(layer, torch.randn(2, 9, 64)), "cpu")
    (att,) = [h for h in _heads(p) if h.op == "attention"]
    assert att.args["heads_last"] and att.args["scale"] == 1 / 16 ** 0.5 and not att.args["causal"]
    assert not [h for h in _heads(p) if h.op in ("matmul", "softmax", "bmm")]
    assert any("linear, attention, layer_norm" in n for n in p.notes)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_becomes_the_fused_node_causal_or_not(causal):
    q = torch.randn(2, 3, 17, 16)
    p = fusion.plan(*capture(Sdpa(causal, 0.3), q, q, q), "cpu")
    (att,) = [h for h in _heads(p) if h.op == "attention"]
    assert att.args["causal"] is causal and att.args["scale"] == 0.3 and not att.args["heads_last"]


def test_sdpa_with_a_mask_stays_torch_with_the_reason():
    class Masked(nn.Module):
        def forward(self, q, k, v, m):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    q = torch.randn(1, 2, 5, 8)
    p = fusion.plan(*capture(Masked(), q, q, q, torch.zeros(5, 5)), "cpu")
    assert "scaled_dot_product_attention with a mask, dropout or enable_gqa stays torch" in p.torch.values()
    assert not [h for h in _heads(p) if h.op == "attention"]


def test_head_dims_over_128_stay_torch():
    q = torch.randn(1, 2, 5, 160)
    p = fusion.plan(*capture(Sdpa(False), q, q, q), "cpu")
    assert "attention with head dim 160 (cuopjit takes up to 128) or no keys" in p.torch.values()


# --- GPU ---------------------------------------------------------------------------------------------------
def _compiled_vs_float64(model, inputs, tf32_on):
    model = model.cuda().eval()
    inputs = [x.cuda() for x in inputs]
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(*(x.double() for x in inputs))
        with tf32(tf32_on):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="cuopjit")
            compiled(*inputs)
            got = compiled(*inputs)
            eager = model(*inputs)
    err, base = (rel_error(t.double().cpu().numpy(), ref.cpu().numpy()) for t in (got, eager))
    print(f"rel error vs float64: cuopjit {err:.2e}, torch eager {base:.2e}")
    where = {e.target.split(".")[-1]: e.where for e in ct.last_report().entries}
    return err, base, where


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-5), (True, 5e-3)], ids=["fp32", "tf32"])
def test_encoder_layer_768_matches_eager_with_the_fused_attention(tf32_on, tol):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
    err, base, where = _compiled_vs_float64(layer, [torch.randn(2, 65, 768)], tf32_on)
    assert err < tol and err < 4 * base + 1e-6
    assert where.get("attention") == "cuopjit" and "softmax" not in where and "matmul" not in where
    assert any("AttentionFloat" in k for k in map(str, ct.last_report().kernels))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-5), (True, 5e-3)], ids=["fp32", "tf32"])
def test_sdpa_matches_eager(causal, tf32_on, tol):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 33, 40), torch.randn(2, 3, 70, 40), torch.randn(2, 3, 70, 40)
    err, _, where = _compiled_vs_float64(Sdpa(causal), [q, k, v], tf32_on)
    assert err < tol and where.get("attention") == "cuopjit"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_library_op_matches_sdpa(causal):
    q, k, v = (torch.randn(2, 3, n, 64, device="cuda", dtype=torch.float64) for n in (33, 257, 257))
    got = torch.ops.cuopjit.attention(q, k, v, None, causal)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert (got - want).abs().max().item() < 1e-12
    q32 = q.float().transpose(1, 2).contiguous().transpose(1, 2)     # non-contiguous: copied by the op
    got32 = torch.ops.cuopjit.attention(q32, k.float(), v.float(), scale=0.2, causal=causal)
    want32 = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.2)
    assert (got32.double() - want32).abs().max().item() < 1e-5
