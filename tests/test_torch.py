"""cuopjit.torch: torch.library ops with fake implementations (CPU: meta tensors) and, on a GPU, results against
float64 references, torch.compile(fullgraph=True) and CUDA-graph capture equal to eager."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("cuopjit.torch")


def meta(*shape, dtype=None):
    return torch.empty(*shape, device="meta", dtype=dtype or torch.float32)


# (op, args on tensors of the given shapes, the output shape)
CASES = [
    ("gemm", lambda t: (t(33, 7), t(7, 1000)), (33, 1000)),
    ("relu", lambda t: (t(4097),), (4097,)),
    ("copy", lambda t: (t(7, 33),), (7, 33)),
    ("scal", lambda t: (t(1000), 0.5), (1000,)),
    ("axpy", lambda t: (t(1000), t(1000), -2.0), (1000,)),
    ("dot", lambda t: (t(4097), t(4097)), ()),
    ("softmax", lambda t: (t(7, 33, 5), 1), (7, 33, 5)),
    ("layer_norm", lambda t: (t(33, 1000), [1000], t(1000), t(1000), 1e-5), (33, 1000)),
    ("batch_norm", lambda t: (t(7, 3, 5, 5), t(3), t(3).abs() + 0.5, t(3), t(3), 1e-5), (7, 3, 5, 5)),
    ("max_pool2d", lambda t: (t(2, 3, 33, 33), [2, 2]), (2, 3, 16, 16)),
    ("avg_pool2d", lambda t: (t(2, 3, 33, 33), [3, 3], [2, 2]), (2, 3, 16, 16)),
    ("global_max_pool2d", lambda t: (t(2, 3, 7, 7),), (2, 3, 1, 1)),
    ("global_avg_pool2d", lambda t: (t(2, 3, 7, 7),), (2, 3, 1, 1)),
]


def test_every_registered_op_has_a_case():
    assert sorted(ct.OPS) == sorted(op for op, _, _ in CASES)


@pytest.mark.parametrize("op, make, shape", CASES, ids=[c[0] for c in CASES])
def test_fake_implementation_gives_the_output_shape(op, make, shape):
    out = getattr(torch.ops.cuopjit, op)(*make(meta))
    assert out.device.type == "meta" and tuple(out.shape) == shape and out.dtype == torch.float32


@pytest.mark.parametrize("op, make, shape", CASES[:3] + CASES[6:8], ids=lambda c: c if isinstance(c, str) else "")
def test_opcheck_on_meta(op, make, shape):
    result = torch.library.opcheck(getattr(torch.ops.cuopjit, op).default, make(meta),
                                   test_utils=("test_schema", "test_faketensor"))
    assert set(result.values()) == {"SUCCESS"}


def test_other_dtypes_are_refused():
    with pytest.raises(TypeError, match=r"cuopjit::relu: torch.float16 is not supported"):
        torch.ops.cuopjit.relu(meta(4, dtype=torch.float16))


def mlp(x, w1, g, b, w2):
    h = torch.ops.cuopjit.relu(torch.ops.cuopjit.gemm(x, w1))
    h = torch.ops.cuopjit.layer_norm(h, [h.shape[-1]], g, b)
    return torch.ops.cuopjit.softmax(torch.ops.cuopjit.gemm(h, w2), -1)


def test_a_model_traces_with_no_graph_break():
    args = (meta(8, 16), meta(16, 32), meta(32), meta(32), meta(32, 10))
    explained = torch._dynamo.explain(mlp)(*args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    assert tuple(torch.compile(mlp, fullgraph=True, backend="eager")(*args).shape) == (8, 10)


# --- GPU ---------------------------------------------------------------------------------------------------
def _reference(op, args):
    a = [x.double() if isinstance(x, torch.Tensor) else x for x in args]
    F = torch.nn.functional
    return {"gemm": lambda: a[0] @ a[1], "relu": lambda: torch.relu(a[0]), "copy": lambda: a[0].clone(),
            "scal": lambda: a[1] * a[0], "axpy": lambda: a[2] * a[0] + a[1], "dot": lambda: torch.dot(a[0], a[1]),
            "softmax": lambda: torch.softmax(a[0], a[1]),
            "layer_norm": lambda: F.layer_norm(a[0], a[1], a[2], a[3], a[4]),
            "batch_norm": lambda: F.batch_norm(a[0], a[1], a[2], a[3], a[4], False, 0.1, a[5]),
            "max_pool2d": lambda: F.max_pool2d(a[0], a[1]), "avg_pool2d": lambda: F.avg_pool2d(a[0], a[1], a[2]),
            "global_max_pool2d": lambda: a[0].amax((2, 3), keepdim=True),
            "global_avg_pool2d": lambda: a[0].mean((2, 3), keepdim=True)}[op]()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op, make, shape", CASES, ids=[c[0] for c in CASES])
def test_results_match_float64(op, make, shape, dtype):
    td = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = make(lambda *s: torch.randn(*s, device="cuda", dtype=td, generator=gen))
    out = getattr(torch.ops.cuopjit, op)(*args)
    ref = _reference(op, args)
    eps = 2.0 ** -23 if dtype == "float32" else 2.0 ** -52
    length = max(args[0].shape[-1], 8)
    err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-300))
    assert tuple(out.shape) == shape and err <= 8 * length * eps, (op, err)


@pytest.mark.gpu
def test_torch_compile_fullgraph_equals_eager():
    g = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = [torch.randn(*s, device="cuda", generator=g) for s in ((33, 64), (64, 128), (128,), (128,), (128, 10))]
    eager = mlp(*args)
    compiled = torch.compile(mlp, fullgraph=True)(*args)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    x, w1, gamma, beta, w2 = (a.double() for a in args)
    h = torch.nn.functional.layer_norm(torch.relu(x @ w1), [128], gamma, beta)
    ref = torch.softmax(h @ w2, -1)
    assert float((eager.double() - ref).norm() / ref.norm()) < 64 * 128 * 2.0 ** -23


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay_equal_eager():
    g = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = [torch.randn(*s, device="cuda", generator=g) for s in ((33, 64), (64, 128), (128,), (128,), (128, 10))]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):       # warm-up: plans and kernels are loaded before the capture
        eager = mlp(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = mlp(*args)
    for _ in range(3):
        args[0].copy_(torch.randn(33, 64, device="cuda", generator=g))
        graph.replay()
        torch.testing.assert_close(captured, mlp(*args), rtol=0, atol=0)
    assert not math.isnan(float(eager.sum()))


@pytest.mark.gpu
def test_ops_run_on_the_current_torch_stream():
    x = torch.randn(1 << 22, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)    # keep the side stream busy: an op on another stream would finish first
        y = torch.ops.cuopjit.relu(x)
        done = torch.cuda.Event()
        done.record(s)
    assert not done.query()
    s.synchronize()
    torch.testing.assert_close(y, torch.relu(x), rtol=0, atol=0)
