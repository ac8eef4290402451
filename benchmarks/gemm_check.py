"""Quick correctness sweep of the Hopper wgmma GEMM kernels before timing them (one line per case).

For each layout (nn, nt, tt), precision (tf32, 3xtf32) and size it prints the kernel that ran and
the norm-wise error against float64 references: exact operands, operands truncated to TF32
(what the tensor core keeps of a float32) and operands rounded to nearest (cvt.rna). TF32 must
sit on one of the TF32 models (error ~1e-7, far below 1e-4 from exact); 3xTF32 near float32.

    python benchmarks/gemm_check.py [--sizes 128x256x64,1000x1000x1000]
    python benchmarks/gemm_check.py --bench [--out bench.json]

--bench times explicit builds of the kernel (tile, blocks per SM, instruction N; gemm_wgmma.WgmmaChoice)
on the shapes whose heuristic they decide, planned directly, next to torch TF32 in the same run:
the batched 100 x 256³ (torch.bmm), 1000³ (the seed's size) and 4096³ (torch.matmul), all A @ B.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import cuopjit  # noqa: E402

SIZES = "128x256x64,1x4x4,7x12x36,33x4100x1000,1000x1000x1000,257x260x132"


def tf32(x: np.ndarray, nearest: bool) -> np.ndarray:
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    if nearest:
        bits = bits + np.uint32(0x1000)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def case(m: int, n: int, k: int, trans_a: bool, trans_b: bool, precision: str, alpha: float, beta: float,
         rng, **fields) -> str:
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    gemm = cuopjit.GemmFloat(trans_a, trans_b, alpha, beta)
    gemm.set_weight(cuopjit.tensor(b))
    op = cuopjit.JITGemmFloat(gemm)
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "tensor_core"
    cfg.precision = precision
    for field, value in fields.items():
        setattr(cfg, field, value)
    op.set_jit_config(cfg)
    c = cuopjit.tensor(c0 if beta else np.full((m, n), np.nan, np.float32))
    op.forward(cuopjit.tensor(a), c)
    out = c.to_numpy().astype(np.float64)

    def ref(conv):
        aa, bb = conv(a), conv(b)
        return alpha * ((aa.T if trans_a else aa) @ (bb.T if trans_b else bb)) + beta * c0.astype(np.float64)

    def err(r):
        return np.linalg.norm(out - r) / np.linalg.norm(r) if np.all(np.isfinite(out)) else float("inf")

    exact = err(ref(lambda x: x.astype(np.float64)))
    trunc, rna = err(ref(lambda x: tf32(x, False))), err(ref(lambda x: tf32(x, True)))
    name = op.get_performance_profile().kernel_name
    ops = ("t" if trans_a else "n") + ("t" if trans_b else "n")
    return (f"{ops} {precision:6s} {m:>5d}x{n:>5d}x{k:<5d} a={alpha:g} b={beta:g}  exact {exact:8.2e}  "
            f"trunc {trunc:8.2e}  rna {rna:8.2e}  {name}")


# (consumers, tile width, blocks per SM, instruction N or 0) per shape: batch, m, n, k
BENCH = {(100, 256, 256, 256): ((2, 256, 1, 0), (2, 128, 1, 0), (1, 128, 2, 0), (1, 64, 2, 0)),
         (1, 1000, 1000, 1000): ((1, 64, 2, 32), (1, 32, 2, 0), (1, 64, 2, 0), (1, 128, 2, 0), (1, 128, 2, 32),
                                 (1, 64, 1, 0), (2, 64, 1, 0), (2, 128, 1, 0)),
         (1, 4096, 4096, 4096): ((2, 256, 1, 0), (2, 256, 1, 128))}


def bench(out: str | None) -> None:
    """Each build of BENCH on its shape vs torch (TF32) in the same run; TFLOP/s, ratio, error vs float64."""
    import dataclasses

    import torch
    from mb_common import time_ms, to_cuopjit
    from results_io import save_json

    from cuopjit.run import executor
    from cuopjit.ops.gemm import plans as gk
    from cuopjit.ops.gemm import wgmma as gw, wgmma_plan
    from cuopjit.config import DEFAULT
    target = cuopjit.target.of_device(0)
    rows = []
    for (batch, m, n, k), builds in BENCH.items():
        a = torch.randn(batch, m, k, device="cuda")
        b = torch.randn(batch, k, n, device="cuda")
        c = torch.full((batch, m, n), float("nan"), device="cuda")
        problem = gk.packed("float32", m, n, k)
        if batch > 1:
            problem = dataclasses.replace(problem, batch=batch, stride_a=m * k, stride_b=k * n, stride_c=m * n)
        torch.backends.cuda.matmul.allow_tf32 = True
        theirs = time_ms(lambda i: torch.matmul(a, b, out=c))["median_ms"]
        ref = a.double() @ b.double()
        ptrs = tuple(to_cuopjit(t).ptr for t in (a, b, c))
        flops = 2.0 * batch * m * n * k
        for consumers, qn, per_sm, ni in builds:
            choice = gw.WgmmaChoice(consumers, qn, gw.stages_for(consumers, qn, False, target, per_sm), per_sm=per_sm,
                                    ni=ni)
            run = executor.load(wgmma_plan.plan(problem, choice, target), 0, DEFAULT)
            c.fill_(float("nan"))
            run(ptrs, 0)
            torch.cuda.synchronize()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            mine = time_ms(lambda i: run(ptrs, 0))["median_ms"]
            row = {"shape": f"{batch}x{m}x{n}x{k}", "choice": choice.label, "cuopjit_ms": mine, "torch_ms": theirs,
                   "tflops": flops / mine / 1e9, "torch_tflops": flops / theirs / 1e9, "ratio": theirs / mine,
                   "rel_error": err}
            rows.append(row)
            print(f"{row['shape']:18s} {choice.label:36s} {mine * 1e3:8.1f} us {row['tflops']:6.1f} TFLOP/s  "
                  f"torch {theirs * 1e3:8.1f} us {row['torch_tflops']:6.1f}  x{row['ratio']:.2f}  err {err:.1e}",
                  flush=True)
    if out:
        save_json(out, {"rows": rows, "device": torch.cuda.get_device_name()}, gpu=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default=SIZES)
    p.add_argument("--no-tiles", action="store_true", help="skip the sweep over block_size and tile_size")
    p.add_argument("--bench", action="store_true", help="time the kernel builds of BENCH instead of checking")
    p.add_argument("--out", default=None, help="--bench: JSON file for the rows")
    args = p.parse_args()
    if args.bench:
        bench(args.out)
        return
    rng = np.random.default_rng(int(os.environ.get("CUOPJIT_TEST_SEED", "1")))
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    for precision in ("tf32", "3xtf32"):
        for trans_a, trans_b in ((False, True), (False, False), (True, True)):
            for m, n, k in sizes:
                print(case(m, n, k, trans_a, trans_b, precision, 1.0, 0.0, rng), flush=True)
            print(case(257, 260, 132, trans_a, trans_b, precision, -0.5, 1.5, rng), flush=True)
    for block in () if args.no_tiles else (0, 256):      # every (consumers, wgmma N) a config can name, partial tiles on both sides
        for tile in (16, 32, 64, 128):
            for m, n, k in ((1000, 36, 1000), (33, 1000, 36)):
                print(case(m, n, k, False, False, "tf32", 1.0, 0.0, rng, block_size=block, tile_size=tile), flush=True)


if __name__ == "__main__":
    main()
