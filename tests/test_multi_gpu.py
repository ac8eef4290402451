"""Several GPUs: kernels load per device, tensors and launches stay on theirs, errors name both devices,
the current device is per thread, and torchrun ranks share one cache (each kernel compiled once in total).

The two-device tests skip on one GPU; the torchrun tests also run two ranks on one GPU (what the
shared cache guarantees does not depend on how many devices the ranks use).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import cuopjit
from cuopjit.run import executor
from cuopjit.ops.base import DEFAULT
from cuopjit.target import of_device

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[1]
RANKS = REPO / "examples" / "multi_gpu_torchrun.py"


@pytest.fixture
def two_gpus():
    if cuopjit.get_device_count() < 2:
        pytest.skip("needs two GPUs")
    yield
    cuopjit.set_device(0)


def test_gemm_on_each_device(two_gpus, rng):
    a_np = rng.standard_normal((257, 129)).astype(np.float32)
    b_np = rng.standard_normal((129, 65)).astype(np.float32)
    ref = a_np.astype(np.float64) @ b_np
    g = cuopjit.GemmFloat()
    for dev in (0, 1):
        cuopjit.set_device(dev)
        a, b, c = cuopjit.tensor(a_np), cuopjit.tensor(b_np), cuopjit.empty([257, 65])
        assert a.device == dev
        c.fill(float("nan"))
        g.set_weight(b)
        g.forward(a, c)
        out = c.to_numpy()
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    # One plan per device, each with its own module loaded on that device (a cubin loaded per device).
    runners = [executor.runner_of(run) for run in g.memo(DEFAULT).values()]
    assert sorted(r.ordinal for r in runners) == [0, 1]
    assert all(k.function.device.ordinal == r.ordinal for r in runners for k in r.kernels)


def test_tensor_on_other_device_is_named(two_gpus):
    cuopjit.set_device(0)
    a0 = cuopjit.ones([8, 8])
    cuopjit.set_device(1)
    g = cuopjit.GemmFloat()
    with pytest.raises(ValueError, match="weight is on device 0 but the current device is 1"):
        g.set_weight(a0)


def test_torch_tensor_on_second_gpu_is_zero_copy(two_gpus):
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 4, device="cuda:1")
    t = cuopjit.tensor(x)
    assert t.device == 1 and t.ptr == x.data_ptr()
    cuopjit.set_device(1)
    np.testing.assert_array_equal(t.to_numpy(), np.ones((4, 4), np.float32))


def test_one_thread_per_device_at_once(two_gpus, rng):
    """Each thread sets its own device and runs GEMM, Softmax and LayerNorm there, concurrently."""
    x_np = rng.standard_normal((300, 1000)).astype(np.float32)
    w_np = rng.standard_normal((1000, 77)).astype(np.float32)
    x64 = x_np.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    want = {"gemm": x64 @ w_np, "softmax": e / e.sum(-1, keepdims=True),
            "layernorm": (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)}
    start, results, errors = threading.Barrier(2), {}, []

    def work(dev: int) -> None:
        try:
            cuopjit.set_device(dev)
            start.wait()
            x, c, y = cuopjit.tensor(x_np), cuopjit.empty([300, 77]), cuopjit.empty([300, 1000])
            gemm = cuopjit.GemmFloat()
            gemm.set_weight(cuopjit.tensor(w_np))
            ln = cuopjit.LayerNormFloat()
            ln.set_gamma(cuopjit.ones([1000]))
            ln.set_beta(cuopjit.zeros([1000]))
            out = {}
            for _ in range(20):      # interleave the two threads' launches
                c.fill(float("nan"))
                gemm.forward(x, c)
                out["gemm"] = c.to_numpy()
                y.fill(float("nan"))
                cuopjit.SoftmaxFloat().forward(x, y)
                out["softmax"] = y.to_numpy()
                y.fill(float("nan"))
                ln.forward(x, y)
                out["layernorm"] = y.to_numpy()
            results[dev] = (x.device, out)
        except BaseException as exc:          # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for dev in (0, 1):
        on, out = results[dev]
        assert on == dev
        for name, ref in want.items():
            err = np.linalg.norm(out[name] - ref) / np.linalg.norm(ref)
            assert err < 1e-5, f"device {dev} {name}: {err:.1e}"


def _torchrun(nproc: int, cache: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("torch")
    env = {**os.environ, "CUOPJIT_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          f"--nproc_per_node={nproc}", str(RANKS)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for rank in range(nproc):
        assert f"rank {rank} on device {rank % cuopjit.get_device_count()}: ok" in run.stdout
    return run


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "cuopjit", *argv], env=env, capture_output=True, text=True,
                          timeout=900)


def _stats(cache: Path) -> dict:
    run = _cli("cache", "stats", "--json", "--cache-dir", str(cache))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _verify_clean(cache: Path) -> None:
    run = _cli("cache", "verify", "--cache-dir", str(cache))
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("per_gpu", [False, True], ids=["ranks-share-a-gpu", "one-gpu-per-rank"])
def test_torchrun_ranks_compile_each_kernel_once(per_gpu, tmp_path):
    """Two ranks, one empty cache: every kernel is compiled by one rank and loaded by the other."""
    if per_gpu and cuopjit.get_device_count() < 2:
        pytest.skip("needs two GPUs")
    cache = tmp_path / "shared-cache"
    _torchrun(2, cache)
    s = _stats(cache)
    assert s["entries"] >= 3                          # GEMM, Softmax, LayerNorm at least
    assert s["compiles"] == s["entries"], s           # once in total, not once per rank
    assert s["hits"] >= s["entries"], s               # the other rank loaded each of them
    _verify_clean(cache)


@pytest.mark.parametrize("per_gpu", [False, True], ids=["ranks-share-a-gpu", "one-gpu-per-rank"])
def test_torchrun_ranks_on_an_imported_bundle_compile_nothing(per_gpu, tmp_path):
    """A bundle prewarmed with no GPU visible (as on a build machine), imported: zero compiles on every rank."""
    if per_gpu and cuopjit.get_device_count() < 2:
        pytest.skip("needs two GPUs")
    build, bundle, node = tmp_path / "build-cache", tmp_path / "kernels.tar.gz", tmp_path / "node-cache"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    prewarm = subprocess.run([sys.executable, "-m", "cuopjit", "prewarm", "--arch", of_device(0).arch,
                              "--op", "gemm,softmax,layernorm", "--dtype", "float32", "--quiet",
                              "--cache-dir", str(build), "--bundle", str(bundle)],
                             env=env, capture_output=True, text=True, timeout=900)
    assert prewarm.returncode == 0, prewarm.stdout[-3000:] + prewarm.stderr[-3000:]
    imported = _cli("cache", "import", str(bundle), "--cache-dir", str(node))
    assert imported.returncode == 0, imported.stdout + imported.stderr
    _torchrun(2, node)
    s = _stats(node)
    assert s["compiles"] == 0, s
    assert s["misses"] == 0, s
    _verify_clean(node)
