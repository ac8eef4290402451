"""GEMM: every allowed config renders and compiles without spills (CPU, real NVRTC); bad configs raise
with a message that says what is allowed; on a GPU, GemmFloat/GemmDouble match float64 NumPy on fresh
random inputs, odd sizes, transposes and alpha/beta, with C poisoned with NaN first."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuopjit
from cuopjit.codegen import render
from cuopjit.compiler import CompileOptions, compile_cubin
from cuopjit.config import JITConfig
from cuopjit.ops.gemm_kernels import allowed_combinations, gemm_kernel

from conftest import make_config, rel_error

DTYPES = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-13}
TF32_TOL = 2e-3  # TF32 operands keep 10 mantissa bits: ~3e-4 relative error on random data



def _grid():
    for dtype, tc in itertools.product(DTYPES, (False, True)):
        for tile, block in allowed_combinations(np.dtype(dtype), tc):
            yield pytest.param(dtype, tc, tile, block, id=f"{np.dtype(dtype).name}-{'tc' if tc else 'simt'}-"
                                                           f"{tile}-{block}")


# --- CPU: render + compile every allowed config -----------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype, tc, tile, block", list(_grid()))
def test_every_config_compiles_without_spills(arch, dtype, tc, tile, block):
    cfg = make_config(tile_size=tile, block_size=block, enable_tensor_core=tc,
               kernel_type="tensor_core" if tc else "tiled").snapshot()
    for (ta, tb), aligned in zip(itertools.product((False, True), repeat=2), (True, False, False, True)):
        template, name, params, grid, threads, shared = gemm_kernel(np.dtype(dtype), cfg, 1000, 1000, 1000,
                                                                    ta, tb, aligned)
        out = compile_cubin(render(template, params), name, CompileOptions(arch=arch), params=params)
        assert out.spill_bytes == 0, f"{name} spills on {arch}:\n{out.log}"
        assert out.registers <= 255 and threads == (block, 1, 1) and shared == 0
        assert grid == (-(-1000 // tile), -(-1000 // tile), 1)


@pytest.mark.parametrize("field, value, token", [
    ("enable_loop_unroll", False, "unroll 1"),
    ("enable_shared_memory_opt", False, "#define LDA_S (BM + 0)"),
    ("enable_memory_coalescing", False, "#define VEC 1"),
    ("enable_tensor_core", True, "mma.sync.aligned"),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_switch_changes_the_code(dtype, field, value, token):
    start = {"kernel_type": "tiled"} if field == "enable_tensor_core" else {}
    base = gemm_kernel(np.dtype(dtype), make_config(**start).snapshot(), 4096, 4096, 4096, False, False, True)
    if field == "enable_tensor_core":
        start = {}
    changed = gemm_kernel(np.dtype(dtype), make_config(**start, **{field: value}).snapshot(), 4096, 4096, 4096, False,
                          False, True)
    src = render(changed[0], changed[2])
    assert token in src and src != render(base[0], base[2]) and changed[1] != base[1]


def test_auto_takes_exact_fp64_tensor_cores_but_not_tf32():
    default = JITConfig().snapshot()
    assert "_dmma_" in gemm_kernel(np.dtype("float64"), default, 4096, 4096, 4096, False, False, True)[1]
    assert "_r8x8_" in gemm_kernel(np.dtype("float32"), default, 4096, 4096, 4096, False, False, True)[1]
    tiled = make_config(kernel_type="tiled").snapshot()
    assert "_r8x8_" in gemm_kernel(np.dtype("float64"), tiled, 4096, 4096, 4096, False, False, True)[1]


def test_names_and_auto_tiles():
    default = JITConfig().snapshot()
    assert gemm_kernel(np.dtype("float32"), default, 4096, 4096, 4096, False, False, True)[1] \
        == "gemm_f32_t128x128x16_r8x8_nn_v4"
    assert gemm_kernel(np.dtype("float64"), default, 7, 7, 7, True, True, False)[1].endswith("_tt_v1")
    # Small problems get smaller tiles so that the 132 SMs still have blocks to run.
    for (m, n), tile in (((4096, 4096), 128), ((1024, 1024), 64), ((33, 4097), 32)):
        _, _, params, grid, _, _ = gemm_kernel(np.dtype("float32"), default, m, n, 64, False, False, True)
        assert params["BM"] == tile and grid == (-(-n // tile), -(-m // tile), 1)


@pytest.mark.parametrize("fields, message", [
    ({"tile_size": 256}, "GEMM tile_size=256 is not allowed: choose 0 \\(auto\\) or one of 128, 64, 32"),
    ({"tile_size": 128, "block_size": 64}, "valid tile_size/block_size pairs are 128/256, "),
    ({"enable_tma": True}, "GEMM has no TMA kernel: set enable_tma=False"),
    ({"kernel_type": "warp_optimized"}, "GEMM kernel_type='warp_optimized' is not allowed: choose one of "
                                        "'auto', 'tiled', 'tensor_core'"),
    ({"kernel_type": "tiled", "enable_tensor_core": True}, "set kernel_type='tensor_core'"),
])
def test_bad_configs_raise(fields, message):
    with pytest.raises(ValueError, match=message):
        gemm_kernel(np.dtype("float32"), make_config(**fields).snapshot(), 64, 64, 64, False, False, True)


def test_bad_dtype_and_shape_raise():
    with pytest.raises(TypeError, match="GEMM supports float32 and float64, not float16"):
        gemm_kernel(np.dtype("float16"), JITConfig().snapshot(), 8, 8, 8, False, False, True)
    with pytest.raises(ValueError, match="GEMM needs M, N, K >= 1, got M=0"):
        gemm_kernel(np.dtype("float32"), JITConfig().snapshot(), 0, 8, 8, False, False, True)


# --- GPU: results against float64 NumPy --------------------------------------------------------------

def _run(rng, dtype, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, config=None, tol=None):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c0 = rng.standard_normal((m, n)).astype(dtype)
    c = cuopjit.tensor(c0) if beta else cuopjit.zeros([m, n], dtype=np.dtype(dtype).name)
    if not beta:
        c.fill(float("nan"))  # beta == 0 must not read C
    gemm = (cuopjit.GemmFloat if dtype == np.float32 else cuopjit.GemmDouble)(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm) if dtype == np.float32 else cuopjit.JITGemmDouble(gemm)
    if config is not None:
        op.set_jit_config(config)
    op.forward(cuopjit.tensor(a), c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = alpha * ((a64.T if trans_a else a64) @ (b64.T if trans_b else b64)) + beta * c0.astype(np.float64)
    err = rel_error(c.to_numpy(), ref)
    assert err < (tol or TOL[dtype]), f"{m}x{n}x{k} trans=({trans_a},{trans_b}): rel error {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("trans_a, trans_b", list(itertools.product((False, True), repeat=2)))
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
@pytest.mark.parametrize("dtype, tc, tile, block", list(_grid()))
def test_every_config_on_gpu(rng, dtype, tc, tile, block):
    tol = TF32_TOL if tc and dtype == np.float32 else TOL[dtype]
    for field in ("enable_loop_unroll", "enable_shared_memory_opt", "enable_memory_coalescing", None):
        cfg = make_config(tile_size=tile, block_size=block, enable_tensor_core=tc,
                   kernel_type="tensor_core" if tc else "tiled")
        if field:
            setattr(cfg, field, False)
        _run(rng, dtype, 260, 268, 132, False, True, beta=0.5, config=cfg, tol=tol)
        _run(rng, dtype, 257, 263, 129, True, False, config=cfg, tol=tol)
