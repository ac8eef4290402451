"""LayerNorm and its JIT wrappers: CPU plans and builds under every config, state keying, GPU results."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit import target
from cuopjit.ops.rows import layernorm, common as rows
from cuopjit.ops.rows.layernorm import LayerNormProblem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, compiles_without_spills, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 5e-6, np.float64: 1e-12}
CONFIGS = [{}, {"block_size": 32}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 64},
           {"tile_size": 128}, {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"enable_shared_memory_opt": False}, {"kernel_type": "tiled"}, {"kernel_type": "warp_optimized"}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")
# sm_80 plans differ from sm_90's only where clusters and stream kernels would be chosen
BUILD_CASES = ([(SM90, f) for f in CONFIGS + SEED_CONFIGS + [{"kernel_type": "simple"}]]
               + [(SM80, f) for f in ({}, SEED, {"block_size": 32}, {"tile_size": 128})])


def _ln(dtype, **kw):
    return (cuopjit.LayerNormFloat if dtype == np.float32 else cuopjit.LayerNormDouble)(**kw)


def _ln_ref(a, gamma, beta, eps, per_channel=False):
    a = a.astype(np.float64)
    if gamma is None:
        axes = (a.ndim - 1,)
    elif per_channel:
        axes = tuple(range(1, a.ndim))
    else:
        axes = tuple(range(a.ndim - gamma.ndim, a.ndim))
    mean = a.mean(axis=axes, keepdims=True)
    var = ((a - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (a - mean) / np.sqrt(var + eps)
    if gamma is not None:
        g = gamma.astype(np.float64)
        b = np.zeros_like(g) if beta is None else beta.astype(np.float64)
        if per_channel:
            g = g.reshape((-1,) + (1,) * (a.ndim - 2))
            b = b.reshape(g.shape)
        out = out * g + b
    return out


def _plans(fields: dict, t: target.Target) -> list:
    """The float32 and float64 plans (the 16-bit types' configs and builds: tests/test_rows_half.py)."""
    cfg = make_config(**fields).snapshot()
    return [layernorm.FAMILY.default_plan(p, cfg, t) for p in layernorm.problems() if p.dtype in ("float32", "float64")]


# --- CPU ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t, fields", BUILD_CASES, ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
def test_every_config_plans_and_compiles(t, fields):
    build_once(_plans(fields, t), t)


def test_problems_cover_every_dtype_and_every_kernel_kind():
    assert {p.dtype for p in layernorm.problems()} == {"float32", "float64", "float16", "bfloat16"}
    kinds = {kl.spec.kernel for plan in _plans({}, SM90) for kl in plan.launches}
    assert kinds == {"layernorm_rows", "layernorm_stream", "layernorm_partials", "layernorm_apply",
                     "layernorm_reset", "layernorm_resident"}
    assert any(kl.cluster != (1, 1, 1) for plan in _plans({}, SM90) for kl in plan.launches)


def test_config_changes_code():
    sources = {str(f): tuple(pipeline.source(s) for plan in _plans(f, SM90) for s in plan.specs) for f in CONFIGS}
    assert len(set(sources.values())) == len(CONFIGS)


@pytest.mark.parametrize("fields", [{"kernel_type": "tensor_core"}, {"enable_tensor_core": True},
                                    {"enable_tma": True}], ids=str)
def test_fields_without_a_kernel_are_ignored(fields):
    assert _plans(fields, SM90) == _plans({}, SM90)


def test_a_tile_size_no_kernel_takes_is_refused():
    problem = LayerNormProblem("float64", 4, 1024, 1, 2, True, 1e-5)
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for row kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        layernorm.choices(problem, make_config(tile_size=256).snapshot(), SM90)


def test_plans_pass_weights_eps_and_workspace():
    cfg = make_config().snapshot()
    plan = layernorm.FAMILY.default_plan(LayerNormProblem("float32", 4096, 1024, 1, 1, True, 0.25), cfg, SM90)
    (kl,) = plan.launches
    assert plan.operands == ("x", "y", "gamma", "beta") and kl.pointer_indices == (0, 1, 2, 3)
    assert kl.args[-1].kind == "f32" and kl.args[-1].value == 0.25 and "a1" in kl.spec.name
    plan = layernorm.FAMILY.default_plan(LayerNormProblem("float64", 1024, 32768, 1, 2, True, 1e-5), cfg, SM90)
    assert plan.launches[0].max_carveout and plan.launches[0].shared > 0
    nchw = LayerNormProblem("float64", 8, 64 * 3136, 3136, 2, True, 1e-5)
    plan = layernorm.FAMILY.default_plan(nchw, make_config(enable_shared_memory_opt=False).snapshot(), SM90)
    part, apply = plan.launches
    assert plan.workspace == part.grid[0] * 2 * 8 and "pc" in apply.spec.name
    assert part.pointer_indices == (0, 4) and apply.pointer_indices == (0, 1, 2, 3, 4)
    reset, res = layernorm.FAMILY.default_plan(nchw, cfg, SM90).launches
    chunks = part.grid[0] // 8
    assert res.spec.kernel == "layernorm_resident" and res.grid[0] == 2 * 8 * chunks and "pc" in res.spec.name
    assert reset.args[1].value == 1 + 2 * 8 and res.args[4] == reset.args[0]   # counters: tickets, done, ready
    assert (res.args[5].offset, res.args[6].offset) == (80, 80 + 8 * chunks * 2 * 8)   # 17 counters: 80 bytes
    # P's loads carry the evict-last L2 policy (x stays for A's re-read); the lead is one row's chunks
    assert dict(res.spec.params)["KEEP"] == 1 and "createpolicy.fractional.L2::evict_last" in pipeline.source(res.spec)
    assert res.args[-3].value == layernorm.resident_lead(8, layernorm.choices(nchw, cfg, SM90)[0].layout, SM90)


def test_resident_rows_fit_in_l2():
    """Split-row becomes the resident kernel where two rows fit in 3/5 of L2 (H100: the 12.8 MB NCHW sample),
    not for longer rows, not with shared-memory opt off, and not on a target whose L2 is too small."""
    cfg = make_config().snapshot()
    kind = lambda p, c=cfg, t=SM90: layernorm.choices(p, c, t)[0].layout.kind  # noqa: E731
    sample = LayerNormProblem("float32", 32, 64 * 224 * 224, 224 * 224, 2, True, 1e-5)
    assert kind(sample) == "resident"
    assert kind(LayerNormProblem("float32", 4, 1 << 23, 1, 2, True, 1e-5)) == "split"
    assert kind(sample, make_config(enable_shared_memory_opt=False).snapshot()) == "split"
    assert kind(sample, make_config(kernel_type="simple").snapshot()) == "split"
    assert kind(sample, cfg, SM80) == "split"   # 40 MB of L2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_default_plans_compile_without_spills(arch):
    """Every kernel of the family's default plans compiles for sm_80 and sm_90 with no local-memory spills
    (the split-row apply loads its chunk after the statistics; the resident kernel re-reads in two halves)."""
    t = target.named(arch)
    cfg = make_config().snapshot()
    specs = {s for p in layernorm.problems() for s in layernorm.FAMILY.default_plan(p, cfg, t).specs}
    compiles_without_spills(sorted(specs, key=lambda s: s.name), arch)


def test_eps_is_part_of_the_state():
    ln = cuopjit.LayerNormFloat()
    assert ln.eps == 1e-5 and ln._state[0] == 1e-5
    assert cuopjit.LayerNormDouble(eps=1e-3).eps == 1e-3
    ln.eps = 1e-3
    assert ln._state[0] == 1e-3
    with pytest.raises(ValueError, match=r"LayerNormFloat: eps=-1.0 is not allowed: it must be >= 0"):
        ln.eps = -1.0
    assert ln.eps == 1e-3


def test_long_rows_tables_follow_the_measurements():
    """Blocks of 512 threads before clusters; the stream kernel only with a row per SM and clusters."""
    f32 = np.dtype(np.float32)
    lr = layernorm.long_rows(f32)
    cfg = make_config().snapshot()
    assert rows.plan_rows(f32, cfg, SM90, 4096, 8192, 4, lr).kind == "rows"
    assert rows.plan_rows(f32, cfg, SM90, SM90.sm_count, 32768, 4, lr).kind == "stream"
    assert rows.plan_rows(f32, cfg, SM90, 8, 32768, 4, lr).cl == 2
    assert rows.plan_rows(f32, cfg, SM80, 4096, 32768, 4, lr).tpr == 1024


# --- GPU ------------------------------------------------------------------------------------------
LN_CASES = [  # (x shape, gamma shape or None, per-channel)
    ((7, 1000), (1000,), False), ((4097, 33), (33,), False), ((1, 1), (1,), False), ((3, 5, 7), (5, 7), False),
    ((33, 4097), (4097,), False), ((1000, 7), (7,), False), ((2, 32768), (32768,), False),
    ((3, 100000), (100000,), False), ((2, 65537), (65537,), False), ((7, 1000), None, False),
    ((2, 3, 5, 7), (3,), True), ((4, 6, 33, 33), (6,), True), ((2, 64, 56, 56), (64,), True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, gshape, per_channel", LN_CASES)
def test_layernorm(rng, dtype, shape, gshape, per_channel):
    a = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    ln = _ln(dtype)
    gamma = beta = None
    if gshape is not None:
        gamma = rng.standard_normal(gshape).astype(dtype)
        beta = rng.standard_normal(gshape).astype(dtype)
        ln.set_gamma(cuopjit.tensor(gamma))
        ln.set_beta(cuopjit.tensor(beta))
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    assert ln.forward(x, y) is y
    check_guards(y)
    assert rel_error(y.to_numpy(), _ln_ref(a, gamma, beta, 1e-5, per_channel)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("stash", ["registers", "async", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(140, 8192), (133, 20000), (133, 32768), (140, 4100), (133, 5001)])
def test_layernorm_stream(rng, monkeypatch, dtype, shape, stash):
    """The stream kernel, head stashed (through registers or cp.async) or all re-read from L2; random
    data, a large offset, and constant rows."""
    monkeypatch.setattr(rows, "plan_rows", lambda dt, cfg, t, n, length, vec, long_rows=None: rows.plan_stream(
        dt, t, -(-length // vec), vec, 512, 2, 2, stash=stash != "none", l2_budget=1 << 40,
        copy_async=stash == "async"))
    ln = _ln(dtype)
    g = rng.standard_normal(shape[-1:]).astype(dtype)
    b = rng.standard_normal(shape[-1:]).astype(dtype)
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    for a, tol in ((rng.standard_normal(shape) * 2 + 0.5, TOL[dtype]),
                   (1e4 + rng.standard_normal(shape), 2e-3 if dtype == np.float32 else 1e-10)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), guarded(shape, dtype)
        ln.forward(x, y)
        check_guards(y)
        assert ln.plan(x, y).launches[0].spec.kernel == "layernorm_stream"
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < tol
    c = cuopjit.tensor(np.full(shape, 7.0, dtype))
    ln.set_beta(cuopjit.tensor(np.zeros(shape[-1:], dtype)))
    ln.forward(c, c)  # constant rows, in place: zeros
    assert np.array_equal(c.to_numpy(), np.zeros(shape, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 4097), (7, 1000), (33, 4097), (1000, 33), (1, 7), (4097, 1), (3, 7, 33, 5)])
def test_layernorm_resident(rng, monkeypatch, dtype, shape):
    """The resident kernel (tickets, per-row done counters and ready flags) at odd sizes, every row forced
    into chunks of 32 threads x 8 elements: random data, a +-1e4 offset, constant rows; NaN-poisoned output."""
    monkeypatch.setattr(rows, "plan_rows", lambda dt, cfg, t, n, length, vec, long_rows=None: rows._plan(
        dt, -(-length // vec), vec, 8, 32, 0, False))
    ln = _ln(dtype)
    g = rng.standard_normal(shape[-1:]).astype(dtype)
    b = rng.standard_normal(shape[-1:]).astype(dtype)
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    sign = np.sign(rng.standard_normal(shape[:-1] + (1,)))
    for a, tol in ((rng.standard_normal(shape) * 2 + 0.5, TOL[dtype]),
                   (sign * 1e4 + rng.standard_normal(shape), 2e-3 if dtype == np.float32 else 1e-10)):
        a = a.astype(dtype)
        x, y = cuopjit.tensor(a), guarded(shape, dtype)
        ln.forward(x, y)
        check_guards(y)
        assert [kl.spec.kernel for kl in ln.plan(x, y).launches] == ["layernorm_reset", "layernorm_resident"]
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < tol
    if shape[-1] > 1:
        c = cuopjit.tensor(np.full(shape, -3.0, dtype))
        ln.set_beta(cuopjit.tensor(np.zeros(shape[-1:], dtype)))
        ln.forward(c, c)  # constant rows, in place: zeros
        assert np.array_equal(c.to_numpy(), np.zeros(shape, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_offset_and_eps(rng, dtype):
    """Large mean, small spread: the variance must come from deviations, not E[x^2] - E[x]^2."""
    a = (1e4 + rng.standard_normal((33, 1024))).astype(dtype)
    ln = _ln(dtype, eps=1e-3)
    g = np.ones(1024, dtype)
    ln.set_gamma(cuopjit.tensor(g))
    x, y = cuopjit.tensor(a), cuopjit.empty(a.shape, dtype).fill(float("nan"))
    ln.forward(x, y)
    ref = _ln_ref(a, g, None, 1e-3)
    # float32 cannot hold a mean near 1e4 closer than ulp(1e4)/2 = 4.9e-4; E[x^2] - E[x]^2 would be off by ~ulp(1e8)
    tol = 2e-3 if dtype == np.float32 else 1e-10
    assert rel_error(y.to_numpy(), ref) < tol
    ln.eps = 10.0
    ln.forward(x, y)
    assert rel_error(y.to_numpy(), _ln_ref(a, g, None, 10.0)) < tol
    c = cuopjit.tensor(np.full((4, 1024), 7.0, dtype))
    ln.forward(c, c)  # constant rows, in place: all zeros, no NaN
    assert np.array_equal(c.to_numpy(), np.zeros((4, 1024), dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length", [33, 4097, 65537])
def test_layernorm_extreme_inputs(rng, dtype, length):
    """Rows of huge and tiny scale, a large offset, a constant row and a row holding inf, side by side: each
    row is normalised on its own (the inf row alone turns NaN), whatever the magnitudes."""
    big = 1e15 if dtype == np.float32 else 1e150
    scale = np.array([big, 1 / big, 1.0, 0.0, 1.0, 1.0])[:, None]
    offset = np.array([0.0, 0.0, 1e4, 7.0, 0.0, -3.0])[:, None]
    a = (rng.standard_normal((6, length)) * scale + offset).astype(dtype)
    a[4, length // 2] = np.inf
    g, b = rng.standard_normal(length).astype(dtype), rng.standard_normal(length).astype(dtype)
    ln = _ln(dtype)
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    x, y = cuopjit.tensor(a), guarded(a.shape, dtype)
    ln.forward(x, y)
    check_guards(y)
    got = y.to_numpy()
    with np.errstate(invalid="ignore"):
        ref = _ln_ref(a, g, b, 1e-5)
    tol = [TOL[dtype] * 4, TOL[dtype] * 4, 2e-3 if dtype == np.float32 else 1e-10, None, None, TOL[dtype]]
    for row, t in enumerate(tol):
        if t is not None:
            assert rel_error(got[row], ref[row]) < t, f"row {row}"
    # the constant row: a mean within 8 ulps of 7 leaves |x - mean| / sqrt(eps) * |gamma| at most this from beta
    slack = 8 * np.spacing(np.array(7.0, dtype)) / np.sqrt(1e-5) * np.abs(g) + TOL[dtype] * np.abs(b)
    assert np.all(np.abs(got[3] - b) <= slack)
    assert np.all(np.isnan(got[4]))


@pytest.mark.gpu
def test_new_weights_change_the_plan(rng):
    """set_gamma / set_beta with another shape or presence plan again: no stale launch."""
    a = rng.standard_normal((8, 64)).astype(np.float32)
    ln = cuopjit.LayerNormFloat()
    x, y = cuopjit.tensor(a), cuopjit.empty(a.shape).fill(float("nan"))
    ln.forward(x, y)
    assert rel_error(y.to_numpy(), _ln_ref(a, None, None, 1e-5)) < TOL[np.float32]
    g = rng.standard_normal(64).astype(np.float32)
    ln.set_gamma(cuopjit.tensor(g))
    ln.forward(x, y)
    assert rel_error(y.to_numpy(), _ln_ref(a, g, None, 1e-5)) < TOL[np.float32]
    b = rng.standard_normal(64).astype(np.float32)
    ln.set_beta(cuopjit.tensor(b))
    ln.forward(x, y)
    assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < TOL[np.float32]
    a2 = rng.standard_normal((8, 4, 16)).astype(np.float32)
    g2, b2 = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal((4, 16)).astype(np.float32)
    ln.set_gamma(cuopjit.tensor(g2))
    ln.set_beta(cuopjit.tensor(b2))
    x2, y2 = cuopjit.tensor(a2), cuopjit.empty(a2.shape).fill(float("nan"))
    ln.forward(x2, y2)
    assert rel_error(y2.to_numpy(), _ln_ref(a2, g2, b2, 1e-5)) < TOL[np.float32]


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_jit_layernorm_configs(rng, fields, dtype):
    ln = _ln(dtype)
    jit = (cuopjit.JITLayerNormFloat if dtype == np.float32 else cuopjit.JITLayerNormDouble)(ln)
    jit.set_jit_config(make_config(**fields))
    for shape in ((33, 1000), (3, 40000), (4097, 128)):
        a = rng.standard_normal(shape).astype(dtype)
        g = rng.standard_normal(shape[-1:]).astype(dtype)
        b = rng.standard_normal(shape[-1:]).astype(dtype)
        ln.set_gamma(cuopjit.tensor(g))
        ln.set_beta(cuopjit.tensor(b))
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y)
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5)) < TOL[dtype], (shape, fields)


def _seed_tol(dtype, length: int) -> float:
    """Sums of L terms (mean, then squared deviations) by a tree: ~log2(L) ulp each, plus the square
    root's and the affine transform's few ulp (a bound: the norm-wise error measured on H100 is under a
    tenth of it)."""
    return 2 * np.finfo(dtype).eps * (8 + math.log2(length))


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_seed_configuration_runs(rng, fields, dtype):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are right."""
    ln = _ln(dtype)
    jit = (cuopjit.JITLayerNormFloat if dtype == np.float32 else cuopjit.JITLayerNormDouble)(ln)
    jit.set_jit_config(make_config(**fields))
    for shape, gshape, per_channel in (((64, 7), None, False), ((33, 1000), (1000,), False),
                                       ((140, 8192), (8192,), False), ((3, 40000), (40000,), False),
                                       ((2, 6, 33, 33), (6,), True)):
        a = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
        g = b = None
        if gshape is not None:
            g, b = rng.standard_normal(gshape).astype(dtype), rng.standard_normal(gshape).astype(dtype)
            ln.set_gamma(cuopjit.tensor(g))
            ln.set_beta(cuopjit.tensor(b))
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        jit.forward(x, y)
        length = math.prod(shape[1:]) if per_channel else shape[-1]
        assert rel_error(y.to_numpy(), _ln_ref(a, g, b, 1e-5, per_channel)) < _seed_tol(dtype, length), (shape, fields)
        assert jit.get_performance_profile().kernel_name.startswith("layernorm_")


@pytest.mark.gpu
def test_layernorm_errors():
    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(cuopjit.ones([5]))
    x = cuopjit.zeros([4, 6])
    with pytest.raises(ValueError, match=r"LayerNormFloat: gamma has shape \[5\] and x has shape \[4, 6\]"):
        ln.forward(x, cuopjit.zeros([4, 6]))
    ln.set_beta(cuopjit.zeros([6]))
    with pytest.raises(ValueError, match=r"LayerNormFloat: beta has shape \[6\] but gamma has shape \[5\]"):
        ln.forward(x, cuopjit.zeros([4, 6]))
    ln = cuopjit.LayerNormFloat()
    with pytest.raises(ValueError, match=r"LayerNormFloat: y has shape \[6, 4\], expected x's shape \[4, 6\]"):
        ln.forward(x, cuopjit.zeros([6, 4]))
    with pytest.raises(TypeError, match="LayerNormFloat: x is float64"):
        ln.forward(cuopjit.zeros([4, 6], "float64"), x)
    assert ln.forward(cuopjit.empty([0, 6]), cuopjit.empty([0, 6])).shape == (0, 6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_set_jit_config_refuses_a_tile_size_no_kernel_takes(dtype):
    jit = (cuopjit.JITLayerNormFloat if dtype == np.float32 else cuopjit.JITLayerNormDouble)(_ln(dtype))
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for row kernels: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        jit.set_jit_config(make_config(tile_size=256))
    for fields in SEED_CONFIGS + CONFIGS:
        jit.set_jit_config(make_config(**fields))


def test_wrapper_type():
    with pytest.raises(TypeError, match="JITLayerNormDouble wraps a LayerNormDouble, got LayerNormFloat"):
        cuopjit.JITLayerNormDouble(cuopjit.LayerNormFloat())
