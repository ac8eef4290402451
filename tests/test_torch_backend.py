"""The torch.compile backend "cuopjit" (cuopjit.torch.backend).

CPU: the fusion pass over Dynamo's and symbolic_trace's FX graphs (which nodes fuse into which kernels, which
stay torch and why), the programs it writes (evaluated by cuopjit.expr against torch), the inference-only rule,
and the rewritten graph run with reference operators (torch heads, NumPy-evaluated programs) standing in for
the kernels, against eager. GPU: torchvision resnet18 and nn.TransformerEncoderLayer in float32 and TF32
against float64 eager, a graph with an unsupported op, CUDA-graph replay and `explain`.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cuopjit.expr import evaluate, evaluate_program, parse_epilogue, parse_program  # noqa: E402
from cuopjit.torch import backend, fused_attention, fusion, heads, kernels, program  # noqa: E402
from conftest import rel_error  # noqa: E402
from torch_support import capture, tf32  # noqa: E402


class Block(nn.Module):
    """A ResNet basic block with a downsampling shortcut, and a head: the patterns of resnet18."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, 2 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * c)
        self.conv2, self.bn2 = nn.Conv2d(2 * c, 2 * c, 3, 1, 1, bias=False), nn.BatchNorm2d(2 * c)
        self.down = nn.Sequential(nn.Conv2d(c, 2 * c, 1, 2, bias=False), nn.BatchNorm2d(2 * c))
        self.fc = nn.Linear(2 * c, 5)
        for bn in (self.bn1, self.bn2, self.down[1]):
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 2)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        out += self.down(x)
        out = F.relu(out)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def planned(model, *inputs):
    gm, ex = capture(model, *inputs)
    return fusion.plan(gm, ex, "cpu")


def groups_of(p):
    """[(kind, node names, program text or None)] of a plan."""
    return [(g.kind, [n.name for n in g.nodes], getattr(program.render(g, p.ctx), "text", None)) for g in p.groups]


# --- the fusion pass (CPU) --------------------------------------------------------------------------------
def test_resnet_block_folds_batchnorm_fuses_relu_and_runs_the_residual_as_one_program():
    p = planned(Block().eval(), torch.randn(2, 8, 9, 9))
    kinds = [(k, len(nodes), text) for k, nodes, text in groups_of(p)]
    assert kinds == [("conv2d", 3, None),                            # conv1 + bn1 + relu_
                     ("conv2d", 4, "out = relu((y + x0))"),          # conv2 + bn2 + (+= shortcut) + relu
                     ("conv2d", 2, None),                            # the shortcut's conv + bn
                     ("adaptive_avg_pool2d", 1, None),
                     ("linear", 1, "out = (y + k0)")]
    convs = [g for g in p.groups if g.kind == "conv2d"]
    assert [g.batch_norm is not None for g in convs] == [True, True, True]
    assert [g.relu for g in convs] == [True, False, False]
    assert any("batch_norm" in f for f in convs[0].fusions) and any("relu" in f for f in convs[0].fusions)
    assert list(p.torch.values()) == ["a view: stays torch (no copy)"]     # flatten


def test_symbolic_trace_modules_are_read_as_their_functions():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                          nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(4, 3), nn.GELU(),
                          nn.LayerNorm(3), nn.Softmax(-1)).eval()
    gm = torch.fx.symbolic_trace(model)
    p = fusion.plan(gm, [torch.randn(2, 3, 8, 8)], "cpu")
    assert [(k, len(n), t) for k, n, t in groups_of(p)] == [
        ("conv2d", 3, None), ("max_pool2d", 1, None), ("avg_pool2d", 1, None), ("adaptive_avg_pool2d", 1, None),
        ("linear", 2, "out = gelu((y + k0))"), ("layer_norm", 1, None), ("softmax", 1, None)]
    assert list(p.torch.values()) == ["a view: stays torch (no copy)"]


def test_a_run_of_elementwise_nodes_is_one_program_that_computes_what_torch_does():
    def f(x, s, b):
        return torch.sigmoid(x * 2 + s) - F.gelu(x, approximate="tanh") * 0.5 + torch.add(b, x, alpha=-3) / 4

    x, s, b = torch.randn(3, 4, 5), torch.randn(4, 1), torch.randn(5)
    p = planned(f, x, s, b)
    [(kind, nodes, text)] = groups_of(p)
    assert kind == "elementwise" and len(nodes) == 9 and not p.torch
    prog = program.render(p.groups[0], p.ctx)
    env = {name: {"l_x_": x, "l_s_": s, "l_b_": b}[node.name].double().numpy() for name, node in prog.runtime}
    got = evaluate_program(parse_program(text), env)["out"]
    np.testing.assert_allclose(got, f(x.double(), s.double(), b.double()).numpy(), rtol=1e-12, atol=1e-12)


def test_unsupported_ops_and_other_dtypes_stay_torch_with_a_reason():
    def f(x, h):
        return torch.cumsum(x, 0).relu(), torch.neg(h), F.softmax(x, -1, dtype=torch.float64)

    p = planned(f, torch.randn(4, 4), torch.arange(16).view(4, 4))
    why = {n.name: w for n, w in p.torch.items()}
    assert why["cumsum"] == "cumsum is not run by cuopjit"
    assert why["neg"] == "neg on int64 (cuopjit runs float32, float64, float16 and bfloat16)"
    assert why["softmax"] == ("softmax's input is float32 on cpu, its output float64 on cpu (cuopjit takes one dtype "
                              "and device)")
    assert groups_of(p) == [("elementwise", ["relu"], "out = relu(x0)")]


def test_in_place_ops_on_inputs_stay_torch_and_writes_block_merges_across_them():
    def f(x, y):
        a = y + 1
        x.mul_(2)             # writes into an input: stays torch, and nothing is moved past it
        return torch.relu(a), x.relu_()

    p = planned(f, torch.randn(5), torch.randn(5))
    why = {n.name: w for n, w in p.torch.items()}
    assert "in-place mul on a tensor other nodes see" in why.values()
    assert "in-place relu on a tensor other nodes see" in why.values()
    assert [len(nodes) for _, nodes, _ in groups_of(p)] == [1, 1]     # add and relu: not merged across mul_


def test_transformer_encoder_layer_is_written_out_in_primitives():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    gm, ex = capture(layer, torch.randn(2, 5, 32))
    assert any("_transformer_encoder_layer_fwd" in str(n.target) for n in gm.graph.nodes)
    p = fusion.plan(gm, ex, "cpu")
    assert any("TransformerEncoderLayer written out" in n for n in p.notes)
    groups = groups_of(p)
    kinds = [k for k, _, _ in groups]
    assert kinds.count("linear") == 4 and kinds.count("attention") == 1 and kinds.count("layer_norm") == 2
    assert "softmax" not in kinds and "matmul" not in kinds and "elementwise" not in kinds
    assert set(p.torch.values()) == {"a view: stays torch (no copy)"}


def test_training_graphs_and_cpu_graphs_run_on_torch_and_say_why():
    x = torch.randn(2, 8, 9, 9)
    with torch.no_grad():
        assert backend.training(*capture(Block().train(), x)).endswith(
            "(batch_norm) is in training mode: call model.eval() to use cuopjit")
        symbolic = torch.fx.symbolic_trace(nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU()))
        assert backend.training(symbolic, [x]) == "module 0 is in training mode: call model.eval() to use cuopjit"
        gm, ex = capture(Block().eval(), x)
        assert backend.compile_graph(gm, ex) == gm.forward
    assert "torch.no_grad()" in backend.training(gm, ex)
    report = ct.last_report()
    assert report.fallback == "no input is a CUDA tensor" and not report.on_cuopjit and report.on_torch
    with pytest.raises(ValueError, match="unknown option.s. cuda_graph; the options are cuda_graphs, tf32"):
        backend.compile_graph(gm, ex, {"cuda_graph": True})


def test_compiling_on_cpu_with_an_unsupported_op_gives_eager_results():
    model = Block().eval()
    x = torch.randn(2, 8, 9, 9)
    torch._dynamo.reset()
    with torch.no_grad():
        assert torch.equal(torch.compile(model, backend="cuopjit")(x), model(x))


# --- the rewritten graph with reference operators (CPU) ------------------------------------------------------
class _Epilogue:
    """set_epilogue as the product operators take it: the expression evaluated in float64 (cuopjit.expr) over
    acc and the operands, bound or passed to forward; a 1-D operand of a convolution is per channel."""
    expr, bound, channels = None, {}, False

    def set_epilogue(self, text, **bound):
        self.expr, self.bound = parse_epilogue(text), bound
        self.relu, self.b = False, None

    def store(self, out, acc, operands):
        if self.expr is None:
            assert not operands
            return out.copy_(acc)
        env = {"acc": acc.double().numpy()}
        for name, v in {**self.bound, **operands}.items():
            v = v.double().numpy()
            env[name] = v.reshape(-1, 1, 1) if self.channels and v.ndim == 1 else v
        out.copy_(torch.from_numpy(evaluate(self.expr, env)))


class _Ref:
    """Reference operators with cuopjit's constructors and forward signatures, on CPU tensors."""

    class Conv(_Epilogue):
        channels = True

        def __init__(self, cin, cout, kh, kw, sh, sw, dh, dw, groups, relu, ph, pw):
            self.args, self.relu, self.b = ((sh, sw), (ph, pw), (dh, dw), groups), relu, None

        def set_weight(self, w):
            self.w = w

        def set_bias(self, b):
            self.b = b

        def forward(self, x, y, stream=None, **operands):
            r = F.conv2d(x, self.w, self.b, *self.args)
            self.store(y, r.relu() if self.relu else r, operands)

    class Gemm(_Epilogue):
        def __init__(self, trans_a, trans_b, alpha, beta):
            assert (trans_a, trans_b, alpha, beta) == (False, True, 1.0, 0.0)

        def set_weight(self, w):
            self.w = w

        def forward(self, a, c, stream=None, **operands):
            self.store(c, a @ self.w.T, operands)

    class MatMul(_Epilogue):
        def forward(self, a, b, c, stream=None, **operands):
            self.store(c, torch.matmul(a, b), operands)

    class Softmax:
        def forward(self, x, y, axis, stream=None):
            y.copy_(torch.softmax(x, axis))

    class LayerNorm:
        def __init__(self, eps):
            self.eps = eps

        def set_gamma(self, g):
            self.g = g

        def set_beta(self, b):
            self.b = b

        def forward(self, x, y, stream=None):
            y.copy_(F.layer_norm(x, self.g.shape, self.g, self.b, self.eps))

    class Pool:
        def __init__(self, kh, kw, sh, sw, ph, pw, fn):
            self.fn, self.args = fn, ((kh, kw), (sh, sw), (ph, pw))

        def forward(self, x, y, stream=None):
            y.copy_(self.fn(x, *self.args))

    class Elementwise:
        def __init__(self, text):
            self.program = parse_program(text)

        def forward(self, stream=None, out=None, **operands):
            env = {k: v.double().numpy() if isinstance(v, torch.Tensor) else v for k, v in operands.items()}
            out.copy_(torch.from_numpy(evaluate_program(self.program, env)["out"]))

    @classmethod
    def make(cls, family, dtype, *settings):
        """heads / kernels.make_operator's stand-in: the reference operator of `family` (any dtype)."""
        return {"conv2d": cls.Conv, "gemm": cls.Gemm, "matmul": cls.MatMul, "batchmatmul": cls.MatMul,
                "softmax": cls.Softmax, "layernorm": cls.LayerNorm,
                "maxpool2d": lambda *a: cls.Pool(*a, F.max_pool2d), "avgpool2d": lambda *a: cls.Pool(*a, F.avg_pool2d),
                "globalavgpool2d": lambda: cls.Pool(1, 1, 1, 1, 0, 0, lambda x, *_: x.mean((2, 3), True)),
                "elementwise": cls.Elementwise}[family](*settings)


def reference_operators(monkeypatch) -> None:
    """The backend's heads and elementwise tails built on _Ref's operators (CPU tensors)."""
    monkeypatch.setattr(kernels, "make_operator", _Ref.make)
    monkeypatch.setattr(heads, "make_operator", _Ref.make)


class _RefAttention:
    """fused_attention.Runner's stand-in on CPU tensors: torch's SDPA."""

    def __init__(self, dtype, tensor_cores, heads_last):
        self.op, self.heads_last = self, heads_last

    def forward(self, q, k, v, out, stream=None, scale=None, causal=False):
        r = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        out.copy_(r.transpose(1, 2) if self.heads_last else r)


def _models():
    yield "block", Block().eval(), torch.randn(2, 8, 9, 9)
    yield "encoder", nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval(), torch.randn(2, 5, 32)
    yield "unsupported", nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardswish(), nn.ReLU(), nn.Flatten(),
                                       nn.Linear(4 * 5 * 5, 3)).eval(), torch.randn(1, 3, 7, 7)
    tv = pytest.importorskip("torchvision")
    yield "resnet18", tv.models.resnet18().eval(), torch.randn(1, 3, 64, 64)


@pytest.mark.parametrize("name", ["block", "encoder", "unsupported", "resnet18"])
def test_rewritten_graph_with_reference_operators_equals_eager(name, monkeypatch):
    _, model, x = next(m for m in _models() if m[0] == name)
    reference_operators(monkeypatch)
    monkeypatch.setattr(fused_attention, "Runner", _RefAttention)
    gm, ex = capture(model, x)
    p = fusion.plan(gm, ex, "cpu")
    report = ct.report.new_report({})
    backend.rewrite(p, heads.Launch(), {"conv": False, "matmul": False}, report)
    assert sum(callable(n.target) and type(n.target) is kernels.Kernel for n in gm.graph.nodes) == len(p.groups)
    with torch.no_grad():
        got, want = gm(*ex)[0], model(x)
    assert rel_error(got.numpy(), want.numpy()) < 1e-5
    assert report.on_cuopjit and len(report.kernels) == len(p.groups)
    if name == "unsupported":
        assert "hardswish is not run by cuopjit" in report.on_torch.values()
        assert "Elementwise('out = relu(x0)')" in str(report)   # the reference operator's class name


# --- GPU: real kernels against float64 eager ---------------------------------------------------------------
def _against_float64(model, x, tf32_on: bool, **options):
    """(our relative error, torch eager's at the same precision) against float64 eager, on the GPU."""
    model = model.cuda().eval()
    x = x.cuda()
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
        with tf32(tf32_on):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend="cuopjit", options=options or None)
            got = compiled(x)
            got = compiled(x)
            eager = model(x)
    err, base = (rel_error(t.double().cpu().numpy(), ref.cpu().numpy()) for t in (got, eager))
    print(f"rel error vs float64: cuopjit {err:.2e}, torch eager {base:.2e}")
    return err, base


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-4), (True, 3e-2)], ids=["fp32", "tf32"])
def test_resnet18_matches_float64_eager(tf32_on, tol):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    err, _ = _against_float64(tv.models.resnet18(), torch.randn(1, 3, 224, 224), tf32_on)
    assert err < tol
    report = ct.last_report()
    assert report.fallback is None and len(report.on_cuopjit) > 50
    assert sum("batch_norm" in f for f in report.fusions) == 20


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-4), (True, 3e-2)], ids=["fp32", "tf32"])
def test_transformer_encoder_layer_matches_float64_eager(tf32_on, tol):
    torch.manual_seed(0)
    err, _ = _against_float64(nn.TransformerEncoderLayer(256, 4, 512, batch_first=True), torch.randn(4, 33, 256),
                              tf32_on)
    assert err < tol
    assert {"linear", "attention", "layer_norm"} <= {e.target.split(".")[-1] for e in ct.last_report().entries
                                                   if e.where == "cuopjit"}


@pytest.mark.gpu
def test_graph_with_an_unsupported_op_matches_and_cuda_graphs_replay():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Hardswish(), nn.Conv2d(16, 8, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    err, _ = _against_float64(model, torch.randn(2, 3, 17, 19), False)
    assert err < 1e-4 and "hardswish is not run by cuopjit" in ct.last_report().on_torch.values()
    model = model.cuda().eval()
    with torch.no_grad(), tf32(False):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="cuopjit", options={"cuda_graphs": True})
        for _ in range(4):
            x = torch.randn(2, 3, 17, 19, device="cuda")
            assert rel_error(compiled(x).double().cpu().numpy(), model(x).double().cpu().numpy()) < 1e-5
    assert "cuda_graphs: captured on the second call, replayed after" in ct.last_report().notes


@pytest.mark.gpu
def test_explain_lists_kernels_fusions_and_torch_nodes():
    model = Block().cuda().eval()
    out = ct.explain(model, torch.randn(2, 8, 9, 9, device="cuda"), tf32=False)
    text = str(out)
    assert "Convolution2DFloat(relu)" in text and "fusion: conv2d + batch_norm" in text
    assert out.on_torch == {"flatten": "a view: stays torch (no copy)"}
    assert len(out.fusions) == 8   # 6 merges, and the residual join and the linear's bias as epilogues
    assert "epilogue: 'relu(((acc + kb) + x0))' where the conv2d stores its output" in out.fusions
