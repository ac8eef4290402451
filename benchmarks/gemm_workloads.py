"""GEMM workloads in the format of mb_common.py, for `cuopjit bench gemm` (benchmarks/gemm.py is the full study).

Each workload times cuopjit's default kernel for the dtype (float32: the SIMT kernel, against
torch with TF32 off; float64: DMMA tensor cores, against torch's DGEMM) on a square problem, and
checks it against a float64 product. `workloads(quick)` keeps one size per dtype when quick.
"""
from __future__ import annotations

from mb_common import to_cuopjit, torch_dtype

SIZES = (1024, 4096)
UNITS = {"float32": "FP32 cores (SIMT)", "float64": "FP64 tensor cores (DMMA mma.sync)"}


def _gemm(n: int, dtype: str) -> dict:
    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        a, b = torch.randn(n, n, dtype=td, device="cuda"), torch.randn(n, n, dtype=td, device="cuda")
        c = torch.full((n, n), float("nan"), dtype=td, device="cuda")
        op = cuopjit.GemmFloat() if dtype == "float32" else cuopjit.GemmDouble()
        op.set_weight(to_cuopjit(b))
        ca, cc = to_cuopjit(a), to_cuopjit(c)
        torch.backends.cuda.matmul.allow_tf32 = False

        def check():
            op.forward(ca, cc)
            ref = a.double() @ b.double()
            return float((c.double() - ref).norm() / ref.norm())
        return {"run_cuopjit": lambda i: op.forward(ca, cc), "run_torch": lambda i: torch.matmul(a, b, out=c),
                "check": check}

    itemsize = 4 if dtype == "float32" else 8
    return {"name": f"gemm_{n}", "family": "gemm", "dtype": dtype, "shape": [n, n, n], "bytes": 3 * n * n * itemsize,
            "flops": 2.0 * n ** 3, "units": UNITS[dtype], "goal": "info", "goal_torch": None, "goal_copy": None,
            "setup": setup}


def workloads(quick: bool = False) -> list[dict]:
    """Square GEMMs of both dtypes (quick: only the smallest size)."""
    return [_gemm(n, dt) for dt in ("float32", "float64") for n in (SIZES[:1] if quick else SIZES)]
