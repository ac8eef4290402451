"""GEMM: cuopjit vs torch.matmul (cuBLAS) in the same run, float32 and float64, TFLOP/s and ratio (JSON + PNG).

Kernels: "simt" is kernel_type="tiled" (register-tiled FMA kernel; float32's default; torch with
TF32 off); "tc" is kernel_type="tensor_core" (float32: TF32 on Hopper wgmma, compared with torch with
TF32 on; float64: DMMA mma.sync, float64's default, compared with torch's DGEMM, which uses the FP64
tensor cores too); "3x" is precision="3xtf32" (float32 only: three TF32 wgmma products, compared
with torch's exact SGEMM, TF32 off); "seed" is the seed's example configuration (kernel_type
"tiled", tile 32, block 256, tensor cores and TMA on, float32 only; compared with torch TF32).
Each timing is the median of 40 calls between CUDA events after warm-up, cuopjit and torch alternating in
four rounds so that clock drift falls on both (benchmarks/mb_common.py `time_pair`);
cuopjit launches on the legacy default stream, which torch's events order with. Every case also
reports ‖out − ref‖/‖ref‖ against a float64 torch product of the same inputs.

    python benchmarks/gemm.py [--dtype float32|float64] [--kernels simt,tc] [--sizes 1024,4096]
                              [--out benchmarks/results/gemm.json]
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import time_pair, to_cuopjit, torch_dtype  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

SQUARE = (1024, 2048, 4096, 8192)
ODD = ((4097, 4097, 4097), (33, 4097, 1000), (1000, 1000, 1000), (4096, 4096, 1000), (8192, 256, 8192))
# The odd shapes, whose geometric-mean ratio is a goal of its own (printed per dtype and kernel).
GOAL_ODD = ((1000, 1000, 1000), (4097, 4097, 4097), (33, 4097, 1000), (8192, 256, 8192))


SEED = dict(kernel_type="tiled", tile_size=32, block_size=256, optimization_level="O2", enable_tensor_core=True,
            enable_tma=True, max_registers=255)
CONFIGS = {"simt": {"kernel_type": "tiled"}, "tc": {"kernel_type": "tensor_core"}, "tcnt": {"kernel_type": "tensor_core"},
           "3x": {"kernel_type": "tensor_core", "precision": "3xtf32"}, "seed": SEED}
TF32 = {"tc", "tcnt", "seed"}
# H100 SXM limits (the figures): FFMA and DMMA 66.9 TFLOP/s, TF32 dense 495.
ROOF = {("float32", False): 66.9, ("float32", True): 495.0, ("float64", False): 66.9, ("float64", True): 66.9}
NT = {"tcnt"}   # B stored N x K (a Linear layer's weight): both wgmma operands straight from shared memory


def case(dtype: str, kernel: str, m: int, n: int, k: int) -> dict:
    """Time one shape with cuopjit and torch; check cuopjit against float64."""
    import torch
    tdt = torch_dtype(dtype)
    a = torch.randn(m, k, dtype=tdt, device="cuda")
    b = torch.randn(n, k, dtype=tdt, device="cuda") if kernel in NT else torch.randn(k, n, dtype=tdt, device="cuda")
    c = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
    gemm = (cuopjit.GemmFloat if dtype == "float32" else cuopjit.GemmDouble)(trans_b=kernel in NT)
    gemm.set_weight(to_cuopjit(b))
    op = (cuopjit.JITGemmFloat if dtype == "float32" else cuopjit.JITGemmDouble)(gemm)
    cfg = cuopjit.JITConfig()
    for field, value in CONFIGS[kernel].items():
        setattr(cfg, field, value)
    op.set_jit_config(cfg)
    ca, cc = to_cuopjit(a), to_cuopjit(c)
    op.forward(ca, cc)
    torch.cuda.synchronize()
    bop = b.t() if kernel in NT else b
    ref = a.double() @ bop.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    torch.backends.cuda.matmul.allow_tf32 = kernel in TF32 and dtype == "float32"
    mine, theirs = time_pair(lambda i: op.forward(ca, cc), lambda i: torch.matmul(a, bop, out=c))
    torch.backends.cuda.matmul.allow_tf32 = False
    flops = 2.0 * m * n * k
    name = getattr(op.get_performance_profile(), "kernel_name", "")
    return {"dtype": dtype, "kernel": kernel, "m": m, "n": n, "k": k, "cuopjit_kernel": name,
            "cuopjit_ms": mine["median_ms"], "torch_ms": theirs["median_ms"],
            "rounds_ms": {"cuopjit": mine["rounds_ms"], "torch": theirs["rounds_ms"]},
            "cuopjit_tflops": flops / mine["median_ms"] / 1e9, "torch_tflops": flops / theirs["median_ms"] / 1e9,
            "ratio": theirs["median_ms"] / mine["median_ms"], "rel_error": err,
            "torch_tf32": kernel in TF32 and dtype == "float32"}


def chart(rows: list[dict], path: str) -> None:
    """cuopjit vs cuBLAS TFLOP/s per shape and mode, with each mode's roofline as a tick."""
    def roofline(ax, xs):
        ax.scatter(xs, [ROOF[r["dtype"], r["torch_tf32"]] for r in rows], marker="_", s=300, color="k",
                   label="roofline (FP32 / TF32 / FP64)")
        ax.set_yscale("log")
    bar_chart(path, [f"{r['dtype'][-2:]} {r['kernel']} {r['m']}x{r['n']}x{r['k']}" for r in rows],
              [r["cuopjit_tflops"] for r in rows], [r["torch_tflops"] for r in rows], "cuBLAS (torch.matmul)",
              "TFLOP/s", decorate=roofline)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    p.add_argument("--kernels", default="simt,tc,3x", help="comma list of simt, tc, tcnt (B as N x K), 3x, seed")
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
            if dtype == "float64" and kernel in ("3x", "seed", "tcnt"):
                continue
            for m, n, k in ([(1000, 1000, 1000)] if kernel == "seed" else shapes):
                rows.append(case(dtype, kernel, m, n, k))
                torch.cuda.empty_cache()
    geomeans = {f"{d} {k}": g for (d, k), g in odd_geomeans(rows).items()}
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
                         "odd_geomean": geomeans}, gpu=True)
    chart(rows, os.path.splitext(args.out)[0] + ".png")
    print(f"{'dtype':8s} {'kernel':5s} {'M x N x K':>17s} {'cuopjit':>8s} {'torch':>8s} {'ratio':>6s} "
          f"{'rel.err':>8s}  kernel (TFLOP/s; tc float32 vs torch TF32)")
    for r in rows:
        print(f"{r['dtype']:8s} {r['kernel']:5s} {r['m']:>5d}x{r['n']:>5d}x{r['k']:<5d} {r['cuopjit_tflops']:8.2f} "
              f"{r['torch_tflops']:8.2f} {r['ratio']:6.2f} {r['rel_error']:8.1e}  {r['cuopjit_kernel']}")
    for (dtype, kernel), ratios in odd_geomeans(rows).items():
        print(f"{dtype:8s} {kernel:5s} geometric mean over {', '.join('x'.join(map(str, s)) for s in GOAL_ODD)}: "
              f"{ratios:.3f}")


def odd_geomeans(rows: list[dict]) -> dict:
    """(dtype, kernel) -> the geometric mean of the ratios on GOAL_ODD, where a run measured all four."""
    out = {}
    for key in dict.fromkeys((r["dtype"], r["kernel"]) for r in rows):
        got = [r["ratio"] for r in rows if (r["dtype"], r["kernel"]) == key and (r["m"], r["n"], r["k"]) in GOAL_ODD]
        if len(got) == len(GOAL_ODD):
            out[key] = math.prod(got) ** (1 / len(got))
    return out


if __name__ == "__main__":
    main()
