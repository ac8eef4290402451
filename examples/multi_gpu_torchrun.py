"""One process per GPU under torchrun: each rank runs GEMM, Softmax and LayerNorm on its own device.

All ranks share one kernel cache directory: each kernel is compiled once in total and the other
ranks load it (a per-key file lock makes them wait for the compile instead of repeating it).

    torchrun --standalone --nproc_per_node=2 examples/multi_gpu_torchrun.py
    CUOPJIT_CACHE_DIR=/shared/cuopjit torchrun --nnodes=2 --nproc_per_node=8 ... examples/multi_gpu_torchrun.py
    python examples/multi_gpu_torchrun.py            (one process: rank 0 on device 0)

The shapes are among `cuopjit prewarm`'s representative problems, so a cache prewarmed on a build
machine (`cuopjit prewarm --arch sm_90 --op gemm,softmax,layernorm --bundle k.tar.gz`) and imported
on the nodes (`cuopjit cache import k.tar.gz`) serves every rank with no compile at all.
"""
import os

import numpy as np

import cuopjit


def check(rank: int, name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    print(f"rank {rank} {name:<10} relative error {err:.1e}")
    assert err < tol, f"rank {rank}: {name} relative error {err:.1e} exceeds {tol:.0e}"


def main() -> None:
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    count = cuopjit.get_device_count()
    if count == 0:
        raise SystemExit("multi_gpu_torchrun.py needs an NVIDIA GPU")
    device = local_rank % count           # more ranks than GPUs share them round-robin
    cuopjit.set_device(device)
    rng = np.random.default_rng()

    a_np = rng.standard_normal((1024, 1024)).astype(np.float32)
    b_np = rng.standard_normal((1024, 1024)).astype(np.float32)
    a, b, c = cuopjit.tensor(a_np), cuopjit.tensor(b_np), cuopjit.empty([1024, 1024])
    assert a.device == device
    c.fill(float("nan"))
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(b)
    gemm.forward(a, c)
    check(rank, "GEMM", c.to_numpy(), a_np.astype(np.float64) @ b_np, 1e-5)

    x_np = rng.standard_normal((4096, 1024)).astype(np.float32)
    x, y = cuopjit.tensor(x_np), cuopjit.empty([4096, 1024])
    y.fill(float("nan"))
    cuopjit.SoftmaxFloat().forward(x, y, axis=-1)
    x64 = x_np.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    check(rank, "Softmax", y.to_numpy(), e / e.sum(axis=-1, keepdims=True), 1e-5)

    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(cuopjit.ones([1024]))
    ln.set_beta(cuopjit.zeros([1024]))
    y.fill(float("nan"))
    ln.forward(x, y)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    check(rank, "LayerNorm", y.to_numpy(), want, 1e-5)
    print(f"rank {rank} on device {device}: ok")


if __name__ == "__main__":
    main()
