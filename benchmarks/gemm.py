"""GEMM: cuopjit vs torch.matmul (cuBLAS) in the same run, float32 and float64, TFLOP/s and ratio.

Kernels: "simt" is kernel_type="tiled" (register-tiled FMA kernel; float32's default; torch with
TF32 off); "tc" is kernel_type="tensor_core" (float32: TF32 mma.sync, compared with torch with TF32
on; float64: DMMA mma.sync, float64's default, compared with torch's DGEMM, which uses the FP64
tensor cores too).
Each timing is the median of >= 20 calls between CUDA events after warm-up (benchmarks/mb_common.py);
cuopjit launches on the legacy default stream, which torch's events order with. Every case also
reports ‖out − ref‖/‖ref‖ against a float64 torch product of the same inputs.

    python benchmarks/gemm.py [--dtype float32|float64] [--kernels simt,tc] [--sizes 1024,4096]
                              [--out benchmarks/results/gemm.json]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import time_ms, to_cuopjit, torch_dtype  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

SQUARE = (1024, 2048, 4096, 8192)
ODD = ((4097, 4097, 4097), (33, 4097, 1000), (1000, 1000, 1000), (4096, 4096, 1000))


def case(dtype: str, kernel: str, m: int, n: int, k: int) -> dict:
    """Time one shape with cuopjit and torch; check cuopjit against float64."""
    import torch
    tdt = torch_dtype(dtype)
    a = torch.randn(m, k, dtype=tdt, device="cuda")
    b = torch.randn(k, n, dtype=tdt, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
    gemm = cuopjit.GemmFloat() if dtype == "float32" else cuopjit.GemmDouble()
    gemm.set_weight(to_cuopjit(b))
    op = (cuopjit.JITGemmFloat if dtype == "float32" else cuopjit.JITGemmDouble)(gemm)
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "tensor_core" if kernel == "tc" else "tiled"
    op.set_jit_config(cfg)
    ca, cc = to_cuopjit(a), to_cuopjit(c)
    op.forward(ca, cc)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    mine = time_ms(lambda i: op.forward(ca, cc))
    torch.backends.cuda.matmul.allow_tf32 = kernel == "tc" and dtype == "float32"
    theirs = time_ms(lambda i: torch.matmul(a, b, out=c))
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * m * n * k
    name = getattr(op.get_performance_profile(), "kernel_name", "")
    return {"dtype": dtype, "kernel": kernel, "m": m, "n": n, "k": k, "cuopjit_kernel": name,
            "cuopjit_ms": mine["median_ms"], "torch_ms": theirs["median_ms"],
            "cuopjit_tflops": flops / mine["median_ms"] / 1e9, "torch_tflops": flops / theirs["median_ms"] / 1e9,
            "ratio": theirs["median_ms"] / mine["median_ms"], "rel_error": err,
            "torch_tf32": kernel == "tc" and dtype == "float32"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    p.add_argument("--kernels", default="simt,tc", help="comma list of simt, tc")
    p.add_argument("--sizes", default=",".join(map(str, SQUARE)), help="square sizes (odd shapes always run)")
    p.add_argument("--out", default="benchmarks/results/gemm.json")
    args = p.parse_args()
    require_gpu("benchmarks/gemm.py")
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = [(s, s, s) for s in map(int, args.sizes.split(",")) if s] + list(ODD)
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    rows = []
    for dtype in dtypes:
        for kernel in args.kernels.split(","):
            for m, n, k in shapes:
                rows.append(case(dtype, kernel, m, n, k))
                torch.cuda.empty_cache()
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
              gpu=True)
    print(f"{'dtype':8s} {'kernel':5s} {'M x N x K':>17s} {'cuopjit':>8s} {'torch':>8s} {'ratio':>6s} "
          f"{'rel.err':>8s}  kernel (TFLOP/s; tc float32 vs torch TF32)")
    for r in rows:
        print(f"{r['dtype']:8s} {r['kernel']:5s} {r['m']:>5d}x{r['n']:>5d}x{r['k']:<5d} {r['cuopjit_tflops']:8.2f} "
              f"{r['torch_tflops']:8.2f} {r['ratio']:6.2f} {r['rel_error']:8.1e}  {r['cuopjit_kernel']}")


if __name__ == "__main__":
    main()
