"""cuopjit.torch.compile (cuopjit/torch/fast_start.py): a model captured by symbolic tracing, on the backend.

CPU: the traced graph as the backend reads it (an eval TransformerEncoderLayer written as the native call
Dynamo sees), the fallback to Dynamo with its reason, option and argument checks, one compilation per input
signature. GPU: a ResNet block, a model with an unsupported op and a TransformerEncoderLayer against float64
eager, over several calls at new addresses (warm recipes, the attention runner's too).
"""
from __future__ import annotations

import copy
import gc
import logging

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cuopjit.torch import fast_start, fusion, warm  # noqa: E402
from conftest import rel_error  # noqa: E402
from torch_support import tf32  # noqa: E402


class Block(nn.Module):
    """A ResNet basic block and a head, as torchvision writes them (modules, `+=`, flatten)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(c, 5)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 2)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.fc(torch.flatten(self.pool(self.relu(out)), 1))


class Branchy(nn.Module):
    """Python control flow on a tensor's value: symbolic tracing cannot follow it."""

    def forward(self, x):
        return F.relu(x) if x.sum() > 0 else -x


def test_an_eval_encoder_layer_is_the_native_call_the_backend_expands():
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    gm, words = fast_start.trace(layer)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [torch._transformer_encoder_layer_fwd] and "TransformerEncoderLayer" in words
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        assert torch.allclose(gm(x), layer(x), atol=1e-5)
        p = fusion.plan(gm, [x], "cpu")
    assert {g.kind for g in p.groups} >= {"linear", "attention", "layer_norm"}


def test_fake_values_from_parameter_metadata_equal_the_backends_own():
    model = Block().eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 9, 9).contiguous(memory_format=torch.channels_last)
    ours, theirs = torch.fx.symbolic_trace(model), torch.fx.symbolic_trace(model)
    with torch.no_grad():
        fast_start.propagate(ours, [x])
        fusion.propagate(theirs, [x])
    for a, b in zip(ours.graph.nodes, theirs.graph.nodes):
        va, vb = a.meta.get("val"), b.meta.get("val")
        assert (va is None) == (vb is None) and a.name == b.name
        if isinstance(va, torch.Tensor):
            assert (va.shape, va.stride(), va.dtype, va.device) == (vb.shape, vb.stride(), vb.dtype, vb.device)
    assert all(isinstance(p, torch.nn.Parameter) and not isinstance(p, torch._subclasses.FakeTensor)
               for p in model.parameters())


def test_layers_torch_would_not_fuse_stay_modules():
    for layer in (nn.TransformerEncoderLayer(32, 4, 64).eval(),                       # batch second
                  nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)):          # training
        gm = fast_start.trace(nn.Sequential(layer))[0]
        assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "output"]


def test_a_model_tracing_cannot_follow_goes_through_dynamo_and_says_why(caplog):
    torch._dynamo.reset()
    x = torch.randn(3, 4)
    with caplog.at_level(logging.WARNING):
        fast = ct.compile(Branchy().eval(), x)
    assert fast.dynamo is not None and "TraceError" in fast.why_dynamo
    assert "symbolic tracing cannot follow Branchy" in caplog.text and "Dynamo" in caplog.text
    assert torch.equal(fast(x), Branchy()(x))


def test_options_and_models_are_checked():
    with pytest.raises(ValueError, match="unknown option.s. graphs; the options are cuda_graphs, tf32"):
        ct.compile(Block().eval(), options={"graphs": True})
    with pytest.raises(TypeError, match="takes an nn.Module, not function: wrap a function"):
        ct.compile(F.relu)


def test_each_input_signature_compiles_once_and_cpu_graphs_run_on_torch():
    model = Block().eval()
    fast = ct.compile(model)
    assert not fast.graphs
    a, b = torch.randn(2, 8, 9, 9), torch.randn(1, 8, 5, 5)
    with torch.no_grad():
        for x in (a, b, a.clone(), b.clone()):
            assert torch.allclose(fast(x), model(x), atol=1e-6)
    assert len(fast.graphs) == 2 and fast.dynamo is None
    assert ct.last_report().fallback == "no input is a CUDA tensor"


# --- GPU -------------------------------------------------------------------------------------------------
def _check(model, shape, tf32_on: bool, tol: float, calls: int = 4, **options):
    """Several calls at new inputs against float64 eager; the compiled model."""
    model = model.cuda().eval()
    ref_model = copy.deepcopy(model).double()
    with tf32(tf32_on):
        fast = ct.compile(model, torch.randn(shape, device="cuda"), options=options or None)
        for _ in range(calls):
            x = torch.randn(shape, device="cuda")
            with torch.no_grad():
                ref = ref_model(x.double())
            got = fast(x)
            assert not got.requires_grad
            assert rel_error(got.double().cpu().numpy(), ref.cpu().numpy()) < tol
    return fast


def _warm_kinds() -> dict:
    """(operator class, trusted) -> count over the live warm launches."""
    out: dict = {}
    for w in (o for o in gc.get_objects() if type(o) is warm.Warm):
        key = (type(w.op).__name__, w.trusted)
        out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-4), (True, 3e-2)], ids=["fp32", "tf32"])
def test_a_resnet_block_matches_float64_eager(tf32_on, tol):
    torch.manual_seed(0)
    fast = _check(Block(16), (2, 16, 12, 12), tf32_on, tol)
    report = ct.last_report()
    assert fast.dynamo is None and report.fallback is None
    assert sum("batch_norm" in f for f in report.fusions) == 2 and set(report.on_torch) == {"flatten"}


@pytest.mark.gpu
def test_an_unsupported_op_stays_torch_and_cuda_graphs_replay():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Hardswish(), nn.Conv2d(16, 8, 1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    _check(model, (2, 3, 17, 19), False, 1e-4, calls=5, cuda_graphs=True)
    report = ct.last_report()
    assert "nn.Hardswish is not run by cuopjit" in report.on_torch.values()
    assert "cuda_graphs: captured on the second call, replayed after" in report.notes


@pytest.mark.gpu
@pytest.mark.parametrize("tf32_on, tol", [(False, 1e-4), (True, 3e-2)], ids=["fp32", "tf32"])
def test_an_encoder_layer_matches_float64_eager_and_its_attention_launches_warm(tf32_on, tol):
    torch.manual_seed(0)
    gc.collect()
    before = _warm_kinds()
    fast = _check(nn.TransformerEncoderLayer(256, 4, 512, batch_first=True), (4, 33, 256), tf32_on, tol, calls=5)
    assert fast.dynamo is None
    assert {"linear", "attention", "layer_norm"} <= {e.target.split(".")[-1] for e in ct.last_report().entries
                                                   if e.where == "cuopjit"}
    kinds = _warm_kinds()
    assert kinds.get(("AttentionFloat", True), 0) > before.get(("AttentionFloat", True), 0)


NETWORKS = [("resnet50", 2, "tf32", True), ("mobilenet_v2", 1, "fp32", False), ("vit_b_16", 1, "fp32", False)]


@pytest.mark.gpu
@pytest.mark.parametrize("name, batch, precision, channels_last", NETWORKS, ids=[n[0] for n in NETWORKS])
def test_torchvision_networks_trace_and_match_float64_eager(name, batch, precision, channels_last):
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.vit_b_16(image_size=64) if name == "vit_b_16" else getattr(tv.models, name)()
    if name == "vit_b_16":
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)   # it starts at zero: every output would be 0
    model = model.cuda().eval()
    x = torch.randn(batch, 3, 64, 64, device="cuda")
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        ref = copy.deepcopy(model).double()(x.double())
    with tf32(precision == "tf32"):
        fast = ct.compile(model, x)
        got = fast(x)
    assert fast.dynamo is None and ct.last_report().fallback is None
    assert rel_error(got.double().cpu().numpy(), ref.cpu().numpy()) < (3e-2 if precision == "tf32" else 1e-4)
