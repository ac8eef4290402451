"""Quick start: a GEMM through the default operator and through a JIT wrapper with its own config.

    python examples/quick_start.py        (needs an NVIDIA GPU)
"""
import numpy as np

import cuopjit


def main() -> None:
    a_np = np.random.randn(1000, 1000).astype(np.float32)
    b_np = np.random.randn(1000, 1000).astype(np.float32)
    a, b = cuopjit.tensor(a_np), cuopjit.tensor(b_np)
    c = cuopjit.zeros([1000, 1000])

    gemm = cuopjit.GemmFloat()
    gemm.set_weight(b)
    gemm.forward(a, c)
    ref = a_np.astype(np.float64) @ b_np.astype(np.float64)
    print(f"default kernel: relative error {np.linalg.norm(c.to_numpy() - ref) / np.linalg.norm(ref):.2e}")

    jit = cuopjit.JITGemmFloat(gemm)
    jit.enable_persistent_cache(True)
    jit.set_persistent_cache_directory("./jit_cache")
    cfg = cuopjit.JITConfig()
    cfg.tile_size = 64
    cfg.block_size = 256
    jit.set_jit_config(cfg)
    jit.forward(a, c)
    print("JIT kernel:", jit.get_performance_profile())
    stats = cuopjit.benchmark(jit, a, c, num_runs=50, warmup_runs=5)
    print(f"benchmark: {stats['mean_time_ms']:.3f} ms mean, {stats['min_time_ms']:.3f} ms min")


if __name__ == "__main__":
    main()
