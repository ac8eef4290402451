"""JIT wrappers on the GPU: the issue's example, profiles, cache switches, and the warm launch path."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cuopjit
from cuopjit.build import pipeline

pytestmark = pytest.mark.gpu


def _problem(rng, n=1000):
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    return a, b


def test_readme_example(rng, tmp_path):
    a_np, b_np = _problem(rng)
    a, b = cuopjit.tensor(a_np), cuopjit.tensor(b_np)
    c = cuopjit.zeros([1000, 1000])
    c.fill(float("nan"))
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(b)
    jit = cuopjit.JITGemmFloat(gemm)
    jit.enable_persistent_cache(True)
    jit.set_persistent_cache_directory(tmp_path / "jit_cache")
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 64
    cfg.block_size = 256
    jit.set_jit_config(cfg)
    jit.forward(a, c)
    ref = a_np.astype(np.float64) @ b_np.astype(np.float64)
    out = c.to_numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    profile = jit.get_performance_profile()
    assert profile.execution_time > 0 and profile.gflops > 0 and "t64x64" in profile.kernel_name
    assert list((tmp_path / "jit_cache").rglob("*t64x64*.cubin"))


def test_second_process_loads_from_disk(tmp_path):
    code = textwrap.dedent(f"""
        import numpy as np, cuopjit
        g = cuopjit.GemmFloat(); g.set_weight(cuopjit.ones([64, 64]))
        jit = cuopjit.JITGemmFloat(g); jit.set_persistent_cache_directory({str(tmp_path)!r})
        c = cuopjit.zeros([64, 64]); jit.forward(cuopjit.ones([64, 64]), c)
        assert c.to_numpy()[0, 0] == 64
        print("hit" if jit.get_performance_profile().cache_hit else "compiled")
    """)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["compiled", "hit"], runs[0].stderr + runs[1].stderr


def test_persistent_cache_off_writes_nothing(tmp_path):
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([8, 8]))
    jit = cuopjit.JITGemmFloat(g)
    jit.set_persistent_cache_directory(tmp_path / "c")
    jit.enable_persistent_cache(False)
    jit.forward(cuopjit.ones([8, 8]), cuopjit.zeros([8, 8]))
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").rglob("*.cubin"))


def test_enable_jit_false_uses_the_default_kernel():
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([256, 256]))
    jit = cuopjit.JITGemmFloat(g)
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 64   # the default for 256x256 is 32x32 tiles (enough blocks for every SM)
    jit.set_jit_config(cfg)
    a, c = cuopjit.ones([256, 256]), cuopjit.zeros([256, 256])
    jit.forward(a, c)
    tuned = jit.get_performance_profile().kernel_name
    jit.enable_jit(False)
    jit.forward(a, c)
    assert jit.get_performance_profile().kernel_name != tuned
    assert c.to_numpy()[5, 5] == 256


def test_wrapper_checks_its_operator_and_config():
    with pytest.raises(TypeError, match="JITGemmFloat wraps a GemmFloat, got GemmDouble"):
        cuopjit.JITGemmFloat(cuopjit.GemmDouble())
    jit = cuopjit.JITGemmFloat(cuopjit.GemmFloat())
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 256
    with pytest.raises(ValueError, match="tile_size=256"):
        jit.set_jit_config(cfg)


def test_warm_forward_renders_hashes_and_reads_nothing(monkeypatch):
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([128, 128]))
    a, c = cuopjit.ones([128, 128]), cuopjit.zeros([128, 128])
    g.forward(a, c)

    def forbidden(*args, **kwargs):
        raise AssertionError("the warm path must not get here")
    monkeypatch.setattr(pipeline, "build", forbidden)
    monkeypatch.setattr(pipeline.codegen, "render", forbidden)
    monkeypatch.setattr("builtins.open", forbidden)
    for _ in range(3):
        g.forward(a, c)
    monkeypatch.undo()
    assert c.to_numpy()[0, 0] == 128


def test_benchmark_helper():
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([64, 64]))
    stats = cuopjit.benchmark(g, cuopjit.ones([64, 64]), cuopjit.zeros([64, 64]), num_runs=5, warmup_runs=1)
    assert set(stats) >= {"mean_time_ms", "std_time_ms", "min_time_ms", "max_time_ms"}
    assert 0 < stats["min_time_ms"] <= stats["mean_time_ms"] <= stats["max_time_ms"]


def test_auto_tuning_times_candidates_once_and_keeps_inputs_intact(rng, tmp_path):
    from cuopjit.cache import get_cache
    from cuopjit.tuning import choice_key, record_key
    glob = cuopjit.get_default_global_jit_config()
    a_np, b_np = _problem(rng, 300)
    c_np = rng.standard_normal((300, 300)).astype(np.float32)
    g = cuopjit.GemmFloat(beta=1.0)
    g.set_weight(cuopjit.tensor(b_np))
    jit = cuopjit.JITGemmFloat(g)
    jit.set_persistent_cache_directory(tmp_path)
    a, c = cuopjit.tensor(a_np), cuopjit.tensor(c_np)
    glob.enable_auto_tuning = True
    try:
        jit.forward(a, c)
    finally:
        glob.enable_auto_tuning = False
    ref = a_np.astype(np.float64) @ b_np + c_np        # C updated exactly once despite the trials
    out = c.to_numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    problem, tgt = g.problem(a, c), cuopjit.target.of_device(0)
    labels = [c.label for c in g.family.choices(problem, cuopjit.JITConfig().snapshot(), tgt)]
    records = [get_cache(str(tmp_path)).load_record("tuning", choice_key(record_key(g.family.name, problem, tgt), x))
               for x in labels]   # one record per choice
    assert len(labels) >= 3 and all(r is not None and r["ms"] > 0 for r in records)
    c2 = cuopjit.tensor(c_np)
    glob.enable_auto_tuning = True
    try:
        jit.forward(a, c2)                              # the record is read when the plan is made, not per call
        import cuopjit.tuning as tuning_module
        calls = []
        real = tuning_module.fastest
        tuning_module.fastest = lambda *args, **kw: calls.append(1) or real(*args, **kw)
        try:
            for _ in range(3):
                jit.forward(a, c2)
        finally:
            tuning_module.fastest = real
    finally:
        glob.enable_auto_tuning = False
    assert calls == []


def test_forward_from_another_thread():
    import threading
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([32, 32]))
    a, c = cuopjit.ones([32, 32]), cuopjit.zeros([32, 32])
    g.forward(a, c)
    errors = []

    def work():
        try:
            c.zero()
            g.forward(a, c)
        except Exception as exc:  # reported below
            errors.append(exc)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors and c.to_numpy()[3, 3] == 32


def test_profile_times_the_kernel_not_its_compile():
    g = cuopjit.GemmFloat(trans_a=True, trans_b=True)   # a kernel no other test of this process built
    g.set_weight(cuopjit.ones([67, 65]))
    jit = cuopjit.JITGemmFloat(g)
    jit.enable_persistent_cache(False)                   # so this forward runs NVRTC (tens of ms)
    c = cuopjit.zeros([63, 67])
    jit.forward(cuopjit.ones([65, 63]), c)
    profile = jit.get_performance_profile()
    assert not profile.cache_hit and profile.build_time > 5.0
    assert profile.execution_time < 1.0, profile        # a 63x67x65 GEMM takes microseconds
    assert c.to_numpy()[0, 0] == 65


def test_a_cubin_the_driver_rejects_is_dropped_and_rebuilt(tmp_path):
    from cuopjit.cache import get_cache
    g = cuopjit.GemmFloat(trans_b=True)
    g.set_weight(cuopjit.ones([48, 40]))
    spec = g.plan(cuopjit.ones([40, 40]), cuopjit.zeros([40, 48])).launches[0].spec
    entry = pipeline.entry_spec(spec, cuopjit.device.driver.get_device().arch)
    cache = get_cache(str(tmp_path))
    bad = b"\x7fELF" + bytes(256)                 # checksum-valid entry, a cubin no driver loads
    assert cache.get_or_build(entry, lambda: bad) == (bad, False)
    cache._memory.clear()                          # as a fresh process would start
    loaded = pipeline.get_function(spec, 0, str(tmp_path), True)
    assert loaded.function.handle is not None and not loaded.info.cache_hit
    assert cache.stats().rejected == 1 and list((tmp_path / "rejected").iterdir())
    cubin, hit = cache.get_or_build(entry, lambda: bad)
    assert hit and cubin != bad                   # the rebuilt cubin replaced the bad entry
