"""cuopjit.torch: torch.library ops with fake implementations (CPU: meta tensors) and, on a GPU, results against
float64 references, torch.compile(fullgraph=True) and CUDA-graph capture equal to eager (the product ops
conv2d / linear / matmul / bmm / gemv included)."""
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
    ("attention", lambda t: (t(2, 3, 33, 16), t(2, 3, 41, 16), t(2, 3, 41, 16)), (2, 3, 33, 16)),
]
# the products: (op, args, output shape, K: the length of each dot product, for the tolerance)
PRODUCTS = [
    ("linear", lambda t: (t(5, 7, 33), t(17, 33), t(17)), (5, 7, 17), 33),
    ("linear", lambda t: (t(9, 64), t(40, 64)), (9, 40), 64),
    ("matmul", lambda t: (t(3, 1, 9, 33), t(4, 33, 7)), (3, 4, 9, 7), 33),
    ("matmul", lambda t: (t(33), t(2, 33, 5)), (2, 5), 33),
    ("matmul", lambda t: (t(6, 33), t(33)), (6,), 33),
    ("bmm", lambda t: (t(4, 9, 33), t(4, 33, 17)), (4, 9, 17), 33),
    ("gemv", lambda t: (t(65, 33), t(33)), (65,), 33),
    ("gemv", lambda t: (t(65, 33), t(65), True), (33,), 65),
    ("conv2d", lambda t: (t(2, 6, 11, 13), t(8, 3, 3, 3), t(8), [2, 1], [1, 2], [1, 2], 2), (2, 8, 6, 13), 27),
    ("conv2d", lambda t: (t(1, 3, 9, 9), t(4, 3, 1, 1)), (1, 4, 9, 9), 3),
]


def test_every_registered_op_has_a_case():
    assert sorted(ct.OPS) == sorted({op for op, _, _ in CASES} | {op for op, *_ in PRODUCTS})


@pytest.mark.parametrize("op, make, shape", CASES + [p[:3] for p in PRODUCTS],
                         ids=[c[0] for c in CASES + PRODUCTS])
def test_fake_implementation_gives_the_output_shape(op, make, shape):
    out = getattr(torch.ops.cuopjit, op)(*make(meta))
    assert out.device.type == "meta" and tuple(out.shape) == shape and out.dtype == torch.float32


@pytest.mark.parametrize("op, make, shape, k", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_product_fakes_match_torch_shapes(op, make, shape, k):
    """Each product's output shape is the one the torch op it replaces gives (checked on meta tensors)."""
    F = torch.nn.functional
    args = make(meta)
    ref = {"linear": lambda: F.linear(*args), "matmul": lambda: torch.matmul(*args), "bmm": lambda: torch.bmm(*args),
           "gemv": lambda: torch.mv(args[0].t() if args[2:] and args[2] else args[0], args[1]),
           "conv2d": lambda: F.conv2d(*args)}[op]()
    assert tuple(ref.shape) == shape


@pytest.mark.parametrize("op, make, shape", CASES[:3] + CASES[6:8] + [p[:3] for p in PRODUCTS[::2]],
                         ids=lambda c: c if isinstance(c, str) else "")
def test_opcheck_on_meta(op, make, shape):
    result = torch.library.opcheck(getattr(torch.ops.cuopjit, op).default, make(meta),
                                   test_utils=("test_schema", "test_faketensor"))
    assert set(result.values()) == {"SUCCESS"}


HALVES = [torch.float16, torch.bfloat16]


def _has_kernels(op, dtype):
    """Whether cuopjit::<op>'s operator family has kernels of `dtype` (16-bit: GEMM, pools, ...; conv2d later)."""
    family = ct.OPS[op].family
    return ct.common.operator_class(family, dtype) is not None


@pytest.mark.parametrize("dtype", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op, make, shape", CASES + [p[:3] for p in PRODUCTS],
                         ids=[c[0] for c in CASES + PRODUCTS])
def test_fake_implementation_keeps_16_bit_dtypes(op, make, shape, dtype):
    if not _has_kernels(op, dtype):
        with pytest.raises(TypeError, match=rf"cuopjit::{op}: x is {dtype} and cuopjit has no "):
            getattr(torch.ops.cuopjit, op)(*make(lambda *s: meta(*s, dtype=dtype)))
        return
    out = getattr(torch.ops.cuopjit, op)(*make(lambda *s: meta(*s, dtype=dtype)))
    assert tuple(out.shape) == shape and out.dtype == dtype


def test_other_dtypes_and_mixed_dtypes_are_refused():
    with pytest.raises(TypeError, match=r"cuopjit::relu: x is torch.int32, which is not supported: cuopjit ops take "
                                        r"float32, float64, float16 or bfloat16 tensors"):
        torch.ops.cuopjit.relu(meta(4, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"cuopjit::linear: x is torch.float16 and weight is torch.float32: pass "
                                        r"tensors of one dtype"):
        torch.ops.cuopjit.linear(meta(3, 8, dtype=torch.float16), meta(4, 8))
    with pytest.raises(TypeError, match=r"cuopjit::layer_norm: x is torch.bfloat16 and bias is torch.float16"):
        torch.ops.cuopjit.layer_norm(meta(3, 8, dtype=torch.bfloat16), [8], meta(8, dtype=torch.bfloat16),
                                     meta(8, dtype=torch.float16))


def mlp(x, w1, g, b, w2):
    h = torch.ops.cuopjit.relu(torch.ops.cuopjit.gemm(x, w1))
    h = torch.ops.cuopjit.layer_norm(h, [h.shape[-1]], g, b)
    return torch.ops.cuopjit.softmax(torch.ops.cuopjit.gemm(h, w2), -1)


def convnet(x, w, b, lw, lb, v):
    """conv2d -> relu -> flatten -> linear -> bmm with itself -> matmul -> gemv: every product op once."""
    ops = torch.ops.cuopjit
    h = ops.relu(ops.conv2d(x, w, b, [1, 1], [1, 1]))
    h = ops.linear(h.flatten(1), lw, lb)                   # [n, 16]
    h = ops.bmm(h.unsqueeze(0), h.t().unsqueeze(0))[0]     # [n, n]
    h = ops.matmul(h, h)
    return ops.gemv(h, v)


CONVNET = ((4, 3, 8, 8), (5, 3, 3, 3), (5,), (16, 320), (16,), (4,))


@pytest.mark.parametrize("model, shapes", [(mlp, ((8, 16), (16, 32), (32,), (32,), (32, 10))), (convnet, CONVNET)],
                         ids=["mlp", "convnet"])
def test_a_model_traces_with_no_graph_break(model, shapes):
    args = tuple(meta(*s) for s in shapes)
    explained = torch._dynamo.explain(model)(*args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    eager_shape = tuple(model(*args).shape)
    assert tuple(torch.compile(model, fullgraph=True, backend="eager")(*args).shape) == eager_shape


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
            "global_avg_pool2d": lambda: a[0].mean((2, 3), keepdim=True),
            "attention": lambda: F.scaled_dot_product_attention(a[0], a[1], a[2])}[op]()


EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}   # unit roundoff


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op, make, shape", CASES, ids=[c[0] for c in CASES])
def test_results_match_float64(op, make, shape, dtype):
    td = getattr(torch, dtype)
    if not _has_kernels(op, td):
        pytest.skip(f"no {dtype} kernels for {op}")
    gen = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = make(lambda *s: torch.randn(*s, device="cuda", dtype=td, generator=gen))
    out = getattr(torch.ops.cuopjit, op)(*args)
    ref = _reference(op, args)
    eps = EPS[dtype]
    length = max(args[0].shape[-1], 8)
    err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-300))
    assert tuple(out.shape) == shape and err <= 8 * length * eps, (op, err)


def _product_reference(op, args):
    a = [x.double() if isinstance(x, torch.Tensor) else x for x in args]
    F = torch.nn.functional
    return {"linear": lambda: F.linear(*a), "matmul": lambda: torch.matmul(*a), "bmm": lambda: torch.bmm(*a),
            "gemv": lambda: torch.mv(a[0].t() if a[2:] and a[2] else a[0], a[1]),
            "conv2d": lambda: F.conv2d(*a)}[op]()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op, make, shape, k", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_products_match_float64(op, make, shape, k, dtype):
    td = getattr(torch, dtype)
    if not _has_kernels(op, td):
        pytest.skip(f"no {dtype} kernels for {op}")
    gen = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = make(lambda *s: torch.randn(*s, device="cuda", dtype=td, generator=gen))
    out = getattr(torch.ops.cuopjit, op)(*args)
    again = getattr(torch.ops.cuopjit, op)(*args)          # warm: the held weight, the memoised plan
    ref = _product_reference(op, args)
    eps = EPS[dtype]
    err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-300))
    assert tuple(out.shape) == shape and err <= 4 * k * eps, (op, err)
    torch.testing.assert_close(again, out, rtol=0, atol=0)


@pytest.mark.gpu
def test_a_new_weight_tensor_is_picked_up():
    """linear holds its weight until another tensor (or the same one resized) comes: never a stale one."""
    x = torch.randn(8, 32, device="cuda")
    w1, w2 = torch.randn(16, 32, device="cuda"), torch.randn(16, 32, device="cuda")
    torch.testing.assert_close(torch.ops.cuopjit.linear(x, w1), x @ w1.t())
    torch.testing.assert_close(torch.ops.cuopjit.linear(x, w2), x @ w2.t())
    w1.copy_(w2)                                            # same tensor, new values: read at every call
    torch.testing.assert_close(torch.ops.cuopjit.linear(x, w1), x @ w2.t())


@pytest.mark.gpu
def test_convnet_compiles_and_captures():
    g = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    args = [torch.randn(*s, device="cuda", generator=g) * 0.1 for s in CONVNET]
    eager = convnet(*args)
    torch.testing.assert_close(torch.compile(convnet, fullgraph=True, backend="aot_eager")(*args), eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = convnet(*args)
    for _ in range(2):
        args[0].copy_(torch.randn(*CONVNET[0], device="cuda", generator=g))
        graph.replay()
        torch.testing.assert_close(captured, convnet(*args), rtol=0, atol=0)


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
    torch.ops.cuopjit.relu(x)     # compiled and prepared first: a first call's NVRTC time would outlast the sleep
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)    # keep the side stream busy: an op on another stream would finish first
        y = torch.ops.cuopjit.relu(x)
        done = torch.cuda.Event()
        done.record(s)
    assert not done.query()
    s.synchronize()
    torch.testing.assert_close(y, torch.relu(x), rtol=0, atol=0)


@pytest.mark.gpu
def test_a_weight_written_in_place_is_read_again():
    """conv2d packs its weight once per set_weight: an in-place write (an optimizer step keeps data_ptr) must
    still reach the next call (torch's _version), for conv2d and for linear."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 8, 9, 9, device="cuda", generator=g, dtype=torch.float64)
    w = torch.randn(16, 8, 3, 3, device="cuda", generator=g, dtype=torch.float64)
    first = torch.ops.cuopjit.conv2d(x, w)
    torch.testing.assert_close(first, torch.nn.functional.conv2d(x, w))
    with torch.no_grad():
        w.mul_(-2.0)
    torch.testing.assert_close(torch.ops.cuopjit.conv2d(x, w), torch.nn.functional.conv2d(x, w))
    a, lw = torch.randn(5, 8, device="cuda", dtype=torch.float64), torch.randn(3, 8, device="cuda", dtype=torch.float64)
    torch.ops.cuopjit.linear(a, lw)
    lw.add_(1.0)
    torch.testing.assert_close(torch.ops.cuopjit.linear(a, lw), a @ lw.T)
