"""cuopjit.explain: the static report for named targets (no GPU), the reasons, occupancy math, and on a GPU the
measured time against the roofline and enable_debug's launch check."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cuopjit
from cuopjit import target
from cuopjit.explain import _static, entry_report, explain_family, occupancy
from cuopjit.recipes import SHAPES, build, fake_maker, parse_shape
from cuopjit.ops import FAMILIES

from conftest import make_config

SM80, SM90 = target.named("sm_80"), target.named("sm_90")


def DOT_SPEC(e):
    """The kernel spec of an explained dot (both launches share one module)."""
    op, args, kwargs = build("dot", e.dtype, (e.problem["n"],), fake_maker(np.dtype(e.dtype)))
    return op.plan(*args, target=target.named(e.arch)).launches[0].spec


# --- CPU: static parts for a named --arch ------------------------------------------------------------------
@pytest.mark.parametrize("op", list(SHAPES))
def test_every_family_reports_resources_for_a_named_arch(op):
    e = explain_family(op, "float32", arch="sm_90")
    assert e.arch == "sm_90" and e.target == "H100 SXM" and e.measured is None
    assert e.why == "heuristic" and e.choice in e.candidates
    assert e.kernels, "every default shape launches at least one kernel"
    for k in e.kernels:
        assert k["registers"] > 0 and k["spill_bytes"] >= 0 and k["static_shared"] >= 0
        assert k["resources_from"] == "ptxas (NVRTC)"
        occ = k["occupancy"]
        assert 1 <= occ["blocks_per_sm"] <= 32 and 0 < occ["fraction"] <= 1
    assert "measured: no" in str(e)


def test_float64_gemm_on_sm80_with_an_odd_shape():
    e = explain_family("gemm", "float64", parse_shape("33,4097,1000"), arch="sm_80")
    assert e.problem["m"] == 33 and e.problem["n"] == 4097 and e.problem["k"] == 1000
    assert not e.problem["aligned"] and e.target == "A100 SXM" and e.dtype == "float64"
    d = e.as_dict()
    assert d["kernels"][0]["name"].startswith("gemm_f64") and d["work"]["flops"] == 2.0 * 33 * 4097 * 1000


def test_a_user_config_is_named_as_the_reason():
    e = explain_family("gemm", "float32", (256, 256, 256), arch="sm_90", config=make_config(tile_size=64))
    assert e.why == "user config" and "tile_size=64" in e.reason
    assert "t64x64" in e.kernels[0]["name"]


def test_registers_cap_reaches_the_report():
    """max_registers=32 makes ptxas hold the default float32 GEMM to 32 registers (spilling the rest)."""
    e = explain_family("gemm", "float32", (256, 256, 256), arch="sm_90", config=make_config(max_registers=32))
    k = e.kernels[0]
    assert k["registers"] <= 32 and k["spill_bytes"] > 0


def test_each_entry_point_gets_its_own_figures():
    """A module may hold several entry points (dot's partial and final sums): ptxas reports each apart."""
    e = explain_family("dot", "float64", (4097,), arch="sm_80")
    partial, final = e.kernels
    report = _static(DOT_SPEC(e), "sm_80")
    assert report.log.count("Compiling entry function") == 2
    assert partial["registers"] == entry_report(report.log, "dot_partial").registers
    assert final["registers"] == entry_report(report.log, "dot_final").registers


def test_occupancy_limits():
    assert occupancy(SM90, 256, 128, 0) == {"blocks_per_sm": 2, "fraction": 0.25, "limiter": "registers",
                                            "from": "target limits"}
    assert occupancy(SM90, 256, 32, 0)["blocks_per_sm"] == 8          # 2048 threads per SM
    assert occupancy(SM90, 32, 16, 0) == {"blocks_per_sm": 32, "fraction": 0.5, "limiter": "blocks",
                                          "from": "target limits"}
    smem = occupancy(SM80, 128, 32, 100 * 1024)                        # 164 KiB per SM: one 100 KiB block
    assert smem["blocks_per_sm"] == 1 and smem["limiter"] == "shared memory"


def test_a_family_without_a_shape_recipe_explains_its_first_problem():
    other = [op for op in FAMILIES if op not in SHAPES]
    if not other:
        pytest.skip("every family has a shape recipe")
    e = explain_family(other[0], "float32", arch="sm_90")
    assert e.kernels and e.problem == {k: v for k, v in e.problem.items()}
    with pytest.raises(ValueError, match="has no --shape recipe yet"):
        explain_family(other[0], "float32", (4, 4), arch="sm_90")


@pytest.mark.parametrize("text, message", [("", "is not understood"), ("4,0", "is not understood"),
                                           ("a,b", "is not understood")])
def test_bad_shapes_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_shape(text)


def test_gemm_needs_three_sizes():
    with pytest.raises(ValueError, match=r"gemm: --shape takes M,N,K, got 4,4"):
        build("gemm", "float32", (4, 4), fake_maker(np.float32))


def test_unknown_family():
    with pytest.raises(ValueError, match="unknown op 'nosuch'"):
        explain_family("nosuch")


# --- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("op", list(SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_explain_measures_every_family(op, dtype):
    e = explain_family(op, dtype, runs=10)
    m = e.measured
    assert m is not None and m["time_ms"] > 0 and m["bound"] in ("memory", "compute")
    assert 0 < m["roofline_fraction"] < 1.2, m
    for k in e.kernels:
        assert k["resources_from"].startswith("cuFuncGetAttribute")
        assert k["occupancy"]["from"] == "cuOccupancyMaxActiveBlocksPerMultiprocessor"
        assert k["occupancy"]["blocks_per_sm"] >= 1
        assert k["registers"] > 0
        assert k["ptxas_registers"] in (k["registers"], 0)   # the driver reads what ptxas reported, if it did


@pytest.mark.gpu
def test_explain_names_a_tuning_record():
    cfg = cuopjit.get_default_global_jit_config()
    gemm = cuopjit.GemmFloat()
    b = cuopjit.random((512, 512), seed=1)
    gemm.set_weight(b)
    a, c = cuopjit.random((512, 512), seed=2), cuopjit.empty((512, 512))
    wrapped = cuopjit.JITGemmFloat(gemm)
    cfg.enable_auto_tuning = True
    try:
        wrapped.enable_persistent_cache(False)
        wrapped.forward(a, c)
        e = cuopjit.explain(wrapped, a, c, runs=5)
    finally:
        cfg.enable_auto_tuning = False
    assert e.why == "tuning record" and "fastest of" in e.reason and e.measured["time_ms"] > 0


@pytest.mark.gpu
def test_debug_names_the_operator_and_kernel_of_an_illegal_address(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, cuopjit
        from cuopjit.tensor import Tensor
        x = cuopjit.zeros([1 << 20])
        bad = Tensor._view(0x10, (1 << 20,), np.dtype(np.float32), 0, None)   # an address nothing maps
        try:
            cuopjit.ReluFloat().forward(x, bad)
        except cuopjit.ExecutionError as exc:
            print("ERROR", exc.error_name, exc)
    """)
    env = {**os.environ, "CUOPJIT_DEBUG": "1", "CUOPJIT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert "ERROR CUDA_ERROR_ILLEGAL_ADDRESS ReluFloat failed on device 0 in kernel relu_f32" in out.stdout, out
    assert list((tmp_path / "sources").glob("relu_f32*.cu")), "debug keeps the rendered source beside the cache"


def test_debug_checks_each_launch_and_names_the_one_that_failed(monkeypatch):
    """enable_debug's wrapper: launch, synchronise, and on an error name the operator and that launch's kernel."""
    from types import SimpleNamespace
    from cuopjit.run import executor

    statuses, launched = iter([None, cuopjit.ExecutionError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS",
                                                            "CUDA_ERROR_ILLEGAL_ADDRESS")]), []

    def synchronize(stream):
        status = next(statuses)
        if status is not None:
            raise status
    monkeypatch.setattr(executor.streams, "capturing", lambda stream: False)
    monkeypatch.setattr(executor.streams, "synchronize", synchronize)

    def launch(name):
        return _Launch(SimpleNamespace(spec=SimpleNamespace(name=name, template="blas1/dot.cu.jinja")), launched)
    runner = SimpleNamespace(plan=SimpleNamespace(workspace=0, choice="b256"), ordinal=0,
                             launches=[launch("dot_partial_x"), launch("dot_final_x")])
    run = executor.checked(lambda p, s: None, runner, "JITDotFloat(DotFloat)")
    with pytest.raises(cuopjit.ExecutionError, match=r"^JITDotFloat\(DotFloat\) failed on device 0 in kernel "
                                                     r"dot_final_x \(template blas1/dot.cu.jinja, plan b256\): "
                                                     r"CUDA_ERROR_ILLEGAL_ADDRESS"):
        run((1, 2, 3), 5)
    assert launched == [("dot_partial_x", (1, 2, 3), 5), ("dot_final_x", (1, 2, 3), 5)]
    assert run.runner is runner


class _Launch:
    def __init__(self, kl, log):
        self.kl, self.log = kl, log

    def __call__(self, pointers, stream):
        self.log.append((self.kl.spec.name, pointers, stream))
