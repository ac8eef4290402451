"""Fused attention: cuopjit AttentionFloat against torch's F.scaled_dot_product_attention, and the
TransformerEncoderLayer (8 x 512 tokens) through the "cuopjit" backend against eager.

    python benchmarks/attention.py [--rounds 4] [--repeat 10] [--no-model] [--out benchmarks/results/attention.json]

Kernel rows: [8, 12, 512, 64] float32 (BERT-base's attention), full and causal, in fp32 (cuopjit's exact SIMT
kernel; torch with TF32 off) and TF32 (cuopjit's mma.sync kernel; torch with matmul TF32 on), and float16
(AttentionHalf against torch's flash kernel), timed in
alternating rounds (mb_common.time_pair) on the same tensors, each output checked against a float64 SDPA.
Model rows: benchmarks/models.py's "encoder 8x512" row (run_row: cuopjit, eager; no inductor) in both precisions.
JSON + PNG under benchmarks/results/ only when a GPU ran.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mb_common import time_pair  # noqa: E402
from results_io import RESULTS, bar_chart, require_gpu, save_json  # noqa: E402

SHAPE = (8, 12, 512, 64)


def kernel_row(precision: str, causal: bool, rounds: int, repeat: int) -> dict:
    import torch
    import torch.nn.functional as F
    import cuopjit
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=dtype) for _ in range(3))
    out = torch.empty_like(q)
    if precision == "fp16":
        op = cuopjit.JITAttentionHalf(cuopjit.AttentionHalf())
    else:
        op = cuopjit.JITAttentionFloat(cuopjit.AttentionFloat())
        config = cuopjit.JITConfig()
        config.enable_tensor_core = precision == "tf32"
        op.set_jit_config(config)
    op.forward(q, k, v, out, causal=causal)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = {name: float((t.double() - ref).abs().max()) for name, t in (("cuopjit", out), ("torch", theirs))}
    mine_t, theirs_t = time_pair(lambda i: op.forward(q, k, v, out, causal=causal),
                                 lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                 rounds=rounds, repeat=repeat)
    flops = 4.0 * SHAPE[0] * SHAPE[1] * SHAPE[2] ** 2 * SHAPE[3] * (0.5 if causal else 1.0)
    row = {"name": f"attention {'causal ' if causal else ''}{list(SHAPE)}", "precision": precision,
           "cuopjit_ms": mine_t["median_ms"], "torch_ms": theirs_t["median_ms"],
           "ratio": theirs_t["median_ms"] / mine_t["median_ms"], "cuopjit_tflops": flops / mine_t["median_ms"] / 1e9,
           "max_abs_error_vs_float64": err, "cuopjit": mine_t, "torch": theirs_t,
           "kernel": op.get_performance_profile().kernel_name}
    print(f"{row['name']:32s} {precision}: cuopjit {row['cuopjit_ms']:.3f} ms ({row['cuopjit_tflops']:.1f} TFLOP/s), "
          f"torch {row['torch_ms']:.3f} ms -> {row['ratio']:.2f}x; max error {err}; {row['kernel']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--no-model", action="store_true", help="kernel rows only")
    ap.add_argument("--out", default=str(RESULTS / "attention.json"))
    ns = ap.parse_args(argv)
    require_gpu("benchmarks/attention.py")
    import torch
    import models
    importlib.import_module("cuopjit.torch")   # registers the backend
    rows = [kernel_row(p, c, ns.rounds, ns.repeat) for p in ("fp32", "tf32", "fp16") for c in (False, True)]
    encoder = next(r for r in models.ROWS if r[1] == "encoder")
    layers = [] if ns.no_model else [models.run_row(encoder, p, False, ns.rounds, 5) for p in ("fp32", "tf32")]
    save_json(ns.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": rows,
                       "encoder": layers, "command": " ".join(sys.argv)}, gpu=True)
    labels = [f"{r['name']} {r['precision']}" for r in rows] + [f"encoder 8x512 {r['precision']}" for r in layers]
    mine = [r["cuopjit_ms"] for r in rows] + [r["ms"]["cuopjit"] for r in layers]
    theirs = [r["torch_ms"] for r in rows] + [r["ms"]["eager"] for r in layers]
    bar_chart(os.path.splitext(ns.out)[0] + ".png", labels, mine, theirs, "torch", "ms per call (lower is better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
