"""Softmax and LayerNorm in float16 and bfloat16: read exactly into float32, computed in float32, rounded once on
store. CPU: the dtype helpers of ops/base.py, plans (16-byte vectors of 8, float32 workspace and eps), every
kernel compiles for sm_80 and sm_90a without spills. GPU: float64 references computed from the 16-bit inputs,
bounds from the precision, NaN-poisoned guarded outputs, odd sizes, every kernel kind, strided axes, torch."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.ops.base import compute_dtype, dtype_tag, scalar_t, storage_t, vector_width
from cuopjit.ops.rows import common as rows, layernorm, softmax
from cuopjit.ops.rows.layernorm import LayerNormProblem
from cuopjit.ops.rows.softmax import SoftmaxProblem
from cuopjit.recipes import placeholder

from conftest import check_guards, compiles_without_spills, guarded, make_config
from half_bounds import HALF, assert_half, layernorm_half, softmax_half

SM80, SM90, SM90A = target.named("sm_80"), target.named("sm_90"), target.named("sm_90a")
SOFTMAX = {"float16": cuopjit.SoftmaxHalf, "bfloat16": cuopjit.SoftmaxBFloat16}
LAYERNORM = {"float16": cuopjit.LayerNormHalf, "bfloat16": cuopjit.LayerNormBFloat16}
# the configs whose half kernels must not spill (explicit tile_size 64/128 and block_size 1024 rows spill in
# float32 too: a register budget the config asks for)
NO_SPILL_CONFIGS = [{}, {"kernel_type": "warp_optimized"}, {"kernel_type": "simple"},
                    {"enable_loop_unroll": False, "enable_memory_coalescing": False, "enable_shared_memory_opt": False}]


def _half_plans(family, problems, fields: dict, t: target.Target) -> list:
    cfg = make_config(**fields).snapshot()
    return [family.default_plan(p, cfg, t) for p in problems() if p.dtype in HALF]


# --- CPU ------------------------------------------------------------------------------------------------------
def test_dtype_helpers_know_the_16_bit_types():
    f16, bf16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
    assert [dtype_tag(d) for d in (np.float32, np.float64, f16, bf16)] == ["f32", "f64", "f16", "bf16"]
    assert scalar_t(f16) == scalar_t(bf16) == "float" and scalar_t(np.float64) == "double"
    assert (storage_t(f16), storage_t(bf16), storage_t(np.float32)) == ("half_t", "bf16_t", "float")
    assert compute_dtype(f16) == compute_dtype(bf16) == np.float32 and compute_dtype(np.float64) == np.float64
    assert vector_width(f16) == vector_width(bf16) == 8


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_half_kernel_compiles_without_spills(arch):
    t = target.named(arch)
    specs = {s for fields in NO_SPILL_CONFIGS for family, problems in ((softmax.FAMILY, softmax.problems),
                                                                        (layernorm.FAMILY, layernorm.problems))
             for plan in _half_plans(family, problems, fields, t) for s in plan.specs}
    assert any("_f16_" in s.name for s in specs) and any("_bf16_" in s.name for s in specs)
    compiles_without_spills(sorted(specs, key=lambda s: s.name), arch)


def test_half_problems_cover_every_kernel_kind():
    families = ((softmax.FAMILY, softmax.problems), (layernorm.FAMILY, layernorm.problems))
    kinds = {kl.spec.kernel for fam, probs in families for plan in _half_plans(fam, probs, {}, SM90)
             for kl in plan.launches}
    assert kinds == {"softmax_rows", "softmax_stream", "softmax_partials", "softmax_apply", "softmax_strided",
                     "layernorm_rows", "layernorm_stream", "layernorm_partials", "layernorm_apply", "layernorm_reset",
                     "layernorm_resident"}


@pytest.mark.parametrize("dtype", HALF)
def test_half_plans_store_16_bits_and_compute_in_float32(dtype):
    cfg = make_config().snapshot()
    plan = softmax.FAMILY.default_plan(SoftmaxProblem(dtype, 4096, 1024, 1, True), cfg, SM90)
    (kl,) = plan.launches
    params = dict(kl.spec.params)
    assert params["VEC"] == 8 and params["scalar_t"] == "float" and params["elem_t"] == storage_t(np.dtype(dtype))
    assert kl.spec.name.startswith(f"softmax_rows_{dtype_tag(np.dtype(dtype))}_v8") and kl.units == "FP32 cores"
    split = softmax.FAMILY.default_plan(SoftmaxProblem(dtype, 16, 1 << 20, 1, True), cfg, SM90)
    assert split.workspace == split.launches[0].grid[0] * 2 * 4      # (max, sum) partials in float32
    stream = softmax.FAMILY.default_plan(SoftmaxProblem(dtype, 4096, 32768, 1, True), cfg, SM90).launches[0]
    assert stream.spec.kernel == "softmax_stream" and stream.shared == 32768 * 2   # the whole row, as stored
    ln = layernorm.FAMILY.default_plan(LayerNormProblem(dtype, 4096, 1024, 1, 2, True, 1e-5), cfg, SM90)
    assert ln.launches[0].args[-1].kind == "f32"                      # eps in the compute dtype


def test_a_stash_of_2_byte_scalars_is_not_copied_by_cp_async():
    """cp.async moves 4, 8 or 16 bytes: unaligned float16 rows stash through registers."""
    f16 = np.dtype(np.float16)
    assert rows.plan_stream(f16, SM90, 5001, 1, 512, 2, 2, copy_async=True).copy_async is False
    assert rows.plan_stream(f16, SM90, 1024, 8, 512, 2, 2, copy_async=True).copy_async is True


def test_half_layouts_follow_their_measured_tables():
    """Registers hold floats, 16-bit rows hold 4 vectors of 8 per thread (a row of up to 1024 in one warp), the
    stream kernel runs 2 blocks of 512 per SM with the whole row stashed as stored; float32 keeps 8 per thread."""
    cfg = make_config().snapshot()
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    assert [(p.nv, p.tpr, p.rpb) for p in (rows.plan_rows(f16, cfg, SM90, 4096, n, 8) for n in (768, 1024, 128))] == \
        [(3, 32, 8), (4, 32, 8), (4, 4, 64)]
    p32 = rows.plan_rows(f32, cfg, SM90, 4096, 1024, 4)
    assert (p32.nv, p32.tpr) == (2, 128)
    for long_rows in (softmax.long_rows(f16), layernorm.long_rows(f16)):
        p = rows.plan_rows(f16, cfg, SM90, 4096, 32768, 8, long_rows)
        assert (p.kind, p.threads, p.occ, p.stash, p.copy_async) == ("stream", 512, 1024, 4096, True)


def test_operands_of_another_dtype_are_refused():
    x16, x32 = placeholder((4, 8), np.float16), placeholder((4, 8), np.float32)
    with pytest.raises(TypeError, match="^SoftmaxHalf: x is float32, SoftmaxHalf works on float16$"):
        cuopjit.SoftmaxHalf().plan(x32, x16)
    with pytest.raises(TypeError, match="^LayerNormBFloat16: gamma is float16, LayerNormBFloat16 works on bfloat16$"):
        cuopjit.LayerNormBFloat16().set_gamma(placeholder((8,), np.float16))
    with pytest.raises(TypeError, match="JITSoftmaxHalf wraps a SoftmaxHalf, got SoftmaxBFloat16"):
        cuopjit.JITSoftmaxHalf(cuopjit.SoftmaxBFloat16())


# --- GPU ------------------------------------------------------------------------------------------------------
SHAPES = [(1,), (7,), (33,), (1000, 33), (33, 1000), (4097, 7), (7, 4097), (3, 33, 7), (2, 1000, 5), (5, 1, 7),
          (1, 4097), (2, 7, 33, 5), (3, 64, 16), (4, 1024, 24)]
LONG = [(3, 8192), (3, 20000), (2, 32768), (2, 65537), (140, 8192), (133, 20000), (133, 10001), (1, 300000)]


def _input(rng, shape, dtype, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_half_every_axis(rng, dtype, shape):
    a = _input(rng, shape, dtype)
    x, op = cuopjit.tensor(a), SOFTMAX[dtype]()
    for axis in list(range(len(shape))) + [-1]:
        y = guarded(shape, dtype)
        assert op.forward(x, y, axis=axis) is y
        check_guards(y)
        assert_half(y.to_numpy(), *softmax_half(a, axis), f"softmax {shape} axis {axis}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", LONG)
@pytest.mark.parametrize("fields", [None, {"enable_shared_memory_opt": False}], ids=["auto", "no-smem-opt"])
def test_softmax_half_long_rows(rng, dtype, shape, fields):
    """Registers of one block, clusters, the stream kernel (>= one row per SM) and split rows; aligned or not."""
    a = _input(rng, shape, dtype)
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    op = SOFTMAX[dtype]()
    if fields is not None:
        op = {"float16": cuopjit.JITSoftmaxHalf, "bfloat16": cuopjit.JITSoftmaxBFloat16}[dtype](op)
        op.set_jit_config(make_config(**fields))
    op.forward(x, y)
    check_guards(y)
    assert_half(y.to_numpy(), *softmax_half(a, -1), f"softmax {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("stash", ["registers", "async", "none"])
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(140, 8192), (133, 5001)])
def test_half_stream_kernels(rng, monkeypatch, dtype, shape, stash):
    """Softmax's and LayerNorm's stream kernels with the stash (x as stored) filled through registers or by
    cp.async, or no stash; the 16-bit softmax takes the stashed part's exp twice."""
    monkeypatch.setattr(rows, "plan_rows", lambda dt, cfg, t, n, length, vec, long_rows=None: rows.plan_stream(
        dt, t, -(-length // vec), vec, 512, 2, 2, stash=stash != "none", l2_budget=1 << 40,
        copy_async=stash == "async"))
    a = _input(rng, shape, dtype)
    x, y, op = cuopjit.tensor(a), guarded(shape, dtype), SOFTMAX[dtype]()
    op.forward(x, y)
    assert op.plan(x, y).launches[0].spec.kernel == "softmax_stream"
    check_guards(y)
    assert_half(y.to_numpy(), *softmax_half(a, -1), f"softmax stream {shape} ({stash})")
    g, b = _input(rng, shape[-1:], dtype, 1.0), _input(rng, shape[-1:], dtype, 1.0)
    ln = LAYERNORM[dtype]()
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    y = guarded(shape, dtype)
    ln.forward(x, y)
    assert ln.plan(x, y).launches[0].spec.kernel == "layernorm_stream"
    check_guards(y)
    assert_half(y.to_numpy(), *layernorm_half(a, g, b, 1e-5, "last1"), f"layernorm stream {shape} ({stash})")


LN_CASES = [((1, 1), "last1"), ((7, 1), "none"), ((33, 7), "last1"), ((4097, 33), "last1"), ((33, 1000), "none"),
            ((5, 7, 9), "last2"), ((2, 8, 7, 9), "channel"), ((3, 4097), "last1"), ((140, 8192), "last1"),
            ((8, 32768), "last1"), ((4, 20000), "none"), ((2, 1 << 20), "last1"), ((2, 64, 128, 128), "channel")]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape, form", LN_CASES, ids=str)
@pytest.mark.parametrize("fields", [None, {"enable_shared_memory_opt": False}], ids=["auto", "no-smem-opt"])
def test_layernorm_half(rng, dtype, shape, form, fields):
    """Rows in registers, clusters, stream, resident and split-row kernels; gamma and beta of x's dtype (per
    trailing dims, or cuOP's per-channel form), or none; offset inputs (the mean is not 0)."""
    a = (rng.standard_normal(shape) * 2 + 4).astype(np.float32).astype(dtype)
    gshape = None if form == "none" else (shape[1],) if form == "channel" else shape[len(shape) - int(form[4:]):]
    g = None if gshape is None else _input(rng, gshape, dtype, 1.0)
    b = None if gshape is None else _input(rng, gshape, dtype, 1.0)
    op = LAYERNORM[dtype]()
    if g is not None:
        op.set_gamma(cuopjit.tensor(g))
        op.set_beta(cuopjit.tensor(b))
    if fields is not None:
        op = {"float16": cuopjit.JITLayerNormHalf, "bfloat16": cuopjit.JITLayerNormBFloat16}[dtype](op)
        op.set_jit_config(make_config(**fields))
    x, y = cuopjit.tensor(a), guarded(shape, dtype)
    assert op.forward(x, y) is y
    check_guards(y)
    assert_half(y.to_numpy(), *layernorm_half(a, g, b, 1e-5, form), f"layernorm {shape} {form}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
def test_half_rows_run_on_torch_tensors(rng, dtype):
    torch = pytest.importorskip("torch")
    a = _input(rng, (64, 1000), dtype)
    t = torch.from_numpy(a.view(np.int16)).cuda().view(getattr(torch, dtype))
    out = torch.empty_like(t)
    assert SOFTMAX[dtype]().forward(t, out) is out
    torch.cuda.synchronize()
    got = out.view(torch.int16).cpu().numpy().view(np.uint16).view(a.dtype)
    assert_half(got, *softmax_half(a, -1), "softmax on torch tensors")
