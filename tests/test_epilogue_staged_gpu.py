"""The wgmma kernels' staged epilogue store (templates/common/wgmma_store.cuh.jinja) at its edges, on the GPU:
runs of 4 outputs cut by the output's edge (N or OW not a multiple of 4 or 8, M = 1 and 7), tile widths below
one 32-column chunk (tile_size 16) and one consumer warpgroup, D = C^T (nn, runs along P), 3xTF32 on unaligned
C, an operand that is not 16-byte aligned (element by element instead of vectors), the old output read as c,
convolutions whose pixel rows end inside a run; against float64 references, outputs NaN-poisoned and fenced."""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.config import DEFAULT
from cuopjit.device import driver
from cuopjit.expr import evaluate, parse_epilogue
from cuopjit.ops.gemm import wgmma as gw, wgmma_plan
from cuopjit.recipes import placeholder
from cuopjit.run import executor
from cuopjit.target import of_device

from conftest import check_guards, guarded, make_config, rel_error
from test_conv2d import _reference
from test_epilogue_gpu import EVERY, TOL, WITH_C, _run, _values, plan_specs

pytestmark = pytest.mark.gpu

TF32, X3 = {"enable_tensor_core": True}, {"precision": "3xtf32"}
GEMMS = [  # (mode, fields, (m, n, k), trans_b)
    ("tf32", TF32, (1, 8, 32), True), ("tf32", TF32, (7, 136, 64), True), ("tf32", TF32, (130, 264, 96), True),
    ("tf32", {**TF32, "block_size": 0, "tile_size": 128}, (200, 264, 32), True), ("tf32", TF32, (7, 40, 32), False),
    ("tf32", TF32, (129, 200, 64), False), ("3xtf32", X3, (513, 515, 40), True), ("3xtf32", X3, (520, 333, 36), False),
]
UNALIGNED = "relu(acc + b) * s"      # b: a view one element past a 16-byte boundary
CONVS = [  # (mode, fields, (N, C, H, W, K, kh, kw, stride, pad))
    ("tf32", TF32, (2, 32, 9, 13, 40, 3, 3, 1, 1)), ("tf32", TF32, (2, 64, 15, 13, 64, 3, 3, 2, 1)),
    ("tf32", {**TF32, "block_size": 256}, (2, 64, 11, 11, 64, 3, 3, 1, 1)),
    ("3xtf32", X3, (2, 64, 11, 10, 72, 3, 3, 1, 1)),
]
RESIDUAL = "relu(acc * scale + shift + residual)"
TILES = [  # (consumers, tile width QN, trans_b): chunks of 32 columns, a narrower last one, narrower tiles
    (2, 256, True), (2, 40, True), (1, 24, True), (2, 8, False), (1, 40, False), (2, 192, False)]


def _unaligned(rng, shape):
    """A float32 tensor of `shape` whose first element is 4 bytes past a 16-byte boundary, and its values."""
    host = rng.standard_normal(shape).astype(np.float32)
    return guarded(shape, np.float32, fill=host, pad=257), host


def _once(jit, expr, call, out_shape, env, tol):
    """One forward into a poisoned, fenced output against the float64 reference of `expr` over `env`."""
    out = guarded(out_shape)
    assert call(out) is out
    check_guards(out)
    ref = evaluate(parse_epilogue(expr), env, np.float64)
    name = jit.get_performance_profile().kernel_name
    assert "wgmma" in name and rel_error(out.to_numpy(), ref) <= tol, f"{name}: {rel_error(out.to_numpy(), ref):.3g}"


@pytest.mark.parametrize("mode, fields, size, trans_b", GEMMS,
                         ids=[f"{g[0]}-{'x'.join(map(str, g[2]))}-{'nt' if g[3] else 'nn'}-{i}" for i, g in enumerate(GEMMS)])
@pytest.mark.parametrize("expr", [EVERY, WITH_C, UNALIGNED], ids=["every-kind", "reads-c", "unaligned-operand"])
def test_gemm_edges(rng, mode, fields, size, trans_b, expr):
    m, n, k = size
    g = cuopjit.GemmFloat(trans_b=trans_b, alpha=1.5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    g.set_weight(cuopjit.tensor(w))
    jit = cuopjit.JITGemmFloat(g)
    jit.set_jit_config(make_config(**fields))
    acc = 1.5 * a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)
    A = cuopjit.tensor(a)
    if expr == UNALIGNED:
        b, host = _unaligned(rng, (n,))
        g.set_epilogue(expr, b=b)
        _once(jit, expr, lambda out: jit.forward(A, out, s=0.75), (m, n), {"acc": acc, "b": host, "s": 0.75}, TOL[mode])
        return
    host = _values(rng, np.float32, parse_epilogue(expr).operands, (m, 1), (n,), (m, n))
    _run(rng, jit, g, expr, lambda out, ops: jit.forward(A, out, **ops), (m, n), acc, host, ("bias",), np.float32,
         TOL[mode], ("wgmma",))


@pytest.mark.parametrize("mode, fields, layer", CONVS, ids=[f"{c[0]}-{'x'.join(map(str, c[2]))}" for c in CONVS])
@pytest.mark.parametrize("expr", [RESIDUAL, WITH_C, "unaligned"])
def test_conv2d_edges(rng, mode, fields, layer, expr):
    n, c, h, w, k, kh, kw, st, pad = layer
    conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal(conv.weight_shape).astype(np.float32)
    conv.set_weight(cuopjit.tensor(wt))
    out_shape = conv.output_shape(x.shape, pad_h=pad, pad_w=pad)
    jit = cuopjit.JITConvolution2DFloat(conv)
    jit.set_jit_config(make_config(**fields))
    acc = _reference(x, wt, None, (st, st), (pad, pad), (1, 1), 1, False)
    X = cuopjit.tensor(x)
    call = lambda out, ops: jit.forward(X, out, pad_h=pad, pad_w=pad, **ops)   # noqa: E731
    as_channel = {nm: (lambda v: v.reshape(-1, 1, 1)) for nm in ("scale", "bias")}   # [K] is per channel
    if expr == "unaligned":       # the residual one element past a 16-byte boundary: no vectors, same values
        r, host = _unaligned(rng, out_shape)
        scale = rng.standard_normal((k,)).astype(np.float32)
        text = RESIDUAL.replace("shift", "0.25")
        conv.set_epilogue(text, scale=cuopjit.tensor(scale))
        _once(jit, text, lambda out: call(out, {"residual": r}), out_shape,
              {"acc": acc, "scale": scale.reshape(-1, 1, 1).astype(np.float64), "residual": host}, TOL[mode])
        return
    shapes = {"scale": (k,), "shift": (k, 1, 1), "residual": out_shape, "bias": (k,)}
    names = parse_epilogue(expr).operands
    host = {nm: rng.standard_normal(shapes[nm]).astype(np.float32) for nm in names if nm in shapes}
    _run(rng, jit, conv, expr, call, out_shape, acc, host, tuple(nm for nm in ("scale", "shift") if nm in host),
         np.float32, TOL[mode], ("wgmma",), as_channel)


def _explicit(rng, consumers, qn, trans_b):
    """(operator, A, output, numbers, plan, float64 reference) of a 133 x 300 x 64 GEMM with EVERY on a
    consumers x qn wgmma tile the heuristic would not pick."""
    m, n, k = 133, 300, 64
    g = cuopjit.GemmFloat(trans_b=trans_b, alpha=1.5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    host = _values(rng, np.float32, ("bias", "rows", "r"), (m, 1), (n,), (m, n))
    g.set_weight(cuopjit.tensor(w))
    g.set_epilogue(EVERY, **{name: cuopjit.tensor(v) for name, v in host.items()})
    A, out, numbers = cuopjit.tensor(a), guarded((m, n)), {"s": 0.5, "t": 2.0}
    target = of_device(driver.current_ordinal())
    choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, False, target,
                                                         extra=gw.staging_bytes(consumers, qn)))
    plan = wgmma_plan.plan(g.problem(A, out, **numbers), choice, target)
    env = {"acc": 1.5 * a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64), **numbers,
           **{name: v.astype(np.float64) for name, v in host.items()}}
    return g, A, out, numbers, plan, evaluate(parse_epilogue(EVERY), env, np.float64)


@pytest.mark.parametrize("consumers, qn, trans_b", TILES, ids=[f"{c}x{q}-{'nt' if t else 'nn'}" for c, q, t in TILES])
def test_tile_widths(rng, consumers, qn, trans_b):
    g, A, out, numbers, plan, ref = _explicit(rng, consumers, qn, trans_b)
    executor.load(plan, driver.current_ordinal(), DEFAULT)(g.bind(A, out, **numbers)[1], 0)
    check_guards(out)
    assert rel_error(out.to_numpy(), ref) <= TOL["tf32"], plan.launches[-1].spec.name


@pytest.fixture(scope="module", autouse=True)
def built_in_parallel():
    """Every case's kernels compiled at once, in threads (the tests then load them from the session's cache)."""
    P, specs = placeholder, {}
    add = functools.partial(plan_specs, specs)
    for _, fields, (m, n, k), tb in GEMMS:
        g = cuopjit.GemmFloat(trans_b=tb)
        g.set_weight(P((n, k) if tb else (k, n), np.float32))
        for expr in (EVERY, WITH_C, UNALIGNED):
            g.set_epilogue(expr)
            add(g, fields, (P((m, k), np.float32), P((m, n), np.float32)),
                {"s": 1.0, "t": 1.0, "bias": P((n,), np.float32), "b": P((n,), np.float32),
                 "rows": P((m, 1), np.float32), "r": P((m, n), np.float32)}, expr)
    for _, fields, (n, c, h, w, k, kh, kw, st, pad) in CONVS:
        conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st)
        conv.set_weight(cuopjit.zeros(conv.weight_shape, np.float32))   # planning packs it: real memory
        out = conv.output_shape((n, c, h, w), pad_h=pad, pad_w=pad)
        given = {"pad_h": pad, "pad_w": pad, "s": 1.0, "scale": P((k,), np.float32),
                 "shift": P((k, 1, 1), np.float32), "bias": P((k,), np.float32), "residual": P(out, np.float32)}
        for expr in (RESIDUAL, WITH_C, RESIDUAL.replace("shift", "0.25")):
            conv.set_epilogue(expr)
            add(conv, fields, (P((n, c, h, w), np.float32), P(out, np.float32)), given, expr)
    rng = np.random.default_rng(0)
    arch = of_device(driver.current_ordinal()).arch
    specs.update((spec, arch) for tile in TILES for spec in _explicit(rng, *tile)[4].specs)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: pipeline.build(*item), specs.items()))
