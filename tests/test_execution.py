"""Per-call settings, streams and CUDA graphs on the GPU: wrappers never bleed into each other,
forwards order on the stream they are given, captured graphs replay on new data."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import cuopjit
from cuopjit.run import executor

from conftest import make_config, rel_error

pytestmark = pytest.mark.gpu


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _gemm_tol(k: int) -> float:
    return 4 * k * np.finfo(np.float32).eps


def test_two_wrappers_on_one_operator_keep_their_own_kernels(rng):
    a_np, b_np = rng.standard_normal((256, 96)), rng.standard_normal((96, 256))
    a, c = cuopjit.tensor(a_np.astype(np.float32)), cuopjit.zeros([256, 256])
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(cuopjit.tensor(b_np.astype(np.float32)))
    small, large = cuopjit.JITGemmFloat(gemm), cuopjit.JITGemmFloat(gemm)
    small.set_jit_config(make_config(tile_size=64))
    large.set_jit_config(make_config(tile_size=128))
    names = {}
    for _ in range(3):
        for label, jit in (("small", small), ("large", large), ("bare", None)):
            c.fill(float("nan"))
            if jit is None:
                gemm.forward(a, c)
            else:
                jit.forward(a, c)
                names.setdefault(label, set()).add(jit.get_performance_profile().kernel_name)
            assert rel_error(c.to_numpy(), a_np @ b_np) < _gemm_tol(96)
    assert len(names["small"]) == len(names["large"]) == 1
    assert "t64x64" in names["small"].pop() and "t128x128" in names["large"].pop()
    bare = [executor.runner_of(run).kernel_names for run in gemm._plans[cuopjit.config.DEFAULT].values()]
    assert bare and not any("t128" in name or "t64x64" in name for name in bare)
    assert gemm.plan(a, c).launches[0].spec.name.startswith("gemm_f32_t32x32")   # the bare default for 256^2


def test_forwards_order_on_a_torch_side_stream(rng):
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((512, 1000)).astype(np.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        xt = torch.from_numpy(x_np).cuda(non_blocking=False) * 2.0     # torch work queued on the side stream
        yt = torch.full_like(xt, float("nan"))
        x, y = cuopjit.tensor(xt), cuopjit.tensor(yt)
        cuopjit.ReluFloat().forward(x, y, stream=torch.cuda.current_stream())
        cuopjit.SoftmaxFloat().forward(y, y, stream=side)
    torch.cuda.synchronize()
    assert rel_error(yt.cpu().numpy(), _softmax(np.maximum(2 * x_np, 0))) < 1e-5


def test_sixteen_threads_each_on_its_own_stream(rng):
    relu = cuopjit.ReluFloat()
    inputs = [rng.standard_normal(4097 * (i + 1)).astype(np.float32) for i in range(16)]
    errors = []

    def work(i):
        try:
            s = cuopjit.Stream()
            x = cuopjit.tensor(inputs[i])
            y = cuopjit.empty(x.shape).fill(float("nan"))
            cuopjit.synchronize()
            for _ in range(20):
                relu.forward(x, y, stream=s)
            s.synchronize()
            if not np.array_equal(y.to_numpy(), np.maximum(inputs[i], 0)):
                errors.append(f"thread {i}: wrong result")
        except Exception as exc:  # reported below
            errors.append(f"thread {i}: {exc!r}")
    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_with_stream_makes_it_current():
    from cuopjit.device.streams import current
    s = cuopjit.Stream()
    with cuopjit.stream(s):
        assert current() == s.handle
    assert current() == 0


def _pipeline(rng):
    a_np = rng.standard_normal((128, 64)).astype(np.float32)
    b_np = rng.standard_normal((64, 200)).astype(np.float32)
    gemm, relu, softmax = cuopjit.GemmFloat(), cuopjit.ReluFloat(), cuopjit.SoftmaxFloat()
    gemm.set_weight(cuopjit.tensor(b_np))
    a, c, y = cuopjit.tensor(a_np), cuopjit.zeros([128, 200]), cuopjit.zeros([128, 200])

    def run(**kw):
        gemm.forward(a, c, **kw)
        relu.forward(c, c, **kw)
        softmax.forward(c, y, **kw)

    def ref(a_np):
        return _softmax(np.maximum(a_np.astype(np.float64) @ b_np, 0))
    return a, y, run, ref


def test_graph_replays_on_new_data(rng):
    a, y, run, ref = _pipeline(rng)
    with cuopjit.graph() as g:      # cold: kernels are built and loaded during the (relaxed) capture
        run()
    for _ in range(2):
        a_np = rng.standard_normal(a.shape).astype(np.float32)
        a.copy_from(cuopjit.tensor(a_np))
        y.fill(float("nan"))
        g.replay()
        cuopjit.synchronize()
        assert rel_error(y.to_numpy(), ref(a_np)) < 1e-5


def test_graph_refuses_a_tensor_created_inside():
    with pytest.raises(RuntimeError, match="cannot be created inside `with cuopjit.graph"):
        with cuopjit.graph():
            cuopjit.zeros([4])


def test_torch_graph_capture_after_a_warm_up(rng):
    torch = pytest.importorskip("torch")
    a, y, run, ref = _pipeline(rng)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        run(stream=s)                         # warm-up: plans and kernels ready before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run(stream=torch.cuda.current_stream())
    a_np = rng.standard_normal(a.shape).astype(np.float32)
    a.copy_from(cuopjit.tensor(a_np))
    y.fill(float("nan"))
    cuopjit.synchronize()
    g.replay()
    torch.cuda.synchronize()
    assert rel_error(y.to_numpy(), ref(a_np)) < 1e-5


def test_torch_graph_capture_of_a_cold_forward_says_warm_up_first(rng):
    torch = pytest.importorskip("torch")
    x = cuopjit.zeros([3, 7777])
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="run the same forward once before capturing"):
        with torch.cuda.graph(g):
            cuopjit.SoftmaxFloat().forward(x, x, stream=torch.cuda.current_stream())


def test_workspace_plans_run_on_concurrent_streams(rng):
    """A split-row softmax needs scratch memory: each stream gets its own, so concurrent calls never race."""
    soft = cuopjit.SoftmaxFloat()
    cfg = make_config(enable_shared_memory_opt=False, block_size=64, tile_size=16)  # rows longer than a block: split
    jit = cuopjit.JITSoftmaxFloat(soft)
    jit.set_jit_config(cfg)
    xs = [rng.standard_normal((8, 5000)).astype(np.float32) for _ in range(4)]
    ts = [(cuopjit.tensor(x), cuopjit.zeros([8, 5000]).fill(float("nan")), cuopjit.Stream()) for x in xs]
    cuopjit.synchronize()
    for _ in range(10):
        for x, y, s in ts:
            jit.forward(x, y, stream=s)
    cuopjit.synchronize()
    assert jit.get_performance_profile().kernel_name.count("+") >= 1     # more than one kernel: the split path
    for x_np, (_, y, _) in zip(xs, ts):
        assert rel_error(y.to_numpy(), _softmax(x_np.astype(np.float64))) < 1e-5


def test_profile_is_timed_on_the_first_call_and_after_each_read():
    g = cuopjit.GemmFloat()
    g.set_weight(cuopjit.ones([64, 64]))
    jit = cuopjit.JITGemmFloat(g)
    a, c = cuopjit.ones([64, 64]), cuopjit.zeros([64, 64])
    jit.forward(a, c)
    first = jit.get_performance_profile()
    assert first.execution_time > 0 and first.units.startswith("FP32") and first.calls == 1
    assert jit._time_next                      # the call after a profile read is timed ...
    jit.forward(a, c)
    assert not jit._time_next                  # ... later calls are not, until the next read
    for _ in range(4):
        jit.forward(a, c)
    assert jit.get_performance_profile().calls == 6


def test_a_module_unloads_when_its_cache_entry_and_plans_are_gone(monkeypatch):
    import gc
    import weakref
    from cuopjit.device import driver
    from cuopjit.build import pipeline
    jit = cuopjit.JITReluFloat(cuopjit.ReluFloat())   # a config no other test builds: nothing else holds it
    jit.set_jit_config(make_config(kernel_type="simple", block_size=32, optimization_level="O1", max_registers=40))
    x = cuopjit.ones([3 * 37])
    jit.forward(x, x)
    function = executor.runner_of(jit._last[0]).kernels[0].function
    ref, unloaded = weakref.ref(function), []
    real = driver.api().cuModuleUnload
    monkeypatch.setattr(driver.api(), "cuModuleUnload", lambda m: unloaded.append(m) or real(m))
    module = function.module
    del function, jit
    pipeline.get_function.cache_clear()
    gc.collect()
    assert ref() is None and int(module) in {int(m) for m in unloaded}   # others nothing held go too
