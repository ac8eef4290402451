"""BatchNorm and its JIT wrappers: CPU plans and builds under every config, modes, GPU results."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit import target
from cuopjit.ops import batchnorm_plans as batchnorm
from cuopjit.ops.batchnorm_plans import BatchNormProblem

from conftest import SEED, SEED_CONFIGS, build_once, check_guards, family_plans, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 5e-6, np.float64: 1e-12}
CONFIGS = [{}, {"block_size": 128}, {"block_size": 1024}, {"tile_size": 8}, {"tile_size": 64},
           {"enable_loop_unroll": False}, {"enable_memory_coalescing": False},
           {"enable_shared_memory_opt": False}]
SM80, SM90 = target.named("sm_80"), target.named("sm_90")
# sm_80 plans the kernels sm_90 plans (only the training split count follows the target)
TARGET_CONFIGS = ([(SM90, f) for f in CONFIGS + [{"block_size": 32}, {"kernel_type": "simple"}] + SEED_CONFIGS]
                  + [(SM80, f) for f in ({}, SEED)])
NCHW = BatchNormProblem("float32", 32, 64, 56 * 56, True, False, 1e-5)
TRAIN = BatchNormProblem("float64", 32, 64, 56 * 56, True, True, 1e-5, 0.1)


def _bn(dtype, **kw):
    return (cuopjit.BatchNormFloat if dtype == np.float32 else cuopjit.BatchNormDouble)(**kw)


def _plans(fields: dict, t: target.Target) -> list:
    return family_plans(batchnorm.FAMILY, fields, t)


# --- CPU --------------------------------------------------------------------------------------
@pytest.mark.parametrize("t, fields", TARGET_CONFIGS, ids=lambda v: v.arch if isinstance(v, target.Target) else str(v))
def test_every_config_plans_and_compiles(t, fields):
    build_once(_plans(fields, t), t)


def test_problems_cover_every_dtype_and_kernel():
    assert {p.dtype for p in batchnorm.problems()} == {"float32", "float64", "float16", "bfloat16"}
    names = {kl.spec.name for plan in _plans({}, SM90) for kl in plan.launches}
    assert {"batchnorm_apply_f32_pv4n4t256", "batchnorm_apply_f32_pv1n16t256", "batchnorm_apply_f32_fv1n1t256",
            "batchnorm_stats_f32_t256", "batchnorm_finalize_f32_t256"} <= names


def test_config_changes_code():
    sources = {tuple(pipeline.source(s) for plan in _plans(fields, SM90) for s in plan.specs) for fields in CONFIGS}
    assert len(sources) == len(CONFIGS)


@pytest.mark.parametrize("fields", [{"kernel_type": "tiled"}, {"kernel_type": "warp_optimized"},
                                    {"kernel_type": "tensor_core"}, {"enable_tensor_core": True},
                                    {"enable_tma": True}], ids=str)
def test_fields_without_a_kernel_are_ignored(fields):
    assert _plans(fields, SM90) == _plans({}, SM90)


def test_kernel_shapes():
    """tile_size = elements per thread per plane tile; "simple" and enable_shared_memory_opt=False: the flat kernel."""
    choose = batchnorm.choices
    assert choose(NCHW, make_config(tile_size=128).snapshot(), SM90)[0].label == "pv4n32t256"
    assert choose(NCHW, make_config(kernel_type="simple", tile_size=64).snapshot(), SM90)[0].label == "fv1n1t256"
    assert choose(NCHW, make_config(enable_shared_memory_opt=False).snapshot(), SM90)[0].label == "fv1n1t256"
    with pytest.raises(ValueError, match=r"tile_size=256 is not available for batch norm: choose one of "
                                         r"0, 8, 16, 32, 64, 128 \(0 = automatic\)"):
        choose(NCHW, make_config(tile_size=256).snapshot(), SM90)


def test_training_plan_shares_one_workspace(monkeypatch):
    """Per-plane: stats -> apply with the finalize folded in (the partials are the workspace); without the
    fold, and flat: stats -> finalize -> apply, the batch mean/variance after the partials in one workspace;
    the split count follows the target's SM count."""
    cfg = make_config().snapshot()
    for t in (SM80, SM90):
        plan = batchnorm.FAMILY.default_plan(TRAIN, cfg, t)
        stats, apply = plan.launches
        assert [kl.spec.kernel for kl in plan.launches] == ["batchnorm_stats", "batchnorm_apply"]
        splits = t.sm_count * 8 // 64    # per-plane stats: one wave of 8 blocks of 256 threads per SM
        partials = 64 * splits * 3 * 8
        assert stats.grid[0] == 64 * splits and plan.workspace == partials
        assert apply.args[4] == stats.args[1] and [a.value for a in apply.args[5:7]] == [4, 5]
        assert apply.spec.name.endswith("rf") and stats.spec.name == "batchnorm_stats_f64_pv2n4t256"
    monkeypatch.setattr(batchnorm, "FOLD_FINALIZE", False)
    for problem, splits in ((TRAIN, SM90.sm_count * 8 // 64), (replace(TRAIN, n=4096, hw=1), 9)):
        plan = batchnorm.FAMILY.default_plan(problem, cfg, SM90)
        stats, finalize, apply = plan.launches
        assert [kl.spec.kernel for kl in plan.launches] == ["batchnorm_stats", "batchnorm_finalize",
                                                           "batchnorm_apply"]
        partials = 64 * splits * 3 * 8
        assert stats.grid[0] == 64 * splits and plan.workspace == partials + 2 * 64 * 8
        mean, var = finalize.args[1], finalize.args[2]
        assert (mean.value, mean.offset, var.value, var.offset) == (6, partials, 6, partials + 64 * 8)
        assert apply.args[4] == mean and apply.args[5] == var
        assert [a.value for a in finalize.args[3:5]] == [4, 5]   # running_mean, running_var: operands
    inference = batchnorm.FAMILY.default_plan(NCHW, cfg, SM90)
    assert inference.workspace == 0 and len(inference.launches) == 1


def test_defaults_and_modes():
    bn = cuopjit.BatchNormFloat()
    assert (bn.eps, bn.momentum, bn.training) == (1e-5, 0.1, False)
    assert bn.train().training is True and bn.eval().training is False
    with pytest.raises(ValueError, match=r"momentum=2.0 is not allowed: it must be in \[0, 1\]"):
        bn.momentum = 2.0
    with pytest.raises(ValueError, match=r"BatchNormFloat: eps=-1.0 is not allowed"):
        bn.eps = -1.0
    assert bn.running_mean is None and bn.running_var is None


def test_every_setting_re_keys_the_plans():
    """eps, momentum and the mode are kernel arguments or kernels: each change gives new plan keys."""
    bn = cuopjit.BatchNormDouble()
    for change in (lambda: setattr(bn, "eps", 1e-3), lambda: setattr(bn, "momentum", 0.5), bn.train,
                   lambda: setattr(bn, "training", False)):
        before = bn._state
        change()
        assert bn._state != before


# --- GPU --------------------------------------------------------------------------------------
BN_SHAPES = [(2, 3, 5, 7), (4, 6, 33, 33), (32, 64), (7, 1000), (2, 3, 4097), (1, 1, 1, 1), (3, 7, 16, 16),
             (33, 1, 1, 7)]


def _bn_params(rng, c, dtype):
    return (rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype),
            rng.standard_normal(c).astype(dtype), (rng.random(c) + 0.5).astype(dtype))


def _set_params(bn, g, b, m, v):
    bn.set_gamma(cuopjit.tensor(g))
    bn.set_beta(cuopjit.tensor(b))
    rm, rv = cuopjit.tensor(m), cuopjit.tensor(v)
    bn.set_running_mean(rm)
    bn.set_running_var(rv)
    return rm, rv


def _apply_ref(a, mean, var, g, b, eps=1e-5):
    cs = (1, a.shape[1]) + (1,) * (a.ndim - 2)
    return ((a.astype(np.float64) - mean.reshape(cs)) / np.sqrt(var.reshape(cs).astype(np.float64) + eps)
            * g.reshape(cs) + b.reshape(cs))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batchnorm_inference(rng, dtype, shape):
    c = shape[1]
    a = rng.standard_normal(shape).astype(dtype)
    g, b, m, v = _bn_params(rng, c, dtype)
    bn = _bn(dtype)
    _set_params(bn, g, b, m, v)
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    assert bn.forward(x, y) is y
    check_guards(y)
    assert rel_error(y.to_numpy(), _apply_ref(a, m, v, g, b)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("fold", [True, False], ids=["fold", "finalize"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (8, 16, 33, 33), (64, 32), (2, 3, 4097)])
def test_batchnorm_training(rng, monkeypatch, dtype, shape, fold):
    """Batch statistics over N, H, W; running stats updated like torch.nn.BatchNorm2d (twice); per-plane
    shapes with the finalize folded into the apply and as its own kernel."""
    monkeypatch.setattr(batchnorm, "FOLD_FINALIZE", fold)
    c = shape[1]
    g, b, m, v = _bn_params(rng, c, dtype)
    bn = _bn(dtype, momentum=0.2).train()
    rm, rv = _set_params(bn, g, b, m, v)
    ref_m, ref_v = m.astype(np.float64), v.astype(np.float64)
    axes = (0,) + tuple(range(2, len(shape)))
    for _ in range(2):
        a = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
        x, y = cuopjit.tensor(a), guarded(shape, dtype)
        bn.forward(x, y)
        check_guards(y)
        a64 = a.astype(np.float64)
        mean, var = a64.mean(axis=axes), a64.var(axis=axes)
        n = a.size // c
        assert rel_error(y.to_numpy(), _apply_ref(a, mean, var, g, b)) < TOL[dtype] * 4
        ref_m = 0.8 * ref_m + 0.2 * mean
        ref_v = 0.8 * ref_v + 0.2 * var * n / (n - 1)
        assert rel_error(rm.to_numpy(), ref_m) < TOL[dtype] * 4
        assert rel_error(rv.to_numpy(), ref_v) < TOL[dtype] * 4
    bn.eval()
    bn.forward(x, y)
    assert rel_error(y.to_numpy(), _apply_ref(a, ref_m, ref_v, g, b)) < TOL[dtype] * 4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 4, 33, 33), (1000, 4)])
def test_batchnorm_extreme_inputs(rng, dtype, shape):
    """Channels of huge and tiny scale, a large offset with a small spread, and a constant channel: batch
    statistics that square naively, drop eps or subtract E[x]^2 fail here."""
    big = 1e15 if dtype == np.float32 else 1e150
    cs = (1, 4) + (1,) * (len(shape) - 2)
    scale = np.array([big, 1 / big, 1.0, 0.0]).reshape(cs)
    offset = np.array([0.0, 0.0, 1e4, 7.0]).reshape(cs)
    a = (rng.standard_normal(shape) * scale + offset).astype(dtype)
    g, b = np.ones(4, dtype), rng.standard_normal(4).astype(dtype)
    bn = _bn(dtype).train()
    bn.set_gamma(cuopjit.tensor(g))
    bn.set_beta(cuopjit.tensor(b))
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    bn.forward(x, y)
    check_guards(y)
    axes = (0,) + tuple(range(2, len(shape)))
    a64 = a.astype(np.float64)
    ref = _apply_ref(a, a64.mean(axis=axes), a64.var(axis=axes), g, b)
    got = y.to_numpy()
    tol = [TOL[dtype] * 4, TOL[dtype] * 4, 2e-3 if dtype == np.float32 else 1e-10]
    for ch in range(3):
        assert rel_error(got[:, ch], ref[:, ch]) < tol[ch], f"channel {ch}"
    # the constant channel: a mean within 8 ulps of 7 leaves |x - mean| / sqrt(eps) at most this from beta
    slack = 8 * float(np.spacing(np.array(7.0, dtype))) / np.sqrt(1e-5) + TOL[dtype] * abs(float(b[3]))
    assert np.all(np.abs(got[:, 3] - b[3]) <= slack)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 33, 1000), (1, 7, 33, 33), (33, 1, 64, 64), (4097, 7), (3, 5, 4097),
                                   (2, 1000, 4, 4), (1, 1, 7)])
def test_batchnorm_training_shapes_and_offset(rng, dtype, shape):
    """Training at odd sizes along each axis (per-plane stats with 16-byte loads and shifted sums, or the
    flat Welford kernel; warp-per-channel finalize; apply in reverse), data centred at +-1e4 per channel
    (the sums see deviations, not E[x^2] - E[x]^2), running statistics checked; NaN-poisoned, guarded outputs.
    Per-plane shapes run the finalize folded into the apply (two launches), flat ones three."""
    c = shape[1]
    g, b, m, v = _bn_params(rng, c, dtype)
    bn = _bn(dtype, momentum=0.1).train()
    rm, rv = _set_params(bn, g, b, m, v)
    cs = (1, c) + (1,) * (len(shape) - 2)
    a = (np.sign(rng.standard_normal(cs)) * 1e4 + rng.standard_normal(shape) * 2).astype(dtype)
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    bn.forward(x, y)
    check_guards(y)
    axes = (0,) + tuple(range(2, len(shape)))
    a64 = a.astype(np.float64)
    mean, var = a64.mean(axis=axes), a64.var(axis=axes)
    n = a.size // c
    # float32 holds x near 1e4 to ulp(1e4) / 2 = 4.9e-4: relative to a spread of 2, about 2.5e-4
    tol = 2e-3 if dtype == np.float32 else 1e-9
    assert rel_error(y.to_numpy(), _apply_ref(a, mean, var, g, b)) < tol
    assert rel_error(rm.to_numpy(), 0.9 * m + 0.1 * mean) < TOL[dtype] * 4
    assert rel_error(rv.to_numpy(), 0.9 * v + 0.1 * var * n / (n - 1)) < tol
    per_plane = math.prod(shape[2:]) > 1
    assert [kl.spec.kernel for kl in bn.plan(x, y).launches] == (
        ["batchnorm_stats", "batchnorm_apply"] if per_plane else ["batchnorm_stats", "batchnorm_finalize",
                                                                  "batchnorm_apply"])


@pytest.mark.gpu
@pytest.mark.parametrize("fields", CONFIGS, ids=str)
def test_jit_batchnorm_configs(rng, fields):
    bn = cuopjit.BatchNormFloat()
    jit = cuopjit.JITBatchNormFloat(bn)
    jit.set_jit_config(make_config(**fields))
    shape = (3, 5, 33, 32)
    a = rng.standard_normal(shape).astype(np.float32)
    x, y = cuopjit.tensor(a), cuopjit.empty(shape, np.float32).fill(float("nan"))
    jit.forward(x, y)  # defaults: gamma 1, beta 0, mean 0, var 1
    assert rel_error(y.to_numpy(), a / math.sqrt(1 + 1e-5)) < TOL[np.float32]


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_seed_configuration_runs(rng, dtype, fields):
    """The cuOP README's configurations (every kernel_type x tile_size, the full JIT example) run and are right,
    in inference and training.

    Inference computes x * s + (b - m * s) with s = g * rsqrt(v + eps): a few roundings of each term, so
    |y - ref| <= 8 eps (|x s| + |m s| + |b|). Training's Welford mean and M2 over count values add about
    2 eps per serial update and per level of the combine tree: norm-wise (4 log2(count) + 16) eps."""
    eps = float(np.finfo(dtype).eps)
    wrapper = cuopjit.JITBatchNormFloat if dtype == np.float32 else cuopjit.JITBatchNormDouble
    for shape in ((4, 6, 33, 33), (8, 16, 16, 16), (64, 32), (2, 3, 4097)):
        c = shape[1]
        g, b, m, v = _bn_params(rng, c, dtype)
        bn = _bn(dtype, momentum=0.2)
        rm, rv = _set_params(bn, g, b, m, v)
        jit = wrapper(bn)
        jit.set_jit_config(make_config(**fields))
        a = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
        x, y = cuopjit.tensor(a), cuopjit.empty(shape, dtype).fill(float("nan"))
        assert jit.forward(x, y) is y
        cs = (1, c) + (1,) * (len(shape) - 2)
        s = (g.astype(np.float64) / np.sqrt(v.astype(np.float64) + 1e-5)).reshape(cs)
        bound = 8 * eps * (np.abs(a * s) + np.abs(m.reshape(cs) * s) + np.abs(b.reshape(cs)))
        assert np.all(np.abs(y.to_numpy() - _apply_ref(a, m, v, g, b)) <= bound), (shape, fields)
        bn.train()
        y.fill(float("nan"))
        jit.forward(x, y)
        axes = (0,) + tuple(range(2, len(shape)))
        a64 = a.astype(np.float64)
        mean, var = a64.mean(axis=axes), a64.var(axis=axes)
        count = a.size // c
        tol = (4 * math.log2(count) + 16) * eps
        assert rel_error(y.to_numpy(), _apply_ref(a, mean, var, g, b)) < tol, (shape, fields)
        assert rel_error(rm.to_numpy(), 0.8 * m + 0.2 * mean) < tol
        assert rel_error(rv.to_numpy(), 0.8 * v + 0.2 * var * count / (count - 1)) < tol
        assert jit.get_performance_profile().kernel_name.startswith("batchnorm_")


@pytest.mark.gpu
def test_batchnorm_errors():
    bn = cuopjit.BatchNormFloat()
    bn.set_gamma(cuopjit.ones([4]))
    x = cuopjit.zeros([2, 3, 5, 5])
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma has shape \[4\], expected \[3\] \(x has shape "
                                         r"\[2, 3, 5, 5\], C = 3\)"):
        bn.forward(x, cuopjit.zeros([2, 3, 5, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: gamma must be 1-D, got shape \[2, 2\]"):
        bn.set_gamma(cuopjit.ones([2, 2]))
    bn = cuopjit.BatchNormFloat()
    with pytest.raises(ValueError, match=r"BatchNormFloat: y has shape \[2, 3, 5\], expected x's shape"):
        bn.forward(x, cuopjit.zeros([2, 3, 5]))
    with pytest.raises(ValueError, match=r"BatchNormFloat: x must be N x C or N x C x H x W"):
        bn.forward(cuopjit.zeros([5]), cuopjit.zeros([5]))
    with pytest.raises(ValueError, match="training needs more than one value per channel"):
        bn.train().forward(cuopjit.zeros([1, 3]), cuopjit.zeros([1, 3]))
    assert bn.forward(cuopjit.empty([0, 3, 2, 2]), cuopjit.empty([0, 3, 2, 2])).shape == (0, 3, 2, 2)
    assert bn.running_mean is not None   # the defaults were created by the forward before the error
    empty = cuopjit.BatchNormFloat()
    assert empty.forward(cuopjit.empty([0, 3]), cuopjit.empty([0, 3])).shape == (0, 3)
    assert empty.running_mean is None    # an empty forward creates nothing
