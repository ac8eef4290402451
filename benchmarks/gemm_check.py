"""Quick correctness sweep of the Hopper wgmma GEMM kernels before timing them (one line per case).

For each layout (nn, nt, tt), precision (tf32, 3xtf32) and size it prints the kernel that ran and
the norm-wise error against float64 references: exact operands, operands truncated to TF32
(what the tensor core keeps of a float32) and operands rounded to nearest (cvt.rna). TF32 must
sit on one of the TF32 models (error ~1e-7, far below 1e-4 from exact); 3xTF32 near float32.

    python benchmarks/gemm_check.py [--sizes 128x256x64,1000x1000x1000]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default=SIZES)
    p.add_argument("--no-tiles", action="store_true", help="skip the sweep over block_size and tile_size")
    args = p.parse_args()
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
