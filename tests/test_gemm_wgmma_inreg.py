"""3xTF32 on the Hopper wgmma GEMM split in the kernel (`inreg`): A and B read where they lie, as TF32 reads them
(nt, nn with D = C^T, tt), P's fragments split into TF32 hi + lo in registers (wgmma's RS form) and Q's tile split
in shared memory by the producer's warps 1-3, no copies. CPU: routing (aligned operands take it, A^T @ B and
unaligned ones the split copies), the narrowness rule, refusals, representative builds compile without spills or
serialised wgmmas. GPU: every layout, builds of one and two consumers (two blocks per SM, a narrower instruction),
odd M / N, K residues of 4, alpha / beta, batched with broadcasts and the attention products' shapes against float64
with the componentwise bound of tests/test_gemm_wgmma.py (C NaN-poisoned, canaries around it)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline
from cuopjit.ops.gemm import plans as gk, wgmma as gw, wgmma_plan
from cuopjit.target import named

from conftest import check_guards, compiles_without_spills, guarded, make_config
from test_gemm_wgmma import _run_batched

SM90 = named("sm_90")
LAYOUTS = [(False, True), (False, False), (True, True)]
IDS = ["nt", "nn", "tt"]
# consumers, tile width, instruction N (0: the tile), blocks per SM (0: the build's)
BUILDS = [(2, 128, 0, 0), (1, 128, 0, 0), (1, 64, 32, 0), (2, 64, 0, 0), (1, 64, 0, 3)]


def _problem(batch, m, n, k, ta, tb, alpha=1.0, beta=0.0, bcast=None, aligned=True):
    lda, ldb = (m if ta else k), (k if tb else n)
    one = batch == 1
    return gk.GemmProblem("float32", m, n, k, ta, tb, aligned, alpha, beta, lda, ldb, n, batch=batch,
                          stride_a=0 if bcast == "a" or one else m * k, stride_b=0 if bcast == "b" or one else k * n,
                          stride_c=0 if one else m * n)


def _build(consumers, qn, ni=0, per_sm=0):
    choice = dataclasses.replace(gw.build(consumers, qn, SM90, True, inreg=True), ni=ni)
    if per_sm:
        choice = dataclasses.replace(choice, per_sm=per_sm, stages=gw.stages_for(consumers, qn, True, SM90, per_sm,
                                                                                 inreg=True))
    return choice


# --- CPU ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=IDS)
def test_aligned_3xtf32_splits_in_the_kernel_in_one_launch(trans_a, trans_b):
    cfg = make_config(precision="3xtf32").snapshot()
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 1000, 1000, 1000, trans_a, trans_b), cfg, SM90).launches
    ops = ("t" if trans_a else "n") + ("t" if trans_b else "n")
    params = dict(launch.spec.params)
    assert "_3xtf32r_" in launch.spec.name and launch.spec.name.endswith(ops) and params["INREG"] and params["SPLIT"] and params["P_REGS"]
    assert params["P_IS_A"] == (trans_a or trans_b) and launch.units == gw.UNITS[True]
    assert len(launch.args) == 12          # TF32's arguments: no parts, no offsets between them


def test_wide_products_take_the_split_copies_first():
    """From M N >= COPY_SIDE (M + N) the copies' SS k-loop outruns the kernel split (which stays a candidate)."""
    cfg = make_config(precision="3xtf32").snapshot()
    for (m, n), copies in (((4096, 4096), True), ((4096, 2304), True), ((4096, 768), False), ((512, 512), False)):
        found = gw.choices(gk.packed("float32", m, n, 768, False, True), cfg, SM90, True)
        assert found[0].copies == copies and any(c.inreg != copies for c in found)


def test_a_transposed_times_b_and_unaligned_operands_take_the_split_copies():
    cfg = make_config(precision="3xtf32").snapshot()
    for problem in (gk.packed("float32", 1000, 1000, 1000, True, False),
                    gk.packed("float32", 1001, 1001, 1001, aligned=False),
                    dataclasses.replace(_problem(3, 400, 400, 100, False, False), stride_a=400 * 100 + 2)):
        assert not gw.inreg_ok(problem)
        names = [kl.spec.name for kl in gk.FAMILY.default_plan(problem, cfg, SM90).launches]
        assert len(names) == 3 and "_3xtf32_nt" in names[-1], names


def test_narrow_products_in_the_kernel_split_keep_the_attention_shapes():
    """No copies to pay for: only products narrower than INREG_SIDE take the SIMT kernel; attention's P @ V (512 x 64
    per head) and scores (512 x 512, K = 64) run on wgmma."""
    cfg = make_config(precision="3xtf32").snapshot()
    for problem in (_problem(96, 512, 64, 512, False, False), _problem(96, 512, 512, 64, False, True),
                    gk.packed("float32", 128, 256, 64)):
        assert gw.choices(problem, cfg, SM90, True)[0].inreg
        assert not gw.narrow(problem)
        assert "_3xtf32r_" in gk.FAMILY.default_plan(problem, cfg, SM90).launches[-1].spec.name
    for m, n in ((33, 4096), (7, 8), (16, 1024)):
        assert gw.narrow(gk.packed("float32", m, n, 1000))
        assert gk.FAMILY.default_plan(gk.packed("float32", m, n, 1000), cfg, SM90).launches[0].units == \
            "FP32 cores (SIMT)"


def test_the_kernel_split_refuses_what_it_cannot_read():
    for problem, why in ((gk.packed("float32", 64, 64, 64, True, False), "A\\^T @ B has no K-major operand"),
                         (gk.packed("float32", 63, 63, 63, aligned=False), "TMA needs 16-byte aligned operands")):
        with pytest.raises(ValueError, match=f"GEMM cannot run on the wgmma kernel: {why}"):
            wgmma_plan.plan(problem, _build(2, 128), SM90)
    with pytest.raises(ValueError, match=r"split in the kernel .* with cluster 1: use inreg=False"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), dataclasses.replace(_build(2, 128), cluster=2), SM90)
    with pytest.raises(ValueError, match=r"per_sm=2: two blocks per SM need one consumer warpgroup"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), dataclasses.replace(_build(1, 128), inreg=False), SM90)
    with pytest.raises(ValueError, match=r"per_sm=3: .* three the kernel split and a tile at most 64 wide"):
        wgmma_plan.plan(gk.packed("float32", 64, 64, 64), dataclasses.replace(_build(1, 128), per_sm=3), SM90)


def test_kernel_split_builds_compile_without_spills():
    """Representative builds (each layout, one and two consumers, two blocks per SM, a narrower instruction, batched
    with a broadcast, a user epilogue from the accumulators) compile for sm_90a: no spills, no serialised wgmmas."""
    cases = [(gk.packed("float32", 1000, 1000, 1000, *LAYOUTS[0]), _build(2, 128)),
             (gk.packed("float32", 1000, 1000, 1000, *LAYOUTS[1]), _build(1, 128)),
             (gk.packed("float32", 1000, 1000, 1000, *LAYOUTS[2]), _build(1, 64, 32)),
             (_problem(96, 512, 64, 512, False, False), _build(1, 64, 0, 3)),
             (_problem(7, 1000, 1000, 1000, False, False, bcast="b"), _build(2, 64)),
             (dataclasses.replace(gk.packed("float32", 1000, 1000, 1000, False, True), epilogue="relu(acc)"),
              _build(1, 128))]
    specs = [wgmma_plan.plan(p, c, SM90).launches[-1].spec for p, c in cases]
    compiles_without_spills(specs, "sm_90")
    for spec in specs[:2]:
        built = pipeline.compile_fresh(spec, "sm_90")
        assert "C7513" not in built.log and built.registers <= 240, (spec.name, built.log)


# --- GPU ------------------------------------------------------------------------------------------

def _run(rng, problem, choice):
    """Run `problem` on `choice` (planned directly, one launch: no split copies) through test_gemm_wgmma's
    _run_batched: fresh operands, C poisoned, each entry against float64 with u (|alpha| |op(A)| |op(B)| + |beta|
    |C0|), u = (K + 16) float32 roundings; the kernel's name."""
    assert len(gk.plan(problem, choice, cuopjit.target.of_device(0)).launches) == 1
    name = _run_batched(rng, problem, choice)
    assert "_3xtf32r_" in name, name
    return name


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("consumers, qn, ni, per_sm", BUILDS,
                         ids=[f"{c}x{q}" + (f"i{i}" if i else "") + (f"b{b}" if b else "") for c, q, i, b in BUILDS])
def test_kernel_split_matches_float64(rng, trans_a, trans_b, consumers, qn, ni, per_sm):
    choice = _build(consumers, qn, ni, per_sm)
    m = 264 if trans_a else 263      # tt: A stored K x M, rows of 16 bytes (M a multiple of 4)
    for batch, mm, n, k, alpha, beta, bcast in ((1, m, 300, 1004, 0.5, -1.0, None), (1, 8 if trans_a else 7, 36, 36, 1.0, 0.0, None),
                                                (3, m, 68, 132, -0.5, 1.5, "b"), (5, 36 if trans_a else 33, 4, 260, 2.0, 0.0, "a")):
        _run(rng, _problem(batch, mm, n, k, trans_a, trans_b, alpha, beta, bcast), choice)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=IDS)
@pytest.mark.parametrize("k", [4, 8, 12, 28, 32, 36, 60, 64, 100, 228, 260])
def test_kernel_split_over_k_residues(rng, k, trans_a, trans_b):
    """K = 4 .. 260 in steps the TMA rows allow: partial k-tiles of every residue of 4, an odd and an even count of
    k-tiles (the consumers take them in pairs); the heuristic's build."""
    problem = _problem(1, 420 if trans_a else 417, 404, k, trans_a, trans_b, -1.5 if k % 8 else 1.0, 0.5 if k % 8 else 0.0)
    cfg = make_config(kernel_type="tensor_core", precision="3xtf32").snapshot()
    _run(rng, problem, gw.choices(problem, cfg, cuopjit.target.of_device(0), True)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4, 512, 512, 64, False, True), (4, 512, 64, 512, False, False)],
                         ids=["scores", "probs_v"])
def test_attention_products_through_batch_matmul(rng, shape):
    """The BERT attention products (4 heads): Q @ K^T with K as stored (trans_b) and P @ V, 3xTF32 through
    BatchMatMulFloat on the kernel split, float32-grade."""
    batch, m, n, k, ta, tb = shape
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(np.float32)
    c = guarded([batch, m, n], np.float32)
    op = cuopjit.JITBatchMatMulFloat(cuopjit.BatchMatMulFloat(trans_b=tb))
    op.set_jit_config(make_config(kernel_type="tensor_core", precision="3xtf32"))
    op.forward(cuopjit.tensor(a), cuopjit.tensor(b), c)
    check_guards(c)
    assert "_3xtf32r_" in op.get_performance_profile().kernel_name
    ref = a.astype(np.float64) @ (b.transpose(0, 2, 1) if tb else b).astype(np.float64)
    bound = (k + 16) * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b.transpose(0, 2, 1) if tb else b))
    assert np.all(np.abs(c.to_numpy() - ref) <= bound)
