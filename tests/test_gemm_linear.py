"""Linear layers and attention: transposed operands of GemmFloat/Double, MatMul and BatchMatMul (`trans_a` /
`trans_b` settings and layout "transposed" views, read where they lie: the GEMM problem's trans flags, never a
copy), checked by running the plans in NumPy on the CPU; the new wgmma tile widths compile for sm_90a without
spills; on a GPU, `A @ W^T` with M = 1, 7, 33, 1000 and a BERT-base layer's products at reduced batch against
float64 in fp32, TF32, 3xTF32 and float64, outputs NaN-poisoned inside canaries."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.layout import TRANSPOSED, to_storage
from cuopjit.ops.gemm import matmul, plans as gk, wgmma as gw, wgmma_plan
from cuopjit.target import named
from cuopjit.tensor import Tensor

import blas_emulate
from blas_emulate import fake
from conftest import check_guards, guarded, make_config

SM90, SM90A, SM80 = named("sm_90"), named("sm_90a"), named("sm_80")
DTYPES = [np.float32, np.float64]


def _fake_t(shape, dtype="float32", ptr=1 << 20):
    """A fake Tensor of logical `shape` in layout "transposed" (stored with its last two dimensions swapped)."""
    return Tensor._view(ptr, tuple(shape), np.dtype(dtype), 0, None, TRANSPOSED)


def _emulate(op, a, b, c_shape, views):
    """Plan op.forward(a, b, c) on fake tensors (views[i]: operand i is a transposed view) and run it in NumPy;
    returns C and the plan."""
    tensors, bufs = [], []
    for i, (x, view) in enumerate(zip((a, b), views)):
        tensors.append((_fake_t if view else fake)(x.shape, op.dtype.name, (i + 1) << 24))
        bufs.append((to_storage(x, TRANSPOSED) if view else x).astype(np.float64).ravel().copy())
    tensors.append(fake(c_shape, op.dtype.name, 3 << 24))
    plan = op.plan(*tensors, target=SM90)
    bufs += [np.full(int(np.prod(c_shape)), np.nan), np.full(max(1, plan.workspace // op.dtype.itemsize), np.nan)]
    blas_emulate.run(plan, bufs, op.dtype.itemsize)
    return bufs[2].reshape(c_shape), plan


def _op_t(x, trans):
    return np.swapaxes(x, -1, -2) if trans else x


# --- CPU: transposed operands as plans ---------------------------------------------------------------

# (shape of a, shape of b, trans_a, trans_b, a a transposed view, b a transposed view)
CASES = [((4, 5, 3), (4, 6, 3), False, True, False, False),       # attention scores: Q @ K^T, K as stored
         ((4, 3, 5), (4, 3, 6), True, False, False, False),
         ((4, 3, 5), (4, 6, 3), True, True, False, False),
         ((4, 5, 3), (4, 3, 6), False, False, False, True),       # K^T a transposed view (torch K.mT)
         ((4, 5, 3), (4, 6, 3), False, True, False, True),        # a flag on a transposed view: stored as op(b)
         ((4, 5, 3), (4, 3, 6), False, False, True, False),
         ((4, 5, 3), (1, 6, 3), False, True, False, False),       # one K broadcast over the batch
         ((1, 3, 5), (4, 3, 6), True, False, True, True),
         ((2, 1, 5, 3), (3, 6, 3), False, True, False, False)]    # MatMul: mixed broadcast, a launch per outer index


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa, sb, ta, tb, va, vb", CASES)
def test_transposed_operands_plan_numpy_matmul(rng, dtype, sa, sb, ta, tb, va, vb):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ref = np.matmul(_op_t(a, ta), _op_t(b, tb))
    cls = (cuopjit.BatchMatMulFloat if dtype == np.float32 else cuopjit.BatchMatMulDouble) if len(sa) == len(sb) == 3 \
        else (cuopjit.MatMulFloat if dtype == np.float32 else cuopjit.MatMulDouble)
    out, plan = _emulate(cls(trans_a=ta, trans_b=tb), a, b, ref.shape, (va, vb))
    assert np.allclose(out, ref, rtol=1e-12, atol=1e-12)
    # no copy: only the product's own launches (one, or one per outer index of a mixed broadcast)
    assert {kl.spec.kernel for kl in plan.launches} == {"gemm"}
    name = plan.launches[0].spec.name
    assert f"_{'t' if ta != va else 'n'}{'t' if tb != vb else 'n'}_" in name


def test_a_flag_and_a_view_plan_the_same_kernels():
    """K as stored with trans_b and K^T as a transposed view are one problem; a layout change re-plans."""
    q, k, s = fake((96, 512, 64)), fake((96, 512, 64), ptr=1 << 30), fake((96, 512, 512), ptr=1 << 31)
    cfg = make_config(enable_tensor_core=True).snapshot()
    flag = cuopjit.BatchMatMulFloat(trans_b=True)
    view = cuopjit.BatchMatMulFloat()
    assert flag.problem(q, k, s) == view.problem(q, k.mT, s)
    assert matmul.BATCH_FAMILY.default_plan(flag.problem(q, k, s), cfg, SM90).launches[0].spec.name.endswith("_nt_batched")
    # a contiguous K^T of the same shape is the other problem, and the view's layout keys another plan
    kt = fake((96, 64, 512), ptr=1 << 30)
    assert view.problem(q, k.mT, s).gemm.trans_b and not view.problem(q, kt, s).gemm.trans_b
    assert kt.shape == k.mT.shape and kt.plan_key != k.mT.plan_key


def test_trans_flags_are_settings_that_rekey_the_plans():
    bmm = cuopjit.BatchMatMulFloat()
    a, b, c = fake((2, 5, 3)), fake((2, 6, 3), ptr=1 << 30), fake((2, 5, 6), ptr=1 << 31)
    with pytest.raises(ValueError, match=r"a has shape \[2, 5, 3\] and b has shape \[2, 6, 3\]: op\(a\) has 3 "
                                         r"columns but op\(b\) has 6 rows"):
        bmm.problem(a, b, c)
    before = bmm.bind(a, b, c)[0]
    bmm.trans_b = 1
    assert bmm.trans_b is True and bmm.bind(a, b, c)[0] != before
    assert bmm.problem(a, b, c).gemm.trans_b
    with pytest.raises(ValueError, match=r"\(trans_b\): op\(a\) has 5 columns but op\(b\) has 3 rows"):
        cuopjit.BatchMatMulFloat(trans_b=True).problem(fake((2, 3, 5)), b, c)
    with pytest.raises(ValueError, match=r"MatMulFloat: trans_b=True needs a matrix .* b has shape \[3\]: set "
                                         r"trans_b=False"):
        cuopjit.MatMulFloat(trans_b=True).problem(fake((5, 3)), fake((3,), ptr=1 << 30), fake((5,), ptr=1 << 31))
    with pytest.raises(ValueError, match=r"c is transposed, BatchMatMulFloat takes contiguous tensors here"):
        bmm.problem(a, b, fake((2, 6, 5), ptr=1 << 31).mT)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a, view_a, trans_b, view_b", [(False, False, True, False), (False, False, False, True),
                                                              (True, True, True, True), (False, True, False, False),
                                                              (True, False, False, True)])
def test_gemm_reads_transposed_views_as_its_trans_flags(rng, dtype, trans_a, view_a, trans_b, view_b):
    """GemmFloat/Double: a transposed view of A or of the weight is the other trans flag on the same memory
    (nn.Linear's `x @ W.T`: the weight W [N, K] as stored, or its view W.T with no flag)."""
    m, n, k = 7, 6, 5
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    w = rng.standard_normal((n, k) if trans_b else (k, n))
    gemm = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)(trans_a, trans_b, 0.5, 0.0)
    gemm.set_weight((_fake_t if view_b else fake)(w.shape, gemm.dtype.name, 1 << 40))
    blas_emulate._WEIGHTS[id(gemm)] = to_storage(w, TRANSPOSED) if view_b else w
    at = (_fake_t if view_a else fake)(a.shape, gemm.dtype.name, 1 << 24)
    plan = gemm.plan(at, fake((m, n), gemm.dtype.name, 2 << 24), target=SM90)
    stored_a = (to_storage(a, TRANSPOSED) if view_a else a).ravel()
    bufs = [np.asarray(blas_emulate._WEIGHTS[id(gemm)], np.float64).ravel().copy(), stored_a.copy(),
            np.full(m * n, np.nan), np.full(max(1, plan.workspace // gemm.dtype.itemsize), np.nan)]
    # plan operands are a, b, c: put the weight second
    bufs = [bufs[1], bufs[0], bufs[2], bufs[3]]
    blas_emulate.run(plan, bufs, gemm.dtype.itemsize)
    ref = 0.5 * (_op_t(a, trans_a) @ _op_t(w, trans_b))
    assert np.allclose(bufs[2].reshape(m, n), ref, rtol=1e-12, atol=1e-12)
    problem = gemm.problem(at, fake((m, n), gemm.dtype.name, 2 << 24))
    assert (problem.trans_a, problem.trans_b) == (trans_a != view_a, trans_b != view_b)


def test_the_weight_layout_is_part_of_the_gemm_settings():
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(fake((64, 64), ptr=1 << 30))
    contiguous = gemm._state
    gemm.set_weight(_fake_t((64, 64), ptr=1 << 30))
    assert gemm._state != contiguous


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("m, n", [(1, 9), (9, 1), (1, 1)])
def test_one_row_or_column_plans_gemv_on_the_operands_as_stored(rng, m, n, trans_a, trans_b):
    """C with one row (column) is GEMV on B (A) as stored, the vector operand and C read in place; a batch, an
    epilogue-free config naming a tile, and K = 0 keep the GEMM kernels."""
    k = 7
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    w = rng.standard_normal((n, k) if trans_b else (k, n))
    c0 = rng.standard_normal((m, n))
    gemm = cuopjit.GemmFloat(trans_a, trans_b, 1.5, -0.5)
    gemm.set_weight(fake(w.shape, "float32", 1 << 40))
    plan = gemm.plan(fake(a.shape, "float32", 1 << 24), fake((m, n), "float32", 2 << 24), target=SM90)
    assert plan.choice.startswith("gemv_") and {kl.spec.kernel for kl in plan.launches} <= {"gemv_n", "gemv_t",
                                                                                             "splitk_reduce"}
    bufs = [a.ravel().copy(), w.ravel().copy(), c0.ravel().copy(), np.full(max(1, plan.workspace // 4), np.nan)]
    blas_emulate.run(plan, bufs, 4)
    ref = 1.5 * (_op_t(a, trans_a) @ _op_t(w, trans_b)) - 0.5 * c0
    assert np.allclose(bufs[2].reshape(m, n), ref, rtol=1e-12, atol=1e-12)
    cfg = make_config(enable_tensor_core=True).snapshot()
    problem = gk.packed("float32", m, n, k, trans_a, trans_b)
    assert gk.choices(problem, cfg, SM90)[0].label.startswith("gemv_")
    assert not gk.choices(dataclasses.replace(problem, batch=2, stride_a=m * k, stride_b=n * k, stride_c=m * n), cfg,
                          SM90)[0].label.startswith("gemv_")
    assert not gk.choices(problem, make_config(tile_size=32).snapshot(), SM90)[0].label.startswith("gemv_")
    assert not gk.choices(gk.packed("float32", m, n, 0), cfg, SM90)[0].label.startswith("gemv_")
    with pytest.raises(ValueError, match=r"a 4 x 4 product is no matrix-vector product .* take another choice"):
        gk.plan(gk.packed("float32", 4, 4, 4), gk.choices(problem, cfg, SM90)[0], SM90)


@pytest.mark.parametrize("m, n, k, trans_a, trans_b", [(33, 1024, 4096, False, True), (7, 768, 3072, False, False),
                                                   (36, 96, 4096, True, True), (256, 768, 3072, False, True)])
def test_few_tiles_over_a_long_k_run_as_a_batch_of_k_slices(rng, m, n, k, trans_a, trans_b):
    """TF32 with too few tiles for the SMs and a long K: whole K slices as batch entries of the wgmma kernel
    (K-major operands step along K, MN-major ones by rows), alpha times each partial into the workspace, then
    one reduction with beta; the plan computes op(A) @ op(B) (run in NumPy)."""
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    w = rng.standard_normal((n, k) if trans_b else (k, n))
    c0 = rng.standard_normal((m, n))
    gemm = cuopjit.GemmFloat(trans_a, trans_b, 0.5, 2.0)
    gemm.set_weight(fake(w.shape, "float32", 1 << 40))
    cfg = make_config(enable_tensor_core=True).snapshot()
    problem = gemm.problem(fake(a.shape, "float32", 1 << 24), fake((m, n), "float32", 2 << 24))
    plan = gk.FAMILY.default_plan(problem, cfg, SM90)
    main, total = plan.launches
    splits = int(plan.choice.rsplit("_splitk", 1)[1])
    assert main.spec.name.endswith("_batched") and total.spec.kernel == "splitk_reduce" and k % (32 * splits) == 0
    bufs = [a.ravel().copy(), w.ravel().copy(), c0.ravel().copy(), np.full(plan.workspace // 4, np.nan)]
    blas_emulate.run(plan, bufs, 4)
    ref = 0.5 * (_op_t(a, trans_a) @ _op_t(w, trans_b)) + 2.0 * c0
    assert np.allclose(bufs[2].reshape(m, n), ref, rtol=1e-10, atol=1e-10)
    # the unsplit build stays a candidate; a K that does not cut into whole slices, or an epilogue, is not split
    assert not gk.choices(problem, cfg, SM90)[1].label.endswith(f"_splitk{splits}")
    odd = dataclasses.replace(problem, k=k + 4, lda=problem.lda + (0 if trans_a else 4),
                              ldb=problem.ldb + (4 if trans_b else 0))
    assert "_splitk" not in gk.choices(odd, cfg, SM90)[0].label or (k + 4) % 32 == 0
    with pytest.raises(ValueError, match=r"K = 100 does not cut into 2 whole slices of at least 128"):
        gk.plan(gk.packed("float32", m, n, 100, trans_a, trans_b), dataclasses.replace(gk.choices(problem, cfg, SM90)[0],
                                                                                     splits=2), SM90)


# --- CPU: the tile widths the heuristic adds compile without spills ------------------------------------

@pytest.mark.parametrize("consumers, qn, split, per_sm, trans_b", [
    (2, 192, False, 1, True), (2, 224, False, 1, False), (2, 160, False, 1, True), (2, 96, False, 1, True),
    (1, 96, False, 2, True), (1, 192, False, 1, True), (2, 96, True, 1, True)])
def test_new_tile_widths_compile_for_sm90a_without_spills(consumers, qn, split, per_sm, trans_b):
    choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90, per_sm), split=split,
                            per_sm=per_sm)
    for problem in (gk.packed("float32", 1000, 2304, 768, False, trans_b),
                    dataclasses.replace(gk.packed("float32", 512, 512, 64, False, trans_b), batch=3,
                                        stride_a=512 * 64, stride_b=512 * 64, stride_c=512 * 512)):
        launch = wgmma_plan.plan(problem, choice, SM90).launches[-1]
        built = pipeline.compile_fresh(launch.spec, "sm_90")
        assert built.spill_bytes == 0 and "C7513" not in built.log and "C7508" not in built.log, built.log
        assert gw.smem_bytes(consumers, qn, choice.stages, split) <= gw.smem_limit(SM90, per_sm)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_linear_and_attention_plans_compile_everywhere(arch):
    """The BERT layer's products with transposed operands, every mode, compile for sm_80 and sm_90a, no spills."""
    t = named(arch)
    q, k, s = fake((4, 512, 64)), fake((4, 512, 64), ptr=1 << 30), fake((4, 512, 512), ptr=1 << 31)
    problems = [(matmul.BATCH_FAMILY, cuopjit.BatchMatMulFloat(trans_b=True).problem(q, k, s)),
                (gk.FAMILY, gk.packed("float32", 33, 2304, 768, False, True)),
                (gk.FAMILY, gk.packed("float32", 1000, 768, 3072, False, True)),
                (gk.FAMILY, gk.packed("float32", 33, 1024, 4096, False, True))]     # TF32: K slices as a batch
    for fields in ({}, {"enable_tensor_core": True}, {"precision": "3xtf32"}):
        for family, problem in problems:
            plan = family.default_plan(problem, make_config(**fields).snapshot(), t)
            plan.check_target(t)
            for spec in plan.specs:
                built = pipeline.compile_fresh(spec, arch)
                assert built.spill_bytes == 0, f"{spec.name} spills {built.spill_bytes} bytes"


# --- GPU ---------------------------------------------------------------------------------------------

MODES = {"fp32": {}, "tf32": {"enable_tensor_core": True}, "3xtf32": {"precision": "3xtf32"}}


def _tf32(x):
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def _bound(a, b, k, dtype, mode):
    """Componentwise: (K + 16) roundings of the working precision times |op(A)| |op(B)| (TF32: of the operands as
    the tensor core reads them, truncated to 10 mantissa bits; the reference then uses those operands too)."""
    return (k + 16) * np.finfo(dtype).eps * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))


def _check(out, a, b, k, dtype, mode, name):
    if mode == "tf32" and "_wgmma_" in name and "3xtf32" not in name:     # GEMV and SIMT plans are exact float32
        a, b = _tf32(a), _tf32(b)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    err = np.abs(out.astype(np.float64) - ref)
    bound = _bound(a, b, k, dtype, mode)
    assert np.all(np.isfinite(out)) and np.all(err <= bound), f"{name}: error {np.max(err - bound):.3g} over the bound"


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fp32", "tf32", "3xtf32", "float64"])
@pytest.mark.parametrize("m", [1, 7, 33, 1000])
@pytest.mark.parametrize("n, k", [(768, 768), (2304, 768), (768, 3072)])
@pytest.mark.parametrize("view", [False, True], ids=["trans_b", "view"])
def test_a_times_w_transposed_matches_float64(rng, m, n, k, mode, view):
    """y = x @ W^T with W [N, K] as nn.Linear stores it: trans_b=True, or W.T as a transposed view."""
    dtype = np.float64 if mode == "float64" else np.float32
    x = rng.standard_normal((m, k)).astype(dtype)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(dtype)
    gemm = (cuopjit.GemmDouble if mode == "float64" else cuopjit.GemmFloat)(trans_b=not view)
    wt = cuopjit.tensor(w)
    gemm.set_weight(wt.mT if view else wt)
    op = (cuopjit.JITGemmDouble if mode == "float64" else cuopjit.JITGemmFloat)(gemm)
    op.set_jit_config(make_config(**MODES.get(mode, {})))
    c = guarded([m, n], dtype)
    assert op.forward(cuopjit.tensor(x), c) is c
    check_guards(c)
    name = op.get_performance_profile().kernel_name
    assert "_nt" in name or "gemv" in name or "splitk" in name, name
    _check(c.to_numpy(), x, w.T, k, dtype, mode, name)


# BERT-base layer products at 2 sequences (1024 tokens, 24 heads): (batch, m, n, k, trans_b, b a transposed view)
BERT = [(1, 1024, 2304, 768, True, False), (1, 1024, 768, 768, True, False), (1, 1024, 3072, 768, True, False),
        (1, 1024, 768, 3072, True, False), (24, 512, 512, 64, True, False), (24, 512, 512, 64, False, True),
        (24, 512, 64, 512, False, False), (7, 256, 256, 256, False, False), (24, 512, 512, 64, True, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fp32", "tf32", "3xtf32", "float64"])
@pytest.mark.parametrize("batch, m, n, k, trans_b, view", BERT)
def test_bert_products_match_float64(rng, batch, m, n, k, trans_b, view, mode):
    """The layer's four linear products and its attention products through BatchMatMul (K as stored with
    trans_b, or K^T as a transposed view), every mode; a broadcast K too (batch 1 against the queries')."""
    dtype = np.float64 if mode == "float64" else np.float32
    a = rng.standard_normal((batch, m, k)).astype(dtype)
    stored = rng.standard_normal((batch, n, k) if trans_b != view else (batch, k, n)).astype(dtype)
    bt = cuopjit.tensor(stored)
    op = (cuopjit.BatchMatMulDouble if mode == "float64" else cuopjit.BatchMatMulFloat)(trans_b=trans_b)
    jit = (cuopjit.JITBatchMatMulDouble if mode == "float64" else cuopjit.JITBatchMatMulFloat)(op)
    jit.set_jit_config(make_config(**MODES.get(mode, {})))
    c = guarded([batch, m, n], dtype)
    jit.forward(cuopjit.tensor(a), bt.mT if view else bt, c)
    check_guards(c)
    name = jit.get_performance_profile().kernel_name
    b = np.swapaxes(stored, 1, 2) if trans_b != view else stored     # op(B) as stored or viewed
    out = c.to_numpy()
    for z in range(batch):
        _check(out[z], a[z], b[z], k, dtype, mode, f"{name} entry {z}")
    if batch > 1 and trans_b and not view:      # one K for every query batch entry (stride 0)
        c1 = guarded([batch, m, n], dtype)
        jit.forward(cuopjit.tensor(a), cuopjit.tensor(np.ascontiguousarray(stored[:1])), c1)
        check_guards(c1)
        for z in (0, batch - 1):
            _check(c1.to_numpy()[z], a[z], b[0], k, dtype, mode, f"{name} broadcast entry {z}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", [(False, True), (False, False), (True, True)], ids=["nt", "nn", "tt"])
def test_new_tile_widths_match_float64(rng, layout):
    """The widths the cost model added (192, 160, 96; one consumer 96 two per SM and 192), TF32 and 3xTF32 96,
    on partial tiles in both directions, batched with a broadcast operand and not, alpha/beta, C poisoned."""
    from test_gemm_wgmma import _batched_problem, _run_batched
    for consumers, qn, per_sm, split in ((2, 192, 1, False), (2, 160, 1, False), (2, 96, 1, False), (1, 96, 2, False),
                                         (1, 192, 1, False), (2, 96, 1, True)):
        choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90, per_sm), split=split,
                                per_sm=per_sm)
        for batch in (1, 3):
            problem = _batched_problem(batch, 260, 500, 1004, *layout, alpha=0.5, beta=-1.0, bcast="b")
            if batch == 1:
                problem = dataclasses.replace(problem, stride_a=0, stride_b=0, stride_c=0)
            assert choice.label in _run_batched(rng, problem, choice)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("m, n", [(1, 1000), (1, 4099), (1000, 1), (1, 1)])
def test_one_row_or_column_runs_as_gemv(rng, m, n, trans_a, trans_b):
    """C with one row or one column is GEMV on the other operand as stored (every transpose), alpha and beta."""
    k = 777
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, 1.5, -0.5)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm)
    op.set_jit_config(make_config(enable_tensor_core=True))
    c = guarded([m, n], np.float32, fill=c0)
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    assert "gemv_" in op.get_performance_profile().kernel_name
    ref = 1.5 * (_op_t(a.astype(np.float64), trans_a) @ _op_t(b.astype(np.float64), trans_b)) - 0.5 * c0
    bound = (k + 16) * np.finfo(np.float32).eps * (1.5 * np.abs(_op_t(a, trans_a)).astype(np.float64)
                                                    @ np.abs(_op_t(b, trans_b)) + 0.5 * np.abs(c0))
    out = c.to_numpy().astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out - ref) <= bound)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, trans_a, trans_b", [(33, 1024, 4096, False, True), (7, 768, 3072, False, False),
                                                   (36, 96, 4096, True, True), (256, 768, 3072, False, True)])
def test_k_slices_match_float64(rng, m, n, k, trans_a, trans_b):
    """The split-K batch and its reduction on the GPU: alpha, beta on a C read back, canaries, TF32 bound."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, 0.5, 2.0)
    gemm.set_weight(cuopjit.tensor(w))
    op = cuopjit.JITGemmFloat(gemm)
    op.set_jit_config(make_config(enable_tensor_core=True))
    c = guarded([m, n], np.float32, fill=c0)
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    name = op.get_performance_profile().kernel_name
    assert "_batched" in name and "splitk_reduce" in name, name
    ta, tw = _tf32(_op_t(a, trans_a)).astype(np.float64), _tf32(_op_t(w, trans_b)).astype(np.float64)
    ref = 0.5 * (ta @ tw) + 2.0 * c0
    bound = (k + 16) * np.finfo(np.float32).eps * (0.5 * np.abs(ta) @ np.abs(tw) + 2.0 * np.abs(c0))
    out = c.to_numpy().astype(np.float64)
    assert np.all(np.isfinite(out)) and np.all(np.abs(out - ref) <= bound), f"{name}: {np.max(np.abs(out - ref) - bound)}"
