"""The backend's epilogue fusion (cuopjit.torch.epilogues) on CPU: which product tails become the product's
epilogue, which stay an elementwise program and why, and the rewritten graphs (reference operators that
evaluate the epilogue with cuopjit.expr in float64) against eager."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cuopjit.torch import backend, epilogues, fusion, heads  # noqa: E402
from conftest import rel_error  # noqa: E402
from test_torch_backend import Block, capture, reference_operators  # noqa: E402


class Mlp(nn.Module):
    """Linear + GELU, a residual over [batch, tokens, features], a positional table that does not fit, ReLU6."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(8, 16), nn.Linear(16, 8), nn.Linear(16, 8, bias=False)
        self.pos = nn.Parameter(torch.randn(5, 8))

    def forward(self, x):
        h = F.gelu(self.l1(x))
        return F.relu(self.l2(h) + x), self.l3(h) + self.pos, F.relu6(self.l3(h) * 2.0)


class _LinearResidualSilu(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x, r):
        return F.silu(self.l(x) + r)


def _fits(model, xs, tensor_cores):
    """{group kind + first node: Epilogue text or the reason} of the plan's product groups."""
    p = fusion.plan(*capture(model, *xs), "cpu")
    out = {}
    for g in p.groups:
        if g.kind in epilogues.HEADS:
            conv_bias = torch.zeros(p.ctx.constant(g.head.args["weight"]).shape[0]) if g.kind == "conv2d" else None
            e = epilogues.fit(g, p.ctx, tensor_cores, conv_bias)
            out[f"{g.kind} {g.nodes[0].name}"] = e if isinstance(e, str) else e.text
    return out


def test_exact_kernels_take_every_tail_that_fits_as_their_epilogue():
    fits = _fits(Mlp().eval(), [torch.randn(2, 5, 8)], tensor_cores=False)
    assert list(fits.values()) == [
        "gelu((acc + k0))",                           # bias + GELU
        "relu(((acc + k0) + x0))",                    # bias + residual [2, 5, 8] (read as [10, 8]) + ReLU
        "operand 'x0' of shape (5, 8) is neither a row, a column nor the output",
        "clamp((acc * 2.0), 0.0, 6.0)"]               # ReLU6 of a scaled product


def test_tensor_core_kernels_take_only_cheap_epilogues():
    # a float32 linear's TF32 kernel applies a bias + GELU in registers; 16 bits or a residual: cheap ops only
    fits = _fits(Mlp().eval(), [torch.randn(2, 5, 8)], tensor_cores=True)
    assert list(fits.values())[:2] == ["gelu((acc + k0))", "relu(((acc + k0) + x0))"]
    half = _fits(Mlp().eval().to(torch.bfloat16), [torch.randn(2, 5, 8, dtype=torch.bfloat16)], tensor_cores=True)
    assert list(half.values())[:2] == [
        "gelu on a tensor-core kernel costs more in its epilogue than as an elementwise pass",
        "relu(((acc + k0) + x0))"]
    residual = _fits(_LinearResidualSilu().eval(), [torch.randn(4, 8), torch.randn(4, 8)], tensor_cores=True)
    assert list(residual.values()) == [
        "silu on a tensor-core kernel costs more in its epilogue than as an elementwise pass"]
    block = _fits(Block().eval(), [torch.randn(2, 8, 9, 9)], tensor_cores=True)
    assert list(block.values()) == [     # a residual stays out of a tensor-core convolution's epilogue
        "nothing to fuse", "an output-shaped operand in a tensor-core convolution's epilogue is read across its "
        "tile (ResNet-50 at batch 32: 2.8x slower than an elementwise pass)", "nothing to fuse", "(acc + k0)"]


def test_attention_scores_take_the_softmax_scale_and_products_their_bias():
    def f(q, k, v, m, b, a3, w1, r):
        return torch.matmul(q, k.transpose(-2, -1)) * 0.5, torch.matmul(v, m) + b, torch.matmul(a3, w1) + r
    xs = [torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(6, 7), torch.randn(7, 5), torch.randn(5),
          torch.randn(2, 6, 7), torch.randn(7), torch.randn(2, 1)]
    assert list(_fits(f, xs, tensor_cores=True).values()) == [
        "(acc * 0.5)", "(acc + x0)", "operand x0 is a vector and the product's a or b is 1-D"]


@pytest.mark.parametrize("model, x", [(Mlp(), torch.randn(2, 5, 8)), (Block(), torch.randn(2, 8, 9, 9))],
                         ids=["mlp", "block"])
def test_graphs_with_epilogues_compute_what_eager_does(model, x, monkeypatch):
    model = model.eval()
    reference_operators(monkeypatch)
    gm, ex = capture(model, x)
    p = fusion.plan(gm, ex, "cpu")
    report = ct.report.new_report({})
    backend.rewrite(p, heads.Launch(), {"conv": False, "matmul": False}, report)
    with torch.no_grad():
        got, want = gm(*ex), model(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got[0],), (want,))
    for g, w in zip(got, want):
        assert rel_error(g.numpy(), w.numpy()) < 1e-6
    epilogue_kernels = [k for k in report.kernels if "epilogue" in k.name]
    assert epilogue_kernels and all(any(f.startswith("epilogue: ") for f in k.fusions) for k in epilogue_kernels)
    assert not any("Elementwise" in k.name for k in report.kernels if "(x @ Wᵀ)" not in k.name
                   and "Pool" not in k.name)
    if isinstance(model, Mlp):   # the positional table does not fit: the program runs after the GEMM, said so
        assert any("the program runs after the product: operand 'x0' of shape (5, 8)" in n for n in report.notes)


def test_prebuild_samples_are_the_forwards_the_kernels_will_run(monkeypatch):
    """Each kernel's samples plan its operators on the graph's shapes (a linear's as its [rows, k] GEMM, an
    epilogue's run-time operand as the operator reads it)."""
    reference_operators(monkeypatch)
    gm, ex = capture(Mlp().eval(), torch.randn(2, 5, 8))
    p = fusion.plan(gm, ex, "cpu")
    built = backend.rewrite(p, heads.Launch(), {"conv": False, "matmul": False}, ct.report.new_report({}))
    residual = next(k for k in built if "x0" in k.name and "epilogue" in k.name)
    [sample] = residual.samples
    assert sample.args == ((10, 16), (10, 8)) and sample.kwargs["x0"].shape == (10, 8)
    program = next(k for k in built if "Elementwise" in k.name)      # GEMM, then '(y + x0)'
    assert [s.args for s in program.samples] == [((10, 16), (10, 8)), ()]
    assert {n: a.shape for n, a in program.samples[1].kwargs.items()} == {"x0": (5, 8), "y": (2, 5, 8),
                                                                         "out": (2, 5, 8)}
