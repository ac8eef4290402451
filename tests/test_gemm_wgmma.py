"""The Hopper wgmma GEMM: routing (which configs and problems reach it), every variant compiles for
sm_90a without spills (CPU, real NVRTC); on an H100, TF32 and 3xTF32 results for every layout,
alpha/beta and odd sizes against float64 NumPy (C poisoned with NaN, canaries around it), and
3xTF32's error no worse than the exact SIMT kernel's on randn and on 2^-20..2^20 inputs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit import kernels
from cuopjit.config import JITConfig
from cuopjit.ops import gemm_kernels as gk
from cuopjit.ops import gemm_wgmma as gw
from cuopjit.prewarm import kernels_to_build, representative_plans
from cuopjit.target import named

from conftest import check_guards, guarded, make_config, rel_error

SM90, SM90A, SM80 = named("sm_90"), named("sm_90a"), named("sm_80")
LAYOUTS = [(False, True), (False, False), (True, True)]      # nt (SS), nn (RS, D = C^T), tt (RS)


# --- CPU: routing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fields", [{"enable_tensor_core": True}, {"kernel_type": "tensor_core"},
                                    {"enable_tma": True}, {"precision": "3xtf32"},
                                    {"kernel_type": "tiled", "tile_size": 32, "block_size": 256,
                                     "enable_tensor_core": True, "enable_tma": True}])
@pytest.mark.parametrize("target", [SM90, SM90A], ids=["sm_90", "sm_90a"])
def test_float32_tensor_cores_on_sm90_are_wgmma(fields, target):
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), make_config(**fields).snapshot(),
                                       target).launches
    assert "_wgmma_" in launch.spec.name and launch.spec.arch_specific
    assert kernels.compile_arch(launch.spec, "sm_90") == "sm_90a"
    assert launch.grid[0] <= target.sm_count and launch.block[0] in (256, 384)
    assert launch.units == gw.UNITS[fields.get("precision") == "3xtf32"]
    if fields.get("tile_size"):
        assert launch.block == (256, 1, 1) and "_t64x32x32_" in launch.spec.name


@pytest.mark.parametrize("problem, fields, why", [
    (gk.packed("float32", 512, 512, 512, True, False), {"enable_tensor_core": True}, "A^T @ B"),
    (gk.packed("float32", 7, 7, 7, aligned=False), {"enable_tensor_core": True}, "unaligned"),
    (gk.packed("float32", 64, 64, 0), {"enable_tensor_core": True}, "K = 0"),
    (gk.packed("float32", 512, 512, 512), {"enable_tensor_core": True, "block_size": 128}, "mma.sync block"),
    (gk.packed("float64", 512, 512, 512), {"enable_tensor_core": True}, "float64"),
])
def test_what_wgmma_cannot_take_runs_on_mma_sync(problem, fields, why):
    (launch,) = gk.FAMILY.default_plan(problem, make_config(**fields).snapshot(), SM90).launches
    assert "mma.sync" in launch.units, why


def test_batched_and_older_targets_stay_on_mma_sync():
    batched = gk.GemmProblem("float32", 256, 256, 256, False, False, True, 1.0, 0.0, 256, 256, 256,
                             batch=4, stride_a=65536, stride_b=65536, stride_c=65536)
    cfg = make_config(enable_tensor_core=True).snapshot()
    assert "mma.sync" in gk.FAMILY.default_plan(batched, cfg, SM90).launches[0].units
    assert "mma.sync" in gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), cfg, SM80).launches[0].units


def test_3xtf32_without_wgmma_is_the_exact_simt_kernel_and_float64_refuses_it():
    cfg = make_config(precision="3xtf32").snapshot()
    for problem, target in ((gk.packed("float32", 512, 512, 512), SM80),
                            (gk.packed("float32", 7, 7, 7, aligned=False), SM90)):
        assert gk.FAMILY.default_plan(problem, cfg, target).launches[0].units == "FP32 cores (SIMT)"
    with pytest.raises(ValueError, match=r"GEMM precision='3xtf32' applies to float32 .* leave precision='tf32'"):
        gk.choices(gk.packed("float64", 64, 64, 64), cfg, SM90)


def test_precision_is_validated_and_part_of_the_snapshot():
    cfg = JITConfig()
    with pytest.raises(ValueError, match=r"precision='fp32' is not allowed: choose 'tf32' .* or '3xtf32'"):
        cfg.precision = "fp32"
    cfg.precision = "3xtf32"
    assert cfg.snapshot().precision == "3xtf32" and cfg.snapshot() != JITConfig().snapshot()


def test_heuristic_fills_the_sms_and_tuning_offers_the_other_tiles():
    cfg = make_config(enable_tensor_core=True).snapshot()
    big = gw.choices(gk.packed("float32", 4096, 4096, 4096), cfg, SM90, split=False)
    assert (big[0].consumers, big[0].qn) == (2, 256) and len(big) == len(gw.AUTO)
    small = gw.choices(gk.packed("float32", 1000, 1000, 1000), cfg, SM90, split=False)[0]
    assert gw.tiles(gk.packed("float32", 1000, 1000, 1000), small.consumers, small.qn) >= SM90.sm_count
    split = gw.choices(gk.packed("float32", 4096, 4096, 4096), cfg, SM90, split=True)
    assert all(c.qn <= gw.SPLIT_MAX and c.split for c in split)
    for c in big + split:
        assert gw.smem_bytes(c.consumers, c.qn, c.stages, c.split) <= SM90.smem_per_block


def test_wgmma_errors_say_what_to_choose():
    cfg = make_config(enable_tensor_core=True, block_size=512).snapshot()
    with pytest.raises(ValueError, match=r"block_size=512 cannot run the wgmma kernel .* choose block_size 256"):
        gw.choices(gk.packed("float32", 64, 64, 64), cfg, SM90, split=False)
    with pytest.raises(ValueError, match=r"cannot run on the wgmma kernel: A\^T @ B has no K-major operand"):
        gw.plan(gk.packed("float32", 64, 64, 64, True, False), gw.WgmmaChoice(2, 128, 4), SM90)


def test_prewarm_for_sm90a_builds_the_wgmma_kernels():
    cfg = make_config(enable_tensor_core=True).snapshot()
    planned = representative_plans(["gemm"], ["float32"], ["sm_90a"], cfg)
    pairs = kernels_to_build(planned)
    assert any(spec.template == gw.TEMPLATE for spec, _ in pairs)
    assert all(p.plan.workspace == p.plan.launches[0].grid[0] * gw.MAP_BYTES
               for p in planned if p.plan.launches[0].spec.template == gw.TEMPLATE)


# --- CPU: every variant compiles for sm_90a without spills -------------------------------------------

_VARIANTS = ([(ta, tb, split, 2, gw.SPLIT_MAX if split else 256) for (ta, tb) in LAYOUTS for split in (False, True)]
             + [(False, False, False, c, q) for c in (1, 2) for q in gw.WIDTHS if (c, q) != (2, 256)])


@pytest.mark.parametrize("trans_a, trans_b, split, consumers, qn", _VARIANTS,
                         ids=[f"{'t' if a else 'n'}{'t' if b else 'n'}-{'3x' if s else 'tf32'}-{c}x{q}"
                              for a, b, s, c, q in _VARIANTS])
def test_every_variant_compiles_for_sm90a_without_spills(trans_a, trans_b, split, consumers, qn):
    choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, split, SM90), split=split)
    plan = gw.plan(gk.packed("float32", 1000, 1000, 1000, trans_a, trans_b), choice, SM90)
    (launch,) = plan.launches
    plan.check_target(SM90)
    spec = launch.spec
    built = kernels.compile_fresh(spec, "sm_90")
    assert built.spill_bytes == 0, f"{spec.name} spills {built.spill_bytes} bytes"
    assert built.registers is not None and built.registers <= 240
    assert "C7513" not in built.log, f"{spec.name}: ptxas serialises the wgmmas:\n{built.log}"


# --- GPU ------------------------------------------------------------------------------------------

def _tf32(x, nearest: bool):
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def _gemm(rng, m, n, k, trans_a, trans_b, alpha, beta, fields, a=None, b=None):
    """One forward through JITGemmFloat with `fields`; returns (out, a, b, c0, kernel name)."""
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32) if a is None else a
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32) if b is None else b
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = guarded([m, n], np.float32, fill=c0 if beta else None)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm)
    op.set_jit_config(make_config(**fields))
    op.forward(cuopjit.tensor(a), c)
    check_guards(c)
    return c.to_numpy(), a, b, c0, op.get_performance_profile().kernel_name


def _ref(a, b, c0, trans_a, trans_b, alpha, beta):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + beta * c0.astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("trans_a, trans_b", LAYOUTS, ids=["nt", "nn", "tt"])
@pytest.mark.parametrize("m, n, k, alpha, beta", [
    (4, 4, 4, 1.0, 0.0), (36, 12, 1000, 1.0, 0.0), (128, 256, 64, 1.0, 0.0), (1000, 1000, 1000, 1.0, 0.0),
    (260, 4100, 36, -0.5, 1.5), (1024, 1028, 1004, 2.0, -1.0), (4096, 260, 516, 0.0, 2.0)])
def test_wgmma_matches_float64(rng, m, n, k, alpha, beta, trans_a, trans_b, precision):
    """Componentwise bound: u (|alpha| |op(A)| |op(B)| + |beta| |C0|), u = (K + 16) float32 roundings, against
    operands truncated to TF32 as the tensor core reads them (tf32) or exact operands (3xtf32)."""
    fields = {"kernel_type": "tensor_core", "precision": precision}
    out, a, b, c0, name = _gemm(rng, m, n, k, trans_a, trans_b, alpha, beta, fields)
    assert "_wgmma_" in name and ("_3xtf32" in name) == (precision == "3xtf32")
    if precision == "tf32":
        a, b = _tf32(a, False), _tf32(b, False)
    u = (k + 16) * np.finfo(np.float32).eps
    bound = u * _ref(np.abs(a), np.abs(b), np.abs(c0), trans_a, trans_b, abs(alpha), abs(beta))
    err = np.abs(out.astype(np.float64) - _ref(a, b, c0, trans_a, trans_b, alpha, beta))
    assert np.all(np.isfinite(out)) and np.all(err <= bound), f"{name}: error {np.max(err - bound):.3g} over the bound"


@pytest.mark.gpu
@pytest.mark.parametrize("spread", [0, 20], ids=["randn", "2^-20..2^20"])
def test_3xtf32_error_is_no_worse_than_simt(rng, spread):
    """Norm-wise error against float64, same inputs: 3xTF32 on wgmma vs the exact float32 SIMT kernel."""
    m = n = k = 1024
    scale = lambda shape: np.exp2(rng.uniform(-spread, spread, shape)) if spread else 1.0  # noqa: E731
    a = (rng.standard_normal((m, k)) * scale((m, k))).astype(np.float32)
    b = (rng.standard_normal((k, n)) * scale((k, n))).astype(np.float32)
    ref = _ref(a, b, np.zeros((m, n), np.float32), False, False, 1.0, 0.0)
    errs = {}
    for label, fields in (("3x", {"precision": "3xtf32"}), ("simt", {"kernel_type": "tiled"}),
                          ("tf32", {"kernel_type": "tensor_core"})):
        out, *_, name = _gemm(rng, m, n, k, False, False, 1.0, 0.0, fields, a=a, b=b)
        errs[label] = rel_error(out, ref)
    print(errs)
    assert errs["3x"] <= 1.25 * errs["simt"] and errs["tf32"] > 30 * errs["3x"], errs


@pytest.mark.gpu
def test_every_block_and_tile_size_on_gpu(rng):
    """Each (consumers, wgmma N) the config can name, on a size that leaves partial tiles on both sides."""
    for block, tile in itertools.product((0, 256), gw.WIDTHS[1:]):
        fields = {"kernel_type": "tensor_core", "block_size": block, "tile_size": tile}
        out, a, b, c0, name = _gemm(rng, 200, 300, 100, False, False, 1.0, 0.0, fields)
        assert f"x{tile}x32_" in name and ("_t64x" in name if block else "_wgmma_t" in name)
        ref = _ref(_tf32(a, False), _tf32(b, False), c0, False, False, 1.0, 0.0)
        assert rel_error(out, ref) < 1e-5, name


@pytest.mark.parametrize("split", [False, True], ids=["tf32", "3xtf32"])
def test_loop_unroll_off_reaches_the_optional_loops_and_compiles(split):
    """enable_loop_unroll=False rolls the TMA box loop and the split loop; nothing spills, nothing serialises."""
    cfg = make_config(enable_tensor_core=True, enable_loop_unroll=False, precision="3xtf32" if split else "tf32")
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 1000, 1000, 1000), cfg.snapshot(), SM90).launches
    spec = launch.spec
    assert spec.name.endswith("_nounroll_nn") and 'unroll 1' in kernels.source(spec)
    built = kernels.compile_fresh(spec, "sm_90")
    assert built.spill_bytes == 0 and "C7513" not in built.log
