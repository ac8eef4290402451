"""GEMM: every kernel shape compiles without spills for sm_80 and sm_90 (CPU, real NVRTC); configs map
to shapes and units as documented, bad ones raise saying what to choose; on a GPU, GemmFloat/GemmDouble
match float64 NumPy for every shape and seed configuration, odd sizes, transposes, alpha/beta and K = 0,
with C poisoned with NaN first."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit.run import executor
from cuopjit.build import pipeline
from cuopjit.config import DEFAULT, JITConfig
from cuopjit.ops.gemm import heuristics, plans as gk, shapes
from cuopjit.target import named

import blas_emulate
from conftest import check_guards, guarded, make_config, rel_error

DTYPES = [np.float32, np.float64]
SM90, SM80 = named("sm_90"), named("sm_80")
TF32_TOL = 2e-3   # TF32 operands keep 10 mantissa bits (round to nearest: 2^-11 relative each)
TRANS = list(itertools.product((False, True), repeat=2))
KERNEL_TYPES = ("auto", "simple", "tiled", "warp_optimized", "tensor_core")
SEED_CONFIGS = [{"kernel_type": k, "tile_size": t, "block_size": 256} for k in KERNEL_TYPES for t in (16, 32, 64, 128)]
SEED_CONFIGS += [{"kernel_type": "tiled", "tile_size": 32, "block_size": 256, "optimization_level": "O2",
                  "enable_tensor_core": True, "enable_tma": True, "max_registers": 255},
                 {"kernel_type": "simple", "tile_size": 16}, {"kernel_type": "tensor_core", "tile_size": 64}]


def _all_shapes():
    """Every (dtype, shape) the family can build: the tuned ones and every derived (tile, block) pair."""
    for dtype, mma in itertools.product(("float32", "float64"), (False, True)):
        for tile in shapes.TILES:
            for threads in shapes.valid_threads(dtype, mma, tile):
                s = shapes.shape(dtype, mma, tile, threads)
                yield pytest.param(dtype, s, id=f"{dtype}-{'mma' if mma else 'simt'}-{tile}-{threads}")


def _tol(dtype, k: int, tf32: bool = False) -> float:
    """Norm-wise relative error bound: K products summed, a few roundings more (alpha, beta, the reference)."""
    return TF32_TOL if tf32 else 2 * (k + 4) * np.finfo(dtype).eps


# --- CPU: every shape compiles for both targets ------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype, shape", list(_all_shapes()))
def test_every_shape_compiles_without_spills(arch, dtype, shape):
    target = named(arch)
    choice = gk.GemmChoice(shape, **gk.pipeline_fields(dtype, shape, target))
    for (ta, tb), aligned in zip(TRANS, (True, False, False, True)):
        plan = gk.plan(gk.packed(dtype, 1000, 1000, 1000, ta, tb, aligned), choice, target)
        (launch,) = plan.launches
        _, info = pipeline.build(launch.spec, arch, persistent=False)
        assert info.spill_bytes == 0, f"{launch.spec.name} spills {info.spill_bytes} bytes on {arch}"
        assert launch.block == (shape.threads, 1, 1)
        assert launch.grid == (-(-1000 // shape.bn), -(-1000 // shape.bm), 1)
        if choice.stages == 1:
            assert launch.shared == 0 and shapes.static_smem(shape, dtype, 8) <= shapes.STATIC_SMEM
        else:
            assert launch.shared == shapes.async_smem(shape, dtype, choice.stages) <= target.smem_per_block


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_prewarm_problems_compile_under_the_seed_configurations(arch):
    specs = {s for p in gk.problems() for fields in [{}, *SEED_CONFIGS]
             for s in gk.FAMILY.default_plan(p, make_config(**fields).snapshot(), named(arch)).specs}
    for spec in specs:
        cubin, _ = pipeline.build(spec, arch, persistent=False)
        assert cubin[:4] == b"\x7fELF"


def test_problems_cover_both_dtypes_and_what_a_default_gemm_runs():
    probs = gk.problems()
    assert {p.dtype for p in probs} == {"float32", "float64", "float16", "bfloat16"}
    default = JITConfig().snapshot()
    built = {s for p in probs for s in gk.FAMILY.default_plan(p, default, SM90).specs}
    for dtype in ("float32", "float64"):
        for m, n, k in ((1000, 1000, 1000), (4096, 4096, 4096), (7, 7, 7)):
            for trans_b in (False, True):
                runs = gk.FAMILY.default_plan(gk.packed(dtype, m, n, k, False, trans_b, m != 7), default, SM90)
                assert set(runs.specs) <= built


# --- CPU: how configs map to kernels -----------------------------------------------------------------

@pytest.mark.parametrize("kernel_type, tc, dtype, units", [
    ("auto", False, "float32", "FP32 cores (SIMT)"),
    ("auto", True, "float32", "TF32 tensor cores (mma.sync)"),
    ("auto", False, "float64", "FP64 tensor cores (DMMA mma.sync)"),
    ("tiled", False, "float32", "FP32 cores (SIMT)"),
    ("tiled", True, "float32", "TF32 tensor cores (mma.sync)"),
    ("tiled", False, "float64", "FP64 cores (SIMT)"),
    ("tiled", True, "float64", "FP64 tensor cores (DMMA mma.sync)"),
    ("warp_optimized", False, "float32", "FP32 cores (SIMT)"),
    ("warp_optimized", True, "float32", "TF32 tensor cores (mma.sync)"),
    ("warp_optimized", False, "float64", "FP64 tensor cores (DMMA mma.sync)"),
    ("tensor_core", False, "float32", "TF32 tensor cores (mma.sync)"),
    ("tensor_core", False, "float64", "FP64 tensor cores (DMMA mma.sync)"),
    ("simple", True, "float32", "FP32 cores (SIMT)"),
    ("simple", True, "float64", "FP64 cores (SIMT)"),
])
def test_kernel_type_and_tensor_core_permission_pick_the_units(kernel_type, tc, dtype, units):
    """On sm_80 (sm_90 float32 tensor cores are wgmma: tests/test_gemm_wgmma.py)."""
    cfg = make_config(kernel_type=kernel_type, enable_tensor_core=tc).snapshot()
    (launch,) = gk.FAMILY.default_plan(gk.packed(dtype, 4096, 4096, 4096), cfg, SM80).launches
    assert launch.units == units
    assert ("_tf32_" in launch.spec.name or "_dmma_" in launch.spec.name) == ("tensor" in units)


def test_every_seed_configuration_plans_for_both_dtypes_and_targets():
    for fields, dtype, target in itertools.product(SEED_CONFIGS, ("float32", "float64"), (SM80, SM90)):
        cfg = make_config(**fields).snapshot()
        (launch,) = gk.FAMILY.default_plan(gk.packed(dtype, 1000, 1000, 1000), cfg, target).launches
        if fields.get("tile_size") and "_wgmma_" in launch.spec.name:   # tile_size is the wgmma N
            assert f"x{fields['tile_size']}x32_" in launch.spec.name
        elif fields.get("tile_size"):
            assert f"_t{fields['tile_size']}x{fields['tile_size']}x" in launch.spec.name
        if fields.get("block_size"):
            assert launch.block == (fields["block_size"], 1, 1)


def test_simple_is_a_16_tile_one_output_per_thread():
    cfg = make_config(kernel_type="simple", enable_tensor_core=True).snapshot()
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), cfg, SM90).launches
    assert launch.spec.name.startswith("gemm_f32_t16x16x16_r1x1_") and launch.block == (256, 1, 1)
    big = make_config(kernel_type="simple", block_size=1024).snapshot()
    assert "_t32x32x16_r1x1_" in gk.FAMILY.default_plan(gk.packed("float32", 64, 64, 64), big, SM90).specs[0].name


@pytest.mark.parametrize("field, value, token", [
    ("enable_loop_unroll", False, "unroll 1"),
    ("enable_shared_memory_opt", False, "#define LDA_S (BM + 0)"),
    ("enable_memory_coalescing", False, "#define VEC 1"),
    ("enable_tensor_core", True, "mma.sync.aligned"),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_switch_changes_the_code(dtype, field, value, token):
    start = {"kernel_type": "tiled"}
    problem = gk.packed(dtype, 4096, 4096, 4096)
    base = gk.FAMILY.default_plan(problem, make_config(**start).snapshot(), SM80).specs[0]
    changed = gk.FAMILY.default_plan(problem, make_config(**start, **{field: value}).snapshot(), SM80).specs[0]
    src = pipeline.source(changed)
    assert token in src and src != pipeline.source(base) and changed.name != base.name


@pytest.mark.parametrize("field, token", [("enable_loop_unroll", '_Pragma("unroll 1")'),
                                          ("enable_shared_memory_opt", "#define SWIZZLE 0"),
                                          ("enable_memory_coalescing", "#define VEC 1")])
def test_every_switch_changes_the_cp_async_kernel(field, token):
    """float64's default (DMMA on the cp.async pipeline) honours the same switches."""
    problem = gk.packed("float64", 4096, 4096, 4096)
    base = gk.FAMILY.default_plan(problem, JITConfig().snapshot(), SM90).specs[0]
    changed = gk.FAMILY.default_plan(problem, make_config(**{field: False}).snapshot(), SM90).specs[0]
    assert base.template == changed.template == "gemm/gemm_async.cu.jinja"
    src = pipeline.source(changed)
    assert token in src and token not in pipeline.source(base) and changed.name != base.name


def test_compile_settings_reach_the_spec_and_tma_needs_a_tma_target():
    """enable_tma picks the TMA (wgmma) kernel on sm_90; sm_80 has no TMA, so there it changes nothing."""
    cfg = make_config(optimization_level="O2", max_registers=255, enable_tma=True).snapshot()
    spec = gk.FAMILY.default_plan(gk.packed("float32", 1024, 1024, 1024), cfg, SM80).specs[0]
    plain = gk.FAMILY.default_plan(gk.packed("float32", 1024, 1024, 1024), JITConfig().snapshot(), SM80).specs[0]
    assert (spec.optimization_level, spec.max_registers) == ("O2", 255) and spec.params == plain.params
    hopper = gk.FAMILY.default_plan(gk.packed("float32", 1024, 1024, 1024), cfg, SM90).specs[0]
    assert hopper.template == "gemm/gemm_wgmma.cu.jinja" and hopper.max_registers == 255


def test_names_and_auto_tiles_follow_the_targets_sm_count():
    default = JITConfig().snapshot()
    name = gk.FAMILY.default_plan(gk.packed("float32", 4096, 4096, 4096), default, SM90).specs[0].name
    assert name == "gemm_f32_t128x128x16_r8x8_nn_v4"
    tt = gk.FAMILY.default_plan(gk.packed("float64", 7, 7, 7, True, True, False), default, SM90).specs[0].name
    assert tt.endswith("_tt_v1")
    # float32 SIMT (auto_simt): the largest tile whose blocks, split-K included, keep 4 warps on the busiest SM
    # and 80% of its block slots busy on the other SMs; few rows take 16 x 128 tiles where they pad less.
    for (m, n, k), label, grid in (
            ((4096, 4096, 64), "t128x128x16_r8x8", (32, 32, 1)),
            ((8192, 256, 8192), "t128x128x16_r8x8", (2, 64, 1)),           # 128 blocks of 8 warps on 132 SMs
            ((256, 8192, 8192), "t128x128x16_r8x8", (64, 2, 1)),
            ((1000, 1000, 1000), "t128x64x16_r8x8_split_k3", (16, 8, 3)),  # 128 x 128 in 3: 72 SMs hold one block
            ((500, 1000, 1000), "t64x128x16_r8x8_split_k6", (8, 8, 6)),    # the half along the longer side
            ((1024, 1024, 64), "t128x64x16_r8x8", (16, 8, 1)),             # too short to split: 4 warps an SM
            ((128, 4096, 128), "t32x32x8_r4x4", (128, 4, 1)),              # 64 x 64 would give 2 warps an SM
            ((33, 4097, 1000), "t16x128x16_r4x8_split_k7", (33, 3, 7)),    # 48 rows computed, not 64
            ((7, 7, 7), "t32x32x8_r4x4", (1, 1, 1))):                      # 16 x 128 would pad 7 x 7 more
        plan = gk.FAMILY.default_plan(gk.packed("float32", m, n, k), default, SM90)
        assert plan.choice == label and plan.launches[0].grid == grid, (m, n, k, plan.choice)
    many = dataclasses.replace(SM90, sm_count=1000)
    tiles = [gk.choices(gk.packed("float32", s, s, 64), default, many)[0].shape.bm for s in (4096, 1024, 256)]
    assert tiles == [64, 32, 32]
    # sm_80 builds have no two-block register cap: 128 x 128 blocks run one per SM there
    assert heuristics.resident_blocks(shapes.AUTO_SIMT[0], "float32", SM80) == 1
    assert heuristics.resident_blocks(shapes.AUTO_SIMT[0], "float32", SM90) == 2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_auto_simt_shapes_compile_without_spills(arch):
    """The heuristic's float32 SIMT shapes that no tile_size names (128 x 64, 64 x 128, 16 x 128), every layout,
    aligned (16-byte accesses) and not (scalar spread runs), with and without split-K."""
    extra = [s for s in (*shapes.AUTO_SIMT, shapes.SKINNY_SIMT) if s.bm != s.bn]
    for shape, (ta, tb), aligned in itertools.product(extra, TRANS, (True, False)):
        problem = gk.packed("float32", 1000, 1000, 1000, ta, tb, aligned)
        launch = gk.plan(problem, gk.GemmChoice(shape, split_k=2 if aligned else 1), named(arch)).launches[0]
        _, info = pipeline.build(launch.spec, arch, persistent=False)
        assert info.spill_bytes == 0, f"{launch.spec.name} spills {info.spill_bytes} bytes on {arch}"
        assert launch.block == (shape.threads, 1, 1)


def test_tuning_candidates_are_the_tuned_shapes_of_the_same_kernel():
    problem = gk.packed("float64", 1000, 1000, 1000)
    found = gk.choices(problem, JITConfig().snapshot(), SM90)
    extra = [*shapes.TUNED["float64", True], *shapes.CANDIDATES["float64", True]]
    assert [c.shape for c in found][1:] == [s for s in extra if s != found[0].shape]
    assert found[0].shape.bm == 64 and len({c.label for c in found}) == len(found) == 4
    for fields in ({"tile_size": 64}, {"block_size": 256}, {"kernel_type": "simple"}):
        assert len(gk.choices(problem, make_config(**fields).snapshot(), SM90)) == 1


def test_float64_takes_128x64_tiles_where_the_heuristic_would_take_128x128_on_aligned_operands():
    """The heuristic's measured rule (gemm_shapes.WIDE): aligned, tile left to it; 128 x 128 stays a candidate."""
    default = JITConfig().snapshot()
    made = {(s, aligned): gk.choices(gk.packed("float64", s, s, s, aligned=aligned), default, SM90)
            for s in (2048, 4096) for aligned in (True, False)}
    for s in (2048, 4096):
        assert made[s, True][0].shape == shapes.WIDE["float64", True] and made[s, True][0].stages == 4
        assert made[s, True][1].shape == shapes.TUNED["float64", True][0]
        assert made[s, False][0].shape == shapes.TUNED["float64", True][0]
    tile = gk.choices(gk.packed("float64", 2048, 2048, 2048), make_config(tile_size=128).snapshot(), SM90)
    assert [c.shape for c in tile] == [shapes.TUNED["float64", True][0]]
    # A target with less shared memory gets fewer stages; candidates it cannot hold drop out.
    small = gk.choices(gk.packed("float64", 4096, 4096, 4096), default, named("sm_86"))
    assert [c.stages for c in small[:2]] == [4, 3] and all(c.shape.bk == 16 for c in small)   # 128 x 64, 128 x 128


def test_float64_a_at_b_runs_as_c_transposed_on_the_cp_async_kernel():
    """Aligned float64 A @ B runs as C^T = B^T A^T (both operands read as stored transposed: the DMMA layout
    that holds the fewest registers), its block tiles over (n, m); other layouts, unaligned operands and
    float32 run as they are."""
    default = JITConfig().snapshot()

    def first(dtype, m, n, k, ta=False, tb=False, aligned=True):
        p = gk.packed(dtype, m, n, k, ta, tb, aligned)
        return gk.plan(p, gk.choices(p, default, SM90)[0], SM90).launches[0]

    swap = first("float64", 300, 1000, 77)
    params = dict(swap.spec.params)
    assert params["swap"] and params["trans_a"] and params["trans_b"] and swap.spec.name.endswith("_nn_v2_swap")
    assert swap.grid[:2] == (-(-300 // params["BN"]), -(-1000 // params["BM"]))
    assert "A = B; B = t_;" in pipeline.source(swap.spec)
    for other in (first("float64", 300, 1000, 77, ta=True), first("float64", 300, 1000, 77, tb=True),
                  first("float64", 301, 1001, 77, aligned=False), first("float32", 300, 1000, 77),
                  first("float32", 300, 1000, 77, aligned=False)):
        assert "swap" not in dict(other.spec.params), other.spec.name
        assert "A = B; B = t_;" not in pipeline.source(other.spec)


def test_the_swap_product_runs_the_pipelined_k_loop():
    """gemm_async.cu.jinja's pipelined k-loop (fragments double-buffered, the barrier inside the k-tile, whole-tile
    copies hoisted) is built for the swap product on swizzled BK-16 tiles in row order; the layouts, BK 32, plain
    rows and the grouped order that spill with it, and enable_loop_unroll=False, keep the one-buffer loop."""
    nn = gk.packed("float64", 4096, 4096, 4096)

    def src(problem, shape=shapes.WIDE["float64", True], **fields):
        return pipeline.source(gk.plan(problem, gk.GemmChoice(shape, **{"stages": 4, **fields}), SM90).launches[0].spec)

    token = "frag_t a0[MT][4], b0[NT][2], a1[MT][4], b1[NT][2];"
    assert token in src(nn) and token in src(nn, DMMA128, stages=2)
    for other in (src(gk.packed("float64", 4096, 4096, 4096, True, True)), src(nn, raster="grouped"), src(nn, pad=False),
                  src(nn, unroll=False),
                  src(gk.packed("float64", 4096, 4096, 4096, aligned=False)),
                  src(nn, shapes.CANDIDATES["float64", True][0], stages=3),
                  src(gk.packed("float32", 4096, 4096, 4096), shapes.Shape(True, 128, 128, 32, 2, 4), stages=3)):
        assert token not in other and "frag_t a[MT][4], b[NT][2];" in other


@pytest.mark.parametrize("dtype, fields, message", [
    ("float32", {"tile_size": 256}, r"GEMM tile_size=256 is not allowed: choose 0 \(auto\) or one of 128, 64, 32, 16"),
    ("float32", {"tile_size": 8}, r"tile_size=8 is not allowed"),
    ("float32", {"tile_size": 128, "block_size": 64},
     r"GEMM tile_size=128 cannot run with block_size=64 in the float32 SIMT kernel: with tile_size=128 choose "
     r"block_size 256, 512, 1024 \(0 = 256\)"),
    ("float32", {"tile_size": 16, "block_size": 512, "kernel_type": "tensor_core"},
     r"float32 mma.sync kernel: with tile_size=16 choose block_size 32, 64, 128, 256 \(0 = 64\)"),
    ("float64", {"tile_size": 64, "block_size": 64, "kernel_type": "tiled"},
     r"with tile_size=64 choose block_size 128, 256, 512, 1024"),
])
def test_bad_configs_say_what_to_choose(dtype, fields, message):
    with pytest.raises(ValueError, match=message):
        gk.choices(gk.packed(dtype, 64, 64, 64), make_config(**fields).snapshot(), SM80)


def test_bad_kernel_type_and_dtype_raise():
    cfg = dataclasses.replace(JITConfig().snapshot(), kernel_type="fancy")
    with pytest.raises(ValueError, match="GEMM kernel_type='fancy' is not allowed: choose one of 'auto', 'simple'"):
        gk.choices(gk.packed("float32", 8, 8, 8), cfg, SM90)
    with pytest.raises(TypeError, match="GEMM supports float32, float64, float16 and bfloat16, not int32"):
        gk.choices(gk.packed("int32", 8, 8, 8), JITConfig().snapshot(), SM90)


@pytest.mark.parametrize("field, value", [("cluster", (2, 1))])
def test_plan_refuses_what_the_template_cannot_build_yet(field, value):
    choice = dataclasses.replace(gk.GemmChoice(shapes.TUNED["float32", False][0]), **{field: value})
    assert f"_{field}" in choice.label
    with pytest.raises(ValueError, match=f"GEMM {field}={value!r} cannot be built yet".replace("(", r"\(")
                       .replace(")", r"\)")):
        gk.plan(gk.packed("float32", 64, 64, 64), choice, SM90)
    with pytest.raises(ValueError, match="cannot build float32 SIMT shape t64x64x8_r3x3: the thread tile 3 x 3"):
        gk.plan(gk.packed("float32", 64, 64, 64), gk.GemmChoice(shapes.Shape(False, 64, 64, 8, 3, 3)), SM90)


@pytest.mark.parametrize("m, n, k, trans_a, trans_b, split, slices", [
    (33, 4097, 1000, False, False, 4, 4), (70, 90, 20, True, True, 4, 2), (64, 64, 1001, True, False, 8, 8)])
def test_split_k_plans_sum_their_slices(rng, m, n, k, trans_a, trans_b, split, slices):
    """split_k slices K into whole k-tiles (fewer slices where K is short): each slice's product goes to the
    workspace, then one launch adds them into C with beta (C NaN where beta is 0 never read)."""
    shape = shapes.TUNED["float32", False][0]
    choice = dataclasses.replace(gk.GemmChoice(shape), split_k=split)
    for beta in (0.0, 0.5):
        problem = gk.packed("float32", m, n, k, trans_a, trans_b, aligned=False, alpha=1.5, beta=beta)
        part, sums = gk.plan(problem, choice, SM90).launches
        assert part.grid[2] == slices and part.spec.name.endswith("_splitk") and sums.spec.kernel == "splitk_reduce"
        a = rng.standard_normal((k, m) if trans_a else (m, k))
        b = rng.standard_normal((n, k) if trans_b else (k, n))
        c = rng.standard_normal((m, n)) if beta else np.full((m, n), np.nan)
        plan = gk.plan(problem, choice, SM90)
        bufs = [a.ravel().copy(), b.ravel().copy(), c.ravel().copy(), np.full(plan.workspace // 4, np.nan)]
        blas_emulate.run(plan, bufs, 4)
        ref = 1.5 * ((a.T if trans_a else a) @ (b.T if trans_b else b)) + (beta * c if beta else 0.0)
        assert np.allclose(bufs[2].reshape(m, n), ref, rtol=1e-12, atol=1e-12)
        assert plan.workspace == slices * m * n * 4


def test_split_k_is_built_for_single_problems_on_the_one_stage_kernel():
    for problem, fields in ((gk.GemmProblem("float32", 8, 8, 64, False, False, True, 1.0, 0.0, 64, 8, 8, batch=2,
                                            stride_a=512, stride_b=512, stride_c=64), {}),
                            (gk.packed("float64", 64, 64, 64), {"stages": 4}),
                            (gk.GemmProblem("float32", 8, 8, 64, False, False, True, 1.0, 0.0, 64, 8, 8, batch=2,
                                            stride_a=512, stride_b=512, stride_c=64), {"stages": 3})):
        mma = problem.dtype == "float64" and bool(fields)
        choice = dataclasses.replace(gk.GemmChoice(shapes.TUNED[problem.dtype, mma][0]), split_k=2, **fields)
        with pytest.raises(ValueError, match=r"split_k=2 is built for one problem \(not a batch\) on the SIMT kernels"):
            gk.plan(problem, choice, SM90)


DMMA128 = shapes.Shape(True, 128, 128, 16, 2, 4)


@pytest.mark.parametrize("dtype, shape, fields, message", [
    ("float64", shapes.TUNED["float64", False][0], {"stages": 3},
     "stages=3 \\(cp.async\\) is built for the mma.sync kernels and float32 SIMT: choose stages=1"),
    ("float32", shapes.Shape(False, 64, 64, 4, 4, 4), {"stages": 3}, "BK=4 must be a multiple of 8"),
    ("float64", DMMA128, {"stages": 5}, "stages=5: choose 1 \\(registers, two buffers\\) or 2..4 \\(cp.async\\)"),
    ("float32", shapes.Shape(True, 128, 128, 16, 2, 4), {"stages": 3}, "needs BK a power of two of at least 32"),
    ("float64", shapes.Shape(True, 32, 64, 16, 1, 8), {"stages": 3}, "pairs n8 tiles"),
    ("float64", shapes.Shape(True, 64, 64, 16, 2, 2, 2), {"stages": 3}, "choose stages=1 for 2 k-groups"),
    ("float64", DMMA128, {"raster": "column"}, "GEMM raster='column' is not built: choose one of 'row', 'grouped'"),
])
def test_pipeline_values_no_kernel_builds_raise_saying_what_to_choose(dtype, shape, fields, message):
    with pytest.raises(ValueError, match=message):
        gk.plan(gk.packed(dtype, 64, 64, 64), gk.GemmChoice(shape, **fields), SM90)
    small = dataclasses.replace(SM90, smem_per_block=80 * 1024)
    with pytest.raises(ValueError, match="needs 133120 bytes of shared memory; H100 SXM gives a block 81920: "
                                         "choose stages=2"):
        gk.plan(gk.packed("float64", 64, 64, 64), gk.GemmChoice(DMMA128, stages=4), small)


def test_stages_raster_and_swizzle_change_the_code_and_the_kernel_name():
    """The cp.async kernel: stages, tile order and the swizzled layout reach the source and the name."""
    problem = gk.packed("float64", 4096, 4096, 4096)
    base = gk.plan(problem, gk.GemmChoice(DMMA128, stages=3), SM90).launches[0]
    assert base.spec.template == "gemm/gemm_async.cu.jinja" and base.shared == 3 * 16 * (128 + 128 + 4) * 8
    src = pipeline.source(base.spec)
    assert "#define STAGES 3" in src and "#define SWIZZLE 1" in src
    for fields, token in (({"stages": 4}, "#define STAGES 4"), ({"raster": "grouped"}, "in_band"),
                          ({"pad": False}, "#define SWIZZLE 0")):
        other = gk.plan(problem, gk.GemmChoice(DMMA128, **{"stages": 3, **fields}), SM90).launches[0].spec
        assert token in pipeline.source(other) and token not in src and other.name != base.spec.name
    simt = gk.GemmChoice(shapes.TUNED["float32", False][0], raster="grouped")
    spec = gk.plan(gk.packed("float32", 4096, 4096, 4096), simt, SM90).launches[0].spec
    assert spec.template == "gemm/gemm.cu.jinja" and "in_band" in pipeline.source(spec) and spec.name.endswith("_grouped")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_async_variants_compile_without_spills(arch):
    """The cp.async kernel's other variants (the defaults compile above): TF32, plain layout + grouped order."""
    for dtype, shape, fields, (ta, tb, aligned) in (
            ("float32", shapes.Shape(True, 128, 128, 32, 2, 4), {"stages": 3}, (False, False, True)),
            ("float64", DMMA128, {"stages": 2, "pad": False, "raster": "grouped"}, (True, False, False))):
        plan = gk.plan(gk.packed(dtype, 1000, 1000, 1000, ta, tb, aligned), gk.GemmChoice(shape, **fields), named(arch))
        _, info = pipeline.build(plan.launches[0].spec, arch, persistent=False)
        assert info.spill_bytes == 0, f"{plan.launches[0].spec.name} spills {info.spill_bytes} bytes on {arch}"


SIMT_AUTO = (*shapes.AUTO_SIMT, shapes.SKINNY_SIMT)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_simt_async_variants_compile_without_spills(arch):
    """gemm_simt_async.cu.jinja: every heuristic float32 SIMT shape at stages 3 in every layout (aligned and not
    in turn), at stages 2 and 4 with A @ B aligned and A^T @ B^T unaligned; split-K and a batch once."""
    for shape in SIMT_AUTO:
        cases = [(3, tr, i % 2 == 0) for i, tr in enumerate(TRANS)]
        cases += [(st, tr, al) for st in (2, 4) for tr, al in (((False, False), True), ((True, True), False))]
        for stages, (ta, tb), aligned in cases:
            problem = gk.packed("float32", 1000, 1000, 1000, ta, tb, aligned)
            launch = gk.plan(problem, gk.GemmChoice(shape, stages=stages), named(arch)).launches[0]
            assert launch.spec.template == "gemm/gemm_simt_async.cu.jinja" and launch.shared > 0
            _, info = pipeline.build(launch.spec, arch, persistent=False)
            assert info.spill_bytes == 0, f"{launch.spec.name} spills {info.spill_bytes} bytes on {arch}"
    batch = gk.GemmProblem("float32", 70, 90, 20, True, False, False, 1.0, 0.5, 70, 90, 90, batch=3,
                           stride_a=1400, stride_b=1800, stride_c=6300)
    for problem, choice in ((gk.packed("float32", 33, 4097, 1000), gk.GemmChoice(shapes.SKINNY_SIMT, 3, split_k=7)),
                            (batch, gk.GemmChoice(shapes.AUTO_SIMT[0], 4)),
                            (gk.packed("float32", 4096, 4096, 4096, True), gk.GemmChoice(shapes.ASYNC_SIMT, 2))):
        spec = gk.plan(problem, choice, named(arch)).launches[0].spec
        assert pipeline.build(spec, arch, persistent=False)[1].spill_bytes == 0, spec.name


@pytest.mark.parametrize("field, token", [("enable_loop_unroll", '_Pragma("unroll 1")'),
                                          ("enable_shared_memory_opt", "#define LDA_S (BM + 0)"),
                                          ("enable_memory_coalescing", "#define VEC 1")])
def test_every_switch_changes_the_simt_cp_async_kernel(field, token):
    problem = gk.packed("float32", 4096, 4096, 4096)
    choices = [gk.choices(problem, make_config(**f).snapshot(), SM90)[0] for f in ({}, {field: False})]
    base, changed = (gk.plan(problem, dataclasses.replace(c, stages=3), SM90).specs[0] for c in choices)
    assert base.template == changed.template == "gemm/gemm_simt_async.cu.jinja"
    src = pipeline.source(changed)
    assert token in src and token not in pipeline.source(base) and changed.name != base.name


@pytest.mark.parametrize("m, n, k, trans_a, trans_b, stages, split, batch", [
    (33, 4097, 1000, False, False, 3, 4, 1), (70, 90, 20, True, True, 2, 4, 1), (64, 64, 1001, True, False, 4, 8, 1),
    (70, 90, 20, False, True, 3, 1, 3), (7, 33, 129, True, False, 4, 1, 2)])
def test_simt_async_plans_split_k_and_batches(rng, m, n, k, trans_a, trans_b, stages, split, batch):
    """The SIMT cp.async kernel takes split-K (slices of whole k-tiles, summed by splitk_reduce) and batches:
    the plan's launches, run in NumPy, give alpha op(A) op(B) + beta C (C NaN with beta 0 never read)."""
    for beta in (0.0, 0.5):
        sa, sb, sc = m * k, k * n, m * n
        problem = dataclasses.replace(gk.packed("float32", m, n, k, trans_a, trans_b, aligned=False, alpha=1.5,
                                                beta=beta), batch=batch, stride_a=sa * (batch > 1),
                                      stride_b=sb * (batch > 1), stride_c=sc * (batch > 1))
        plan = gk.plan(problem, gk.GemmChoice(shapes.AUTO_SIMT[1], stages=stages, split_k=split), SM90)
        assert plan.launches[0].spec.template == "gemm/gemm_simt_async.cu.jinja"
        assert len(plan.launches) == (2 if split > 1 else 1)
        a = rng.standard_normal((batch, k, m) if trans_a else (batch, m, k))
        b = rng.standard_normal((batch, n, k) if trans_b else (batch, k, n))
        c = rng.standard_normal((batch, m, n)) if beta else np.full((batch, m, n), np.nan)
        bufs = [a.ravel().copy(), b.ravel().copy(), c.ravel().copy(), np.full(plan.workspace // 4 + 1, np.nan)]
        blas_emulate.run(plan, bufs, 4)
        ref = 1.5 * (np.swapaxes(a, 1, 2) if trans_a else a) @ (np.swapaxes(b, 1, 2) if trans_b else b)
        ref = ref + (beta * c if beta else 0.0)
        assert np.allclose(bufs[2].reshape(batch, m, n), ref, rtol=1e-12, atol=1e-12)


def test_simt_async_is_a_tuning_candidate_where_both_operands_are_k_major():
    """A^T @ B, aligned: the cp.async SIMT kernel (BK 32, 2 stages) is the last tuning candidate, never the first;
    other layouts and unaligned operands do not get it."""
    for ta, tb, aligned in itertools.product((False, True), (False, True), (True, False)):
        found = gk.choices(gk.packed("float32", 4096, 4096, 4096, ta, tb, aligned), JITConfig().snapshot(), SM90)
        assert found[0].stages == 1
        assert (found[-1] == gk.GemmChoice(shapes.ASYNC_SIMT, stages=2)) == (ta and not tb and aligned)


def test_simt_async_shared_memory_and_what_it_cannot_build():
    """Dynamic shared memory: stages x BK x (BM + 4 + BN + 4) floats; float64 SIMT and shapes whose copies do not
    share out evenly raise saying what to choose."""
    plan = gk.plan(gk.packed("float32", 4096, 4096, 4096), gk.GemmChoice(shapes.AUTO_SIMT[0], stages=4), SM90)
    assert plan.launches[0].shared == 4 * 16 * (132 + 132) * 4 == shapes.async_smem(shapes.AUTO_SIMT[0], "float32", 4)
    assert "#define STAGES 4" in pipeline.source(plan.specs[0]) and plan.specs[0].name.endswith("_s4_nn_v4")
    odd = shapes.Shape(False, 32, 32, 8, 2, 2)   # 256 threads: a 8 x 32 k-major tile is 64 16-byte copies
    assert "cannot copy a 8 x 32 tile" in shapes.why_not(odd, "float32", 3)
    assert shapes.why_not(odd, "float32", 1) is None


def test_a_choice_may_have_bm_unequal_bn():
    wide = shapes.Shape(False, 64, 128, 8, 4, 8)   # 256 threads, 4 x 8 outputs each
    plan = gk.plan(gk.packed("float32", 1000, 1000, 1000), gk.GemmChoice(wide), SM90)
    (launch,) = plan.launches
    assert launch.grid == (8, 16, 1) and launch.block == (256, 1, 1)
    assert pipeline.build(launch.spec, "sm_90", persistent=False)[1].spill_bytes == 0


def test_k_zero_plans_a_kernel():
    (launch,) = gk.FAMILY.default_plan(gk.packed("float32", 33, 7, 0), JITConfig().snapshot(), SM90).launches
    assert launch.args[5].value == 0


# --- GPU: results against float64 NumPy --------------------------------------------------------------

def _operands(rng, dtype, m, n, k, trans_a, trans_b, beta):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(dtype)
    c = guarded([m, n], dtype, fill=c0 if beta else None)   # canaries around C catch out-of-bounds writes
    return a, b, c0, c   # beta == 0 must not read C: it starts as NaN


def _reference(a, b, c0, trans_a, trans_b, alpha, beta):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64)) + beta * c0.astype(np.float64)


def _assert_within_bound(out, a, b, c0, trans_a, trans_b, alpha, beta, dtype, k: int, tf32: bool) -> None:
    """Componentwise: |C - ref| <= u (|alpha| |op(A)| |op(B)| + |beta| |C0|), u = K+4 roundings of `dtype`
    (TF32: against operands rounded as cvt.rna does, so only the float32 sums remain). Holds for every seed."""
    if tf32:
        a, b = _tf32(a, tf32 != "trunc"), _tf32(b, tf32 != "trunc")
    u = (k + 4) * np.finfo(dtype).eps
    bound = u * _reference(np.abs(a), np.abs(b), np.abs(c0), trans_a, trans_b, abs(alpha), abs(beta))
    err = np.abs(np.asarray(out, np.float64) - _reference(a, b, c0, trans_a, trans_b, alpha, beta))
    assert np.all(np.isfinite(out)) and np.all(err <= bound), (
        f"{out.shape} x k={k} trans=({trans_a},{trans_b}): error {np.max(err - bound):.3g} over the bound")


def _tf32(x, nearest: bool = True):
    """float32 values as tensor cores take them: cvt.rna.tf32.f32 (10 mantissa bits, ties away from zero),
    or (nearest=False) as wgmma reads a raw float32 from shared memory: the low 13 bits dropped."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def _run(rng, dtype, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, config=None, tf32=False,
         choice=None):
    """One forward (bare, through a JIT wrapper with `config`, or the plan of `choice`); returns the profile
    when wrapped. tf32: True (rna operands), "trunc" (truncated operands) or False."""
    a, b, c0, c = _operands(rng, dtype, m, n, k, trans_a, trans_b, beta)
    gemm = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    profile = None
    if choice is not None:
        at = cuopjit.tensor(a)
        plan = gk.plan(gemm.problem(at, c), choice, cuopjit.target.of_device(0))
        executor.load(plan, 0, DEFAULT)((at.ptr, gemm._weight.ptr, c.ptr), 0)
    elif config is None:
        assert gemm.forward(cuopjit.tensor(a), c) is c
    else:
        jit = (cuopjit.JITGemmFloat if dtype == np.float32 else cuopjit.JITGemmDouble)(gemm)
        jit.set_jit_config(config)
        jit.forward(cuopjit.tensor(a), c)
        profile = jit.get_performance_profile()
    check_guards(c)
    _assert_within_bound(c.to_numpy(), a, b, c0, trans_a, trans_b, alpha, beta, dtype, k, tf32)
    return profile


@pytest.mark.gpu
@pytest.mark.parametrize("mma", [False, True], ids=["simt", "mma"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n, k, trans_a, trans_b, alpha, beta, split", [
    (33, 4097, 1000, False, False, 1.0, 0.0, 3), (256, 256, 4096, True, True, -0.5, 1.5, 12),
    (7, 33, 1001, False, True, 2.0, -1.0, 16), (1000, 1000, 1000, True, False, 1.0, 0.5, 3)])
def test_split_k_matches_numpy(rng, dtype, m, n, k, trans_a, trans_b, alpha, beta, split, mma):
    """Split-K plans of the one-stage kernel (slices of K into the workspace, then their sum with beta)."""
    name = np.dtype(dtype).name
    shape = next(t for t in shapes.TUNED[name, mma] if shapes.why_not(t, name, 1) is None)   # one-stage builds
    choice = gk.GemmChoice(shape, split_k=split)
    _run(rng, dtype, m, n, k, trans_a, trans_b, alpha, beta, choice=choice, tf32=mma and dtype == np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", TRANS)
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 7, 7), (33, 33, 33), (1000, 1000, 1000), (33, 4097, 1000)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_numpy(rng, dtype, m, n, k, trans_a, trans_b):
    _run(rng, dtype, m, n, k, trans_a, trans_b)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_4097_cubed(rng, dtype):
    _run(rng, dtype, 4097, 4097, 4097, trans_a=dtype == np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha, beta", [(0.5, -1.5), (-2.0, 1.0), (0.0, 2.0)])
def test_alpha_beta(rng, dtype, alpha, beta):
    _run(rng, dtype, 257, 263, 129, True, False, alpha=alpha, beta=beta)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_and_beta_set_after_a_forward_take_effect(rng, dtype):
    a, b, c0, c = _operands(rng, dtype, 65, 67, 63, False, False, 1.0)
    gemm = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)()
    gemm.set_weight(cuopjit.tensor(b))
    gemm.forward(cuopjit.tensor(a), cuopjit.empty([65, 67], np.dtype(dtype).name))
    gemm.alpha, gemm.beta = -0.5, 2.0
    gemm.forward(cuopjit.tensor(a), c)
    assert rel_error(c.to_numpy(), _reference(a, b, c0, False, False, -0.5, 2.0)) < _tol(dtype, 63)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a", [False, True])
def test_k_zero_gives_beta_c_and_empty_outputs_launch_nothing(rng, dtype, trans_a):
    name = np.dtype(dtype).name
    cls = cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble
    a = cuopjit.empty([0, 33] if trans_a else [33, 0], name)
    gemm = cls(trans_a=trans_a)
    gemm.set_weight(cuopjit.empty([0, 7], name))
    c = cuopjit.empty([33, 7], name).fill(float("nan"))
    gemm.forward(a, c)
    assert np.array_equal(c.to_numpy(), np.zeros((33, 7)))      # beta = 0: C is not read
    c0 = rng.standard_normal((33, 7)).astype(dtype)
    c = cuopjit.tensor(c0)
    gemm.beta = 2.0
    gemm.forward(a, c)
    assert np.array_equal(c.to_numpy(), 2 * c0)
    empty = cls()
    empty.set_weight(cuopjit.empty([4, 7], name))
    e = cuopjit.empty([0, 7], name)
    assert empty.forward(cuopjit.empty([0, 4], name), e) is e


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, shape", list(_all_shapes()))
def test_every_shape_on_gpu(rng, dtype, shape):
    """Each shape through its config (kernel_type, tile_size, block_size): odd sizes, non-multiples of the tile."""
    dt = np.dtype(dtype).type
    kernel_type = "tensor_core" if shape.mma else "tiled"
    cfg = make_config(kernel_type=kernel_type, tile_size=shape.bm, block_size=shape.threads)
    tf32 = shape.mma and dtype == "float32"
    # On sm_90 float32 tensor-core configs run wgmma (tests/test_gemm_wgmma.py): plan this shape directly.
    wgmma = tf32 and cuopjit.target.of_device(0).capability == 90
    for m, n, k, ta, tb, beta in ((260, 268, 132, False, True, 0.5), (257, 263, 129, True, False, 0.0),
                                  (33, 7, 1000, False, False, 0.0), (1, 1, 1, True, True, 1.0)):
        if wgmma:
            _run(rng, dt, m, n, k, ta, tb, beta=beta, tf32=tf32, choice=gk.GemmChoice(shape))
            continue
        profile = _run(rng, dt, m, n, k, ta, tb, beta=beta, config=cfg, tf32=tf32)
        label = gk.GemmChoice(shape, **gk.pipeline_fields(dtype, shape, cuopjit.target.of_device(0))).label
        assert profile.plan_choice == label and f"_{shape.layout}_" in profile.kernel_name
        assert profile.units == gk.UNITS[dtype, shape.mma]


ASYNC_CASES = [  # (dtype, shape, choice fields): every depth, both tile orders, the plain layout, TF32
    ("float64", DMMA128, {"stages": 2}),
    ("float64", DMMA128, {"stages": 3, "raster": "grouped"}),
    ("float64", shapes.Shape(True, 128, 64, 16, 2, 2), {"stages": 4, "pad": False}),
    ("float64", shapes.Shape(True, 32, 32, 16, 2, 1), {"stages": 4, "unroll": False}),
    ("float32", shapes.Shape(True, 128, 128, 32, 2, 4), {"stages": 3, "raster": "grouped"}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, shape, fields", ASYNC_CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_async_pipeline_on_gpu(rng, dtype, shape, fields):
    """The cp.async kernel against float64 NumPy: sizes 1, 7, 33, 1000 and 4097-wide, K not a multiple of
    BK x stages, all four transposes, alpha/beta, unaligned rows (4-/8-byte copies), C poisoned with NaN."""
    dt = np.dtype(dtype).type
    choice = gk.GemmChoice(shape, **fields)
    tf32 = "trunc" if dtype == "float32" else False   # the tensor cores read the top 19 bits of each float
    for (m, n, k), (ta, tb), (alpha, beta) in zip(
            ((1, 1, 1), (7, 7, 7), (33, 33, 33), (1000, 1000, 1000), (33, 4097, 1000), (257, 263, 129),
             (130, 70, 67), (64, 96, 200)),
            TRANS * 2, ((1.0, 0.0), (0.5, -1.5), (1.0, 0.0), (-2.0, 1.0), (1.0, 0.0), (0.0, 2.0), (1.5, 0.5),
                        (1.0, 0.0))):
        _run(rng, dt, m, n, k, ta, tb, alpha=alpha, beta=beta, tf32=tf32, choice=choice)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, stages", [(shapes.WIDE["float64", True], 4), (shapes.WIDE["float64", True], 3),
                                           (DMMA128, 2), (shapes.Shape(True, 64, 64, 16, 2, 2), 4)],
                         ids=["128x64-s4", "128x64-s3", "128x128-s2", "64x64-s4"])
def test_pipelined_k_loop_on_gpu(rng, shape, stages):
    """The swap product's pipelined k-loop (aligned float64 A @ B) against float64 NumPy: blocks inside and across
    the M / N edges; K a multiple of BK, with a partial last k-tile, shorter than the stages in flight, 2;
    alpha / beta; C poisoned with NaN."""
    choice = gk.GemmChoice(shape, stages=stages)
    for (m, n, k), (alpha, beta) in zip(((256, 128, 256), (300, 200, 130), (260, 136, 40), (130, 66, 2),
                                         (1024, 512, 1000)),
                                        ((1.0, 0.0), (0.5, -1.5), (1.0, 0.0), (-2.0, 1.0), (1.0, 0.5))):
        assert gk.plan(gk.packed("float64", m, n, k), choice, SM90).launches[0].spec.name.endswith("_swap")
        _run(rng, np.float64, m, n, k, alpha=alpha, beta=beta, choice=choice)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [1, 4])
@pytest.mark.parametrize("shape", [s for s in (*shapes.AUTO_SIMT, shapes.SKINNY_SIMT) if s.bm != s.bn],
                         ids=lambda s: s.label)
def test_auto_simt_shapes_on_gpu(rng, shape, split):
    """The heuristic's non-square float32 SIMT tiles, whole and in K slices, against float64 NumPy: sizes 1, 7, 33,
    1000 and 4097-wide, tiles cut at every edge, all four layouts, aligned (16-byte) and unaligned (spread scalar
    runs) rows, alpha/beta, C poisoned with NaN."""
    choice = gk.GemmChoice(shape, split_k=split)
    for (m, n, k), (ta, tb), (alpha, beta) in zip(
            ((1, 1, 1), (7, 7, 7), (33, 33, 33), (1000, 1000, 1000), (33, 4097, 1000), (257, 263, 129),
             (130, 70, 68), (64, 96, 200)),
            TRANS * 2, ((1.0, 0.0), (0.5, -1.5), (1.0, 0.0), (-2.0, 1.0), (1.0, 0.0), (0.0, 2.0), (1.5, 0.5),
                        (1.0, 0.0))):
        _run(rng, np.float32, m, n, k, ta, tb, alpha=alpha, beta=beta, choice=choice)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("field", ["enable_loop_unroll", "enable_shared_memory_opt", "enable_memory_coalescing"])
@pytest.mark.parametrize("kernel_type", ["tiled", "tensor_core"])
def test_switches_off_on_gpu(rng, dtype, field, kernel_type):
    tf32 = kernel_type == "tensor_core" and dtype == np.float32
    hopper = tf32 and cuopjit.target.of_device(0).capability == 90   # the aligned case runs wgmma there
    for tile in (32, 64, 128):
        cfg = make_config(kernel_type=kernel_type, tile_size=tile, **{field: False})
        _run(rng, dtype, 260, 268, 132, False, True, beta=0.5, config=cfg, tf32="trunc" if hopper else tf32)
        _run(rng, dtype, 257, 263, 129, True, False, config=cfg, tf32=tf32)


@pytest.mark.gpu
@pytest.mark.parametrize("fields", SEED_CONFIGS, ids=lambda f: "-".join(f"{v}" for v in f.values()))
@pytest.mark.parametrize("dtype", DTYPES)
def test_seed_configurations(rng, dtype, fields):
    """Every configuration the seed shows runs, through the JIT wrapper, on odd sizes."""
    cfg = make_config(**fields)
    tc = gk.uses_tensor_cores(cfg.kernel_type, cfg.enable_tensor_core, np.dtype(dtype).name)
    target = cuopjit.target.of_device(0)
    for m, n, k in ((1, 1, 1), (7, 7, 7), (33, 1000, 36), (1000, 36, 1000), (1000, 1000, 1000)):
        problem = gk.packed(np.dtype(dtype).name, m, n, k, aligned=k % 4 == 0 and n % 4 == 0)
        wgmma = gk.uses_wgmma(problem, cfg.snapshot(), target)
        tf32 = ("trunc" if wgmma else tc) if dtype == np.float32 else False
        profile = _run(rng, dtype, m, n, k, beta=0.0, config=cfg, tf32=tf32)
        if wgmma:
            assert profile.units.startswith("TF32 tensor cores") and "_wgmma_" in profile.kernel_name
            if fields.get("tile_size"):
                assert f"x{fields['tile_size']}x32_" in profile.kernel_name
            continue
        assert profile.units == gk.UNITS[np.dtype(dtype).name, tc]
        if fields.get("tile_size"):
            assert f"_t{fields['tile_size']}x{fields['tile_size']}x" in profile.kernel_name


@pytest.mark.gpu
def test_a_non_square_block_tile_on_gpu(rng):
    a, b, c0, c = _operands(rng, np.float32, 1000, 333, 257, False, False, 0.0)
    at, bt = cuopjit.tensor(a), cuopjit.tensor(b)
    problem = gk.GemmProblem("float32", 1000, 333, 257, False, False, False, 1.0, 0.0, 257, 333, 333)
    plan = gk.plan(problem, gk.GemmChoice(shapes.Shape(False, 64, 128, 8, 4, 8)), cuopjit.target.of_device(0))
    run = executor.load(plan, 0, DEFAULT)
    run((at.ptr, bt.ptr, c.ptr), 0)
    assert rel_error(c.to_numpy(), _reference(a, b, c0, False, False, 1.0, 0.0)) < _tol(np.float32, 257)


@pytest.mark.gpu
def test_errors():
    g = cuopjit.GemmFloat()
    with pytest.raises(ValueError, match=r"GemmFloat: no weight: call set_weight\(B\) before forward"):
        g.forward(cuopjit.empty([4, 4]), cuopjit.empty([4, 4]))
    g.set_weight(cuopjit.empty([5, 3]))
    with pytest.raises(ValueError, match=r"op\(a\) has 4 columns but op\(weight\) has 5 rows"):
        g.forward(cuopjit.empty([2, 4]), cuopjit.empty([2, 3]))
    with pytest.raises(ValueError, match=r"GemmFloat: c has shape \[2, 4\], expected \[2, 3\]"):
        g.forward(cuopjit.empty([2, 5]), cuopjit.empty([2, 4]))
    with pytest.raises(TypeError, match="GemmFloat: a is float64"):
        g.forward(cuopjit.empty([2, 5], "float64"), cuopjit.empty([2, 3]))


SIMT_ASYNC_CASES = [  # (shape, choice fields): every depth, both tile orders, every switch off, split-K, BK 32
    (shapes.AUTO_SIMT[0], {"stages": 2}),
    (shapes.AUTO_SIMT[0], {"stages": 3, "raster": "grouped"}),
    (shapes.AUTO_SIMT[0], {"stages": 4, "split_k": 3}),
    (shapes.Shape(False, 128, 128, 32, 8, 8), {"stages": 2}),
    (shapes.AUTO_SIMT[1], {"stages": 3, "split_k": 4}),
    (shapes.AUTO_SIMT[2], {"stages": 4, "pad": False}),
    (shapes.AUTO_SIMT[3], {"stages": 3, "unroll": False}),
    (shapes.AUTO_SIMT[4], {"stages": 2, "coalesce": False}),
    (shapes.SKINNY_SIMT, {"stages": 3, "split_k": 7}),
    (shapes.Shape(False, 16, 128, 32, 4, 8), {"stages": 2, "split_k": 7}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape, fields", SIMT_ASYNC_CASES,
                         ids=[f"{s.label}-" + "-".join(f"{k}{v}" for k, v in f.items()) for s, f in SIMT_ASYNC_CASES])
def test_simt_async_pipeline_on_gpu(rng, shape, fields):
    """gemm_simt_async.cu.jinja against float64 NumPy: sizes 1, 7, 33, 1000, 4097-wide and tiles cut at every edge,
    K not a multiple of BK x stages, all four layouts, aligned (16-byte copies) and unaligned rows (4-byte), alpha
    and beta, C poisoned with NaN (and fenced by canaries)."""
    choice = gk.GemmChoice(shape, **fields)
    for (m, n, k), (ta, tb), (alpha, beta) in zip(
            ((1, 1, 1), (7, 7, 7), (33, 33, 33), (1000, 1000, 1000), (33, 4097, 1000), (257, 263, 129),
             (130, 70, 68), (64, 96, 200), (4097, 65, 36), (100, 4097, 4)),
            TRANS * 3, ((1.0, 0.0), (0.5, -1.5), (1.0, 0.0), (-2.0, 1.0), (1.0, 0.0), (0.0, 2.0), (1.5, 0.5),
                        (1.0, 0.0), (1.0, 1.0), (2.0, 0.0))):
        _run(rng, np.float32, m, n, k, ta, tb, alpha=alpha, beta=beta, choice=choice)


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", TRANS)
def test_simt_async_batched_on_gpu(rng, trans_a, trans_b):
    """A batch of 3 on the SIMT cp.async kernel (one A broadcast when trans_a): each entry against float64 NumPy."""
    m, n, k, batch = 70, 90, 37, 3
    a = rng.standard_normal((k, m) if trans_a else (batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k) if trans_b else (batch, k, n)).astype(np.float32)
    c0 = rng.standard_normal((batch, m, n)).astype(np.float32)
    problem = gk.GemmProblem("float32", m, n, k, trans_a, trans_b, False, 1.5, 0.5, m if trans_a else k,
                             k if trans_b else n, n, batch=batch, stride_a=0 if trans_a else m * k, stride_b=n * k,
                             stride_c=m * n)
    plan = gk.plan(problem, gk.GemmChoice(shapes.AUTO_SIMT[3], stages=3), cuopjit.target.of_device(0))
    at, bt, c = cuopjit.tensor(a), cuopjit.tensor(b), cuopjit.tensor(c0)
    executor.load(plan, 0, DEFAULT)((at.ptr, bt.ptr, c.ptr), 0)
    a64 = np.broadcast_to(a, (batch, k, m)) if trans_a else a
    ops = (np.swapaxes(a64, 1, 2) if trans_a else a64).astype(np.float64), b.astype(np.float64)
    ref = 1.5 * ops[0] @ (np.swapaxes(ops[1], 1, 2) if trans_b else ops[1]) + 0.5 * c0
    assert rel_error(c.to_numpy(), ref) < _tol(np.float32, k)
