"""User epilogues on the GPU: every product kernel (SIMT, split-K, the cp.async SIMT kernel, mma.sync TF32, DMMA and
its swap, wgmma TF32 and 3xTF32, batched and mixed-broadcast MatMul, Conv2D direct / implicit GEMM / wgmma) against
float64 NumPy references (cuopjit.expr.evaluate), outputs NaN-poisoned and fenced by guard regions, odd sizes,
operands bound once and passed per call, Python numbers changed between calls without a new plan."""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.config import DEFAULT, RunSettings
from cuopjit.device import driver
from cuopjit.expr import evaluate, parse_epilogue
from cuopjit.listing import plan_of
from cuopjit.ops.gemm import plans as gemm_plans
from cuopjit.recipes import placeholder
from cuopjit.run import executor
from cuopjit.target import of_device

from conftest import check_guards, guarded, make_config, rel_error
from test_conv2d import _reference

pytestmark = pytest.mark.gpu

EVERY = "gelu(acc * s + bias) + r + t * relu(rows)"     # every kind of operand; c unread: outputs stay poisoned
WITH_C = "acc * s + 0.5 * c - bias"                       # reads the output's old value
NUMBERS = ((0.75, 1.5), (-1.25, 0.5))                     # (s, t) of two calls: one plan for both
TOL = {"f32": 5e-5, "tf32": 5e-3, "3xtf32": 5e-5, "f64": 1e-11}


def _values(rng, dtype, names, rows_shape, col_shape, full_shape):
    """numpy operands by name: bias per column, rows per row, r full (float64 copies for the reference)."""
    shapes = {"bias": col_shape, "rows": rows_shape, "r": full_shape}
    return {n: rng.standard_normal(shapes[n]).astype(dtype) for n in names if n in shapes}


def _run(rng, jit, op, expr, call, out_shape, ref_acc, host, bound, dtype, tol, expect, reshape=None):
    """Set the epilogue (operands in `bound` bound, the rest per call), run two calls with other numbers, compare."""
    tensors = {n: cuopjit.tensor(v) for n, v in host.items()}
    op.set_epilogue(expr, **{n: tensors[n] for n in bound})
    per_call = {n: t for n, t in tensors.items() if n not in bound}
    reads_c = "c" in parse_epilogue(expr).names
    settings = jit._current_settings()
    for i, (s, t) in enumerate(NUMBERS):
        old = rng.standard_normal(out_shape).astype(dtype) if reads_c else None
        out = guarded(out_shape, dtype, fill=old)
        numbers = {k: v for k, v in (("s", s), ("t", t)) if k in parse_epilogue(expr).operands}
        assert call(out, {**per_call, **numbers}) is out
        check_guards(out)
        env = {"acc": ref_acc, "c": old, **numbers,
               **{n: (reshape or {}).get(n, lambda v: v)(v.astype(np.float64)) for n, v in host.items()}}
        ref = evaluate(parse_epilogue(expr), env, np.float64)
        got = out.to_numpy()
        name = jit.get_performance_profile().kernel_name
        assert rel_error(got, ref) <= tol, f"{name}: relative error {rel_error(got, ref):.3g}"
        if i == 0:
            plans = len(op.memo(settings))
            assert all(tag in name for tag in expect), name
    assert len(op.memo(settings)) == plans, "a new number re-planned"


GEMMS = [  # (mode, dtype, fields, (m, n, k), trans_b, what the kernel name shows)
    ("f32", np.float32, {}, (33, 65, 47), False, ("gemm_f32_", "_e")),
    ("f32", np.float32, {}, (128, 96, 64), True, ("_nt_v4_e",)),
    ("f32", np.float32, {}, (64, 96, 4096), False, ("_splitk", "splitk_reduce_f32_e")),
    ("tf32", np.float32, {"kernel_type": "tensor_core", "tile_size": 64, "block_size": 128}, (97, 130, 70), False,
     ("tf32_",)),
    ("tf32", np.float32, {"enable_tensor_core": True}, (256, 200, 128), False, ("wgmma", "_nn_e")),
    ("tf32", np.float32, {"enable_tensor_core": True}, (256, 200, 96), True, ("wgmma", "_nt_e")),
    ("3xtf32", np.float32, {"precision": "3xtf32"}, (512, 400, 128), False, ("wgmma", "3xtf32")),
    ("3xtf32", np.float32, {"precision": "3xtf32"}, (511, 403, 129), False, ("3xtf32", "_unaligned_e")),
    ("f64", np.float64, {}, (128, 96, 64), False, ("dmma", "_swap_e")),
    ("f64", np.float64, {}, (33, 65, 47), True, ("dmma",)),
    ("f64", np.float64, {"kernel_type": "tiled"}, (33, 65, 47), False, ("gemm_f64_t",)),
]


@pytest.mark.parametrize("mode, dtype, fields, size, trans_b, expect", GEMMS,
                         ids=[f"{g[0]}-{'x'.join(map(str, g[3]))}-{'nt' if g[4] else 'nn'}-{i}" for i, g in enumerate(GEMMS)])
@pytest.mark.parametrize("expr, bound", [(EVERY, ("bias", "rows")), (WITH_C, ())], ids=["every-kind", "reads-c"])
def test_gemm(rng, mode, dtype, fields, size, trans_b, expect, expr, bound):
    m, n, k = size
    g = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)(trans_b=trans_b, alpha=1.5)
    a = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    g.set_weight(cuopjit.tensor(w))
    jit = (cuopjit.JITGemmFloat if dtype == np.float32 else cuopjit.JITGemmDouble)(g)
    jit.set_jit_config(make_config(**fields))
    acc = 1.5 * a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)
    host = _values(rng, dtype, parse_epilogue(expr).operands, (m, 1), (n,), (m, n))
    A = cuopjit.tensor(a)
    _run(rng, jit, g, expr, lambda out, ops: jit.forward(A, out, **ops), (m, n), acc, host, bound, dtype, TOL[mode],
         expect)


def test_the_cp_async_simt_kernel(rng):
    """The cp.async SIMT kernel (a tuning candidate: both operands k-major) run through its plan."""
    m, n, k = 256, 192, 128
    g = cuopjit.GemmFloat(trans_a=True)
    a, w = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    host = _values(rng, np.float32, ("bias", "rows", "r"), (m, 1), (n,), (m, n))
    g.set_weight(cuopjit.tensor(w))
    g.set_epilogue(EVERY, **{k_: cuopjit.tensor(v) for k_, v in host.items()})
    out, A = guarded((m, n)), cuopjit.tensor(a)
    problem = g.problem(A, out, s=0.5, t=2.0)
    target = of_device(driver.current_ordinal())
    choice = next(c for c in gemm_plans.choices(problem, make_config().snapshot(), target)
                  if not c.shape.mma and c.stages > 1)
    run = executor.load(gemm_plans.plan(problem, choice, target), driver.current_ordinal(), DEFAULT)
    run(g.bind(A, out, s=0.5, t=2.0)[1], 0)
    check_guards(out)
    env = {"acc": a.T.astype(np.float64) @ w.astype(np.float64), "s": 0.5, "t": 2.0,
           **{k_: v.astype(np.float64) for k_, v in host.items()}}
    assert rel_error(out.to_numpy(), evaluate(parse_epilogue(EVERY), env)) <= TOL["f32"]


BATCHES = [("f32", np.float32, {}, (4, 33, 65, 47), False, ("_batched_e",)),
           ("f32", np.float32, {}, (5, 64, 64, 32), True, ("_batched_e",)),
           ("tf32", np.float32, {"enable_tensor_core": True}, (3, 128, 96, 64), False, ("wgmma", "_batched_e")),
           ("f64", np.float64, {}, (3, 64, 32, 48), False, ("dmma", "_swap_batched_e")),
           ("f64", np.float64, {}, (7, 33, 33, 33), False, ("_batched_e",))]


@pytest.mark.parametrize("mode, dtype, fields, size, broadcast_b, expect", BATCHES,
                         ids=[f"{b[0]}-{'x'.join(map(str, b[3]))}{'-bcast' if b[4] else ''}" for b in BATCHES])
def test_batched(rng, mode, dtype, fields, size, broadcast_b, expect):
    bsz, m, n, k = size
    op = (cuopjit.BatchMatMulFloat if dtype == np.float32 else cuopjit.BatchMatMulDouble)()
    jit = (cuopjit.JITBatchMatMulFloat if dtype == np.float32 else cuopjit.JITBatchMatMulDouble)(op)
    jit.set_jit_config(make_config(**fields))
    a = rng.standard_normal((bsz, m, k)).astype(dtype)
    b = rng.standard_normal((1 if broadcast_b else bsz, k, n)).astype(dtype)
    acc = a.astype(np.float64) @ b.astype(np.float64)
    host = _values(rng, dtype, ("bias", "rows", "r"), (bsz, m, 1), (n,), (bsz, m, n))
    A, B = cuopjit.tensor(a), cuopjit.tensor(b)
    _run(rng, jit, op, EVERY, lambda out, ops: jit.forward(A, B, out, **ops), (bsz, m, n), acc, host, ("rows",),
         dtype, TOL[mode], expect)


def test_mixed_broadcast_matmul_moves_the_operands_with_each_launch(rng):
    op = cuopjit.MatMulFloat()
    jit = cuopjit.JITMatMulFloat(op)
    a, b = rng.standard_normal((3, 1, 9, 16)).astype(np.float32), rng.standard_normal((1, 4, 16, 24)).astype(np.float32)
    acc = a.astype(np.float64) @ b.astype(np.float64)
    host = _values(rng, np.float32, ("bias", "rows", "r"), (3, 4, 9, 1), (24,), (3, 4, 9, 24))
    A, B = cuopjit.tensor(a), cuopjit.tensor(b)
    _run(rng, jit, op, EVERY, lambda out, ops: jit.forward(A, B, out, **ops), (3, 4, 9, 24), acc, host, ("bias",),
         np.float32, TOL["f32"], ("_batched_e",))


CONVS = [  # (mode, dtype, fields, (N, C, H, W, K, kh, kw, stride, pad, groups), what the kernel name shows)
    ("f32", np.float32, {}, (2, 8, 9, 11, 8, 3, 3, 1, 1, 8), ("conv2d_direct_", "_e")),
    ("f32", np.float32, {}, (2, 8, 16, 16, 8, 3, 3, 1, 1, 8), ("conv2d_direct_", "_v4")),
    ("f32", np.float32, {}, (2, 5, 9, 11, 33, 3, 3, 1, 1, 1), ("conv2d_f32_", "_e")),
    ("f32", np.float32, {}, (2, 16, 16, 16, 32, 1, 1, 1, 0, 1), ("_v4",)),
    ("tf32", np.float32, {"kernel_type": "tensor_core", "tile_size": 16, "block_size": 256},
     (2, 5, 9, 11, 33, 3, 3, 2, 1, 1), ("tf32_",)),
    ("tf32", np.float32, {"enable_tensor_core": True}, (2, 64, 14, 14, 96, 3, 3, 1, 1, 1), ("wgmma",)),
    ("tf32", np.float32, {"enable_tensor_core": True}, (2, 64, 15, 13, 64, 3, 3, 2, 1, 1), ("wgmma",)),
    ("3xtf32", np.float32, {"precision": "3xtf32"}, (2, 64, 14, 14, 96, 3, 3, 1, 1, 1), ("wgmma", "3xtf32")),
    ("f64", np.float64, {}, (2, 5, 9, 11, 33, 3, 3, 1, 1, 1), ("dmma",)),
    ("f64", np.float64, {"kernel_type": "tiled"}, (2, 6, 8, 8, 24, 3, 3, 2, 2, 3), ("conv2d_f64_",)),
]


@pytest.mark.parametrize("mode, dtype, fields, layer, expect", CONVS,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[3]))}" for c in CONVS])
@pytest.mark.parametrize("expr", ["relu(acc * scale + shift + residual)", EVERY.replace("bias", "shift"), WITH_C])
def test_conv2d(rng, mode, dtype, fields, layer, expect, expr):
    n, c, h, w, k, kh, kw, st, pad, groups = layer
    conv = (cuopjit.Convolution2DFloat if dtype == np.float32 else cuopjit.Convolution2DDouble)(
        c, k, kh, kw, st, st, groups=groups)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal(conv.weight_shape).astype(dtype)
    conv.set_weight(cuopjit.tensor(wt))
    out_shape = conv.output_shape(x.shape, pad_h=pad, pad_w=pad)
    jit = (cuopjit.JITConvolution2DFloat if dtype == np.float32 else cuopjit.JITConvolution2DDouble)(conv)
    jit.set_jit_config(make_config(**fields))
    acc = _reference(x, wt, None, (st, st), (pad, pad), (1, 1), groups, False)
    names = parse_epilogue(expr).operands
    shapes = {"scale": (k,), "shift": (k, 1, 1), "bias": (k,), "residual": out_shape, "r": out_shape,
              "rows": (n, 1, *out_shape[2:])}
    host = {nm: rng.standard_normal(shapes[nm]).astype(dtype) for nm in names if nm in shapes}
    as_channel = {nm: (lambda v: v.reshape(-1, 1, 1)) for nm in ("scale", "bias")}   # [K] is per channel
    X = cuopjit.tensor(x)
    _run(rng, jit, conv, expr, lambda out, ops: jit.forward(X, out, pad_h=pad, pad_w=pad, **ops), out_shape, acc,
         host, tuple(nm for nm in ("scale", "shift") if nm in host), dtype, TOL[mode], expect, as_channel)


def test_conv_relu_and_bias_keep_their_results(rng):
    conv = cuopjit.Convolution2DFloat(5, 33, 3, 3, relu=True)
    x = rng.standard_normal((2, 5, 9, 11)).astype(np.float32)
    wt, b = rng.standard_normal(conv.weight_shape).astype(np.float32), rng.standard_normal(33).astype(np.float32)
    conv.set_weight(cuopjit.tensor(wt))
    conv.set_bias(cuopjit.tensor(b))
    y = guarded(conv.output_shape(x.shape, pad_h=1, pad_w=1))
    conv.forward(cuopjit.tensor(x), y, pad_h=1, pad_w=1)
    ref = _reference(x, wt, b, (1, 1), (1, 1), (1, 1), 1, True)
    assert conv.epilogue == "relu((acc+bias))" and rel_error(y.to_numpy(), ref) <= TOL["f32"]
    conv.set_epilogue("relu(acc + bias)", bias=cuopjit.tensor(b))    # the same meaning, spelt out
    z = guarded(y.shape)
    conv.forward(cuopjit.tensor(x), z, pad_h=1, pad_w=1)
    check_guards(z)
    assert rel_error(z.to_numpy(), ref) <= TOL["f32"]


def plan_specs(specs: dict, op, fields: dict, args: tuple, given: dict, expr: str) -> None:
    """Add to `specs` the (kernel spec, arch) pairs op.forward(*args, **the keywords `expr` reads of `given`) plans
    under a config of `fields` (built in parallel by the module fixtures here and in test_epilogue_staged_gpu)."""
    used = {k: v for k, v in given.items() if k in ("pad_h", "pad_w", *parse_epilogue(expr).operands)}
    plan, target = plan_of(op, RunSettings.of(make_config(**fields).snapshot()), args, used)
    specs.update((spec, target.arch) for spec in plan.specs)


@pytest.fixture(scope="module", autouse=True)
def built_in_parallel():
    """Every case's kernels compiled at once, in threads (the tests then load them from the session's cache)."""
    P, specs = placeholder, {}
    add = functools.partial(plan_specs, specs)
    for _, dtype, fields, (m, n, k), tb, _ in GEMMS:
        g = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)(trans_b=tb)
        g.set_weight(P((n, k) if tb else (k, n), dtype))
        for expr in (EVERY, WITH_C):
            g.set_epilogue(expr)
            add(g, fields, (P((m, k), dtype), P((m, n), dtype)),
                {"s": 1.0, "t": 1.0, "bias": P((n,), dtype), "rows": P((m, 1), dtype), "r": P((m, n), dtype)}, expr)
    for _, dtype, fields, (b, m, n, k), bc, _ in BATCHES:
        op = (cuopjit.BatchMatMulFloat if dtype == np.float32 else cuopjit.BatchMatMulDouble)()
        op.set_epilogue(EVERY)
        add(op, fields, (P((b, m, k), dtype), P((1 if bc else b, k, n), dtype), P((b, m, n), dtype)),
            {"s": 1.0, "t": 1.0, "bias": P((n,), dtype), "rows": P((b, m, 1), dtype), "r": P((b, m, n), dtype)}, EVERY)
    for _, dtype, fields, (n, c, h, w, k, kh, kw, st, pad, groups), _ in CONVS:
        conv = (cuopjit.Convolution2DFloat if dtype == np.float32 else cuopjit.Convolution2DDouble)(
            c, k, kh, kw, st, st, groups=groups)
        conv.set_weight(cuopjit.zeros(conv.weight_shape, dtype))   # planning packs it: real memory
        out = conv.output_shape((n, c, h, w), pad_h=pad, pad_w=pad)
        given = {"pad_h": pad, "pad_w": pad, "s": 1.0, "t": 1.0, "scale": P((k,), dtype), "shift": P((k, 1, 1), dtype),
                 "bias": P((k,), dtype), "residual": P(out, dtype), "r": P(out, dtype),
                 "rows": P((n, 1, *out[2:]), dtype)}
        for expr in ("relu(acc * scale + shift + residual)", EVERY.replace("bias", "shift"), WITH_C):
            conv.set_epilogue(expr)
            add(conv, fields, (P((n, c, h, w), dtype), P(out, dtype)), given, expr)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: pipeline.build(*item), specs.items()))
