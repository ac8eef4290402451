"""Fused attention: cuopjit AttentionFloat against torch's F.scaled_dot_product_attention, and the
TransformerEncoderLayer (8 x 512 tokens) through the "cuopjit" backend against eager.

    python benchmarks/attention.py [--rounds 4] [--repeat 10] [--no-model] [--out benchmarks/results/attention.json]
    python benchmarks/attention.py --sweep    # every 16-bit block shape, planned directly, beside torch (no JSON)

Kernel rows: [8, 12, 512, 64] float32 (BERT-base's attention), full and causal, in fp32 (cuopjit's exact SIMT
kernel; torch with TF32 off) and TF32 (cuopjit's mma.sync kernel; torch with matmul TF32 on), float16 and bfloat16
(AttentionHalf / AttentionBFloat16 against torch's flash kernel), timed in
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
HALF = {"fp16": "float16", "bf16": "bfloat16"}
# (BM, BN, warps, stages) of the 16-bit kernel that --sweep times, by D > 64: those whose every head dim, alignment
# and causality of the class compiles without spills for sm_80 and sm_90a (D <= 64 with 16 rows per warp by 8 warps,
# or 32 keys per tile, spills in some)
SWEEP_TILES = {False: [(128, 64, 4, 2), (128, 64, 4, 3), (64, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 2)],
               True: [(64, 64, 4, 2), (64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 8, 2), (128, 64, 8, 3),
                      (128, 128, 8, 2)]}


def kernel_row(precision: str, causal: bool, rounds: int, repeat: int) -> dict:
    import torch
    import torch.nn.functional as F
    import cuopjit
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    dtype = getattr(torch, HALF.get(precision, "float32"))
    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=dtype) for _ in range(3))
    out = torch.empty_like(q)
    if precision == "fp16":
        op = cuopjit.JITAttentionHalf(cuopjit.AttentionHalf())
    elif precision == "bf16":
        op = cuopjit.JITAttentionBFloat16(cuopjit.AttentionBFloat16())
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


def sweep(rounds: int) -> None:
    """Time each SWEEP_TILES build of the 16-bit kernel (planned directly; those that compile without spills for
    sm_80 and sm_90a) at [8, 12, 512, 64] and at head dim 128, full and causal, against torch's SDPA in the same
    rounds; '<- pick' marks plans.MMA16_TILES' choice. Last, the MMA16_TILES these timings favour (the least
    float16 + bfloat16 time among builds within the error bound)."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor
    import torch
    import torch.nn.functional as F
    import cuopjit
    from cuopjit.build import pipeline
    from cuopjit.config import DEFAULT
    from cuopjit.ops.attention import plans
    from cuopjit.run import executor
    from mb_common import to_cuopjit
    target = cuopjit.target.of_device(0)
    cases = []
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        for d in (64, 128):
            for causal in (False, True):
                shape = (*SHAPE[:3], d)
                problem = plans.contiguous(HALF[name], shape[0] * shape[1], shape[2], shape[2], d, causal)
                pick = plans.choices(problem, cuopjit.JITConfig().snapshot(), target)[0]
                builds = [(c, plans.plan(problem, c, target)) for c in
                          (dataclasses.replace(pick, bm=bm, bn=bn, warps=w, stages=st)
                           for bm, bn, w, st in SWEEP_TILES[d > 64])
                          if plans.shared_bytes(c, d, HALF[name]) <= target.smem_per_block]
                cases.append((name, dtype, shape, causal, pick, builds))
    specs = list({s for *_, builds in cases for _, p in builds for s in p.specs})
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda s: pipeline.build(s, target.arch), specs))
        spills = {s for arch in ("sm_80", "sm_90a") for s, (_, info) in
                  zip(specs, pool.map(lambda s: pipeline.build(s, arch, persistent=False), specs)) if info.spill_bytes}
    total: dict = {}
    for name, dtype, shape, causal, pick, builds in cases:
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
        out = torch.empty_like(q)
        ptrs = tuple(to_cuopjit(t).ptr for t in (q, k, v, out))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        flops = 4.0 * shape[0] * shape[1] * shape[2] ** 2 * shape[3] * (0.5 if causal else 1.0)
        for c, p in builds:
            if set(p.specs) & spills:
                print(f"sweep {name} d{shape[3]} {c.label}: spills, skipped", flush=True)
                continue
            run = executor.load(p, 0, DEFAULT)
            run(ptrs, 0)
            err = float((out.float() - ref).abs().max())
            mine, theirs = time_pair(lambda i: run(ptrs, 0),
                                     lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                     rounds=rounds, repeat=10)
            key, tiles = (shape[3] > 64, causal), (c.bm, c.bn, c.warps, c.stages)
            ok = err < (0.03 if name == "bf16" else 0.004)
            total.setdefault(key, {}).setdefault(tiles, []).append(mine["median_ms"] if ok else float("inf"))
            print(f"sweep {name} d{shape[3]} {'causal' if causal else 'full  '} {c.label:28s} "
                  f"{mine['median_ms'] * 1e3:7.1f} us ({flops / mine['median_ms'] / 1e9:5.1f} TF/s) torch "
                  f"{theirs['median_ms'] * 1e3:7.1f} us -> {theirs['median_ms'] / mine['median_ms']:.2f}x err {err:.3g}"
                  + ("  <- pick" if c.label == pick.label else ""), flush=True)
    best = {key: min((t for t in times if len(times[t]) == 2), key=lambda t: sum(times[t]))
            for key, times in total.items()}
    print(f"sweep best MMA16_TILES = {dict(sorted(best.items()))}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--no-model", action="store_true", help="kernel rows only")
    ap.add_argument("--out", default=str(RESULTS / "attention.json"))
    ap.add_argument("--sweep", action="store_true", help="time every 16-bit block shape instead (no JSON)")
    ns = ap.parse_args(argv)
    require_gpu("benchmarks/attention.py")
    if ns.sweep:
        sweep(ns.rounds)
        return 0
    import torch
    import models
    importlib.import_module("cuopjit.torch")   # registers the backend
    rows = [kernel_row(p, c, ns.rounds, ns.repeat) for p in ("fp32", "tf32", "fp16", "bf16") for c in (False, True)]
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
