"""Fused epilogues (issue 26 goals): a product with a user epilogue against the same product alone, in one run.

    python benchmarks/fusion.py [--only NAME ...] [--repeat N] [--out benchmarks/results/fusion.json]

GEMM + bias + GELU / SiLU / ReLU at the BERT FFN shapes (a Linear layer, C[M,N] = A[M,K] @ W[N,K]^T:
4096x3072x768 and 4096x768x3072), "fp32" (the exact SIMT kernel) and "tf32" (enable_tensor_core=True: wgmma on
the H100), against the same GEMM alone (same config, alpha 1, beta 0): goal <= 3% slower. Conv2D + folded
BatchNorm + ReLU, relu(acc * scale + shift), and with a residual, relu(acc * scale + shift + residual), on two
ResNet-50 layers at batch 32, NCHW and channels_last ("cl": x, y and the residual, as the torch backend runs
them), fp32 and tf32, against the conv alone: goal <= 5% slower. Each conv row also
prints its floor: max(bytes / the device's copy bandwidth measured in this run, flops / the H100 SXM's dense peak
(fp32 67, TF32 495 TFLOP/s)), bytes = x + weight + y (+ the residual: as much again as y) + the per-channel
operands, each once; on a memory-bound layer (1x1 64->256 at 56^2) a residual the size of y raises the floor itself,
so fused / alone can only reach 5% where the layer is compute-bound. Each pair is
timed in alternating rounds (mb_common.time_pair); the fused output is checked against the plain product's
output put through the epilogue in float64 (cuopjit.expr.evaluate). A ResNet-50 bottleneck block (channels_last,
batch 32: 1x1 256->64, 3x3 64->64, 1x1 64->256 + the input, each conv's folded BatchNorm, ReLU and the residual
in its epilogue) against torch eager (cuDNN, BatchNorm modules, add, ReLU): goal TF32 >= 1.3x, fp32 >= 1.15x
(fusion_block.py). Host: the first forward of a new epilogue (kernels compiled: goal 1) and warm forward host
time fused / plain (goal <= 1.05) on tiny problems. Every kernel is compiled before timing, in parallel. JSON +
PNG under benchmarks/results/ only when a GPU ran.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cuopjit  # noqa: E402
from cuopjit.build import pipeline  # noqa: E402
from cuopjit.expr import evaluate, parse_epilogue  # noqa: E402
from cuopjit.target import of_device  # noqa: E402
from fusion_block import block_cases, host_rows, run_block  # noqa: E402
from mb_common import copy_bandwidth, time_pair  # noqa: E402
from results_io import RESULTS, bar_chart, require_gpu, save_json  # noqa: E402

MODES = {"fp32": {}, "tf32": {"enable_tensor_core": True}}
BERT = [(4096, 3072, 768), (4096, 768, 3072)]
ACTIVATIONS = ("gelu", "silu", "relu")
# name, (N, C, H, W, K, kh, kw, stride, pad)
RESNET = [("resnet 3x3 64->64 56^2", (32, 64, 56, 56, 64, 3, 3, 1, 1)),
          ("resnet 1x1 128->512 28^2", (32, 128, 28, 28, 512, 1, 1, 1, 0)),
          ("resnet 1x1 64->256 56^2", (32, 64, 56, 56, 256, 1, 1, 1, 0))]
PEAK = {"fp32": 67e12, "tf32": 495e12}     # H100 SXM dense FLOP/s (the conv floor's compute side)
BN_RELU = "relu(acc * scale + shift)"
BN_RELU_RESIDUAL = "relu(acc * scale + shift + residual)"
GOAL = {"gemm": 1.03, "conv2d": 1.05}
CHECK_ROWS = 256


def _config(fields: dict):
    cfg = cuopjit.JITConfig()
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def gemm_cases() -> list[dict]:
    """One case per (shape, mode, activation): fused GEMM + bias + activation and the plain GEMM."""
    out = []
    for (m, n, k) in BERT:
        a = cuopjit.random((m, k), seed=1)
        w = cuopjit.random((n, k), seed=2, std=1 / math.sqrt(k))
        bias = cuopjit.random((n,), seed=3)
        for mode, fields in MODES.items():
            plain = cuopjit.GemmFloat(trans_b=True)
            plain.set_weight(w)
            jplain = cuopjit.JITGemmFloat(plain)
            jplain.set_jit_config(_config(fields))
            c_plain = cuopjit.empty((m, n))
            for act in ACTIVATIONS:
                fused = cuopjit.GemmFloat(trans_b=True)
                fused.set_weight(w)
                expr = f"{act}(acc + bias)"
                fused.set_epilogue(expr, bias=bias)
                jfused = cuopjit.JITGemmFloat(fused)
                jfused.set_jit_config(_config(fields))
                c_fused = cuopjit.empty((m, n))
                out.append({"family": "gemm", "name": f"gemm {m}x{n}x{k} {mode} +bias+{act}", "mode": mode,
                            "shape": [m, n, k], "epilogue": expr, "flops": 2.0 * m * n * k,
                            "fused": (jfused, (a, c_fused), {}), "plain": (jplain, (a, c_plain), {}),
                            "env": {"bias": bias}})
    return out


def conv_cases() -> list[dict]:
    """One case per (layer, mode, epilogue): the conv with folded BatchNorm + ReLU (+ residual), and alone."""
    out = []
    for (name, (n, c, h, w, k, kh, kw, st, pad)), cl in [(r, cl) for cl in (False, True) for r in RESNET]:
        layout = "channels_last" if cl else "contiguous"
        name = name + (" cl" if cl else "")
        x = cuopjit.random((n, c, h, w), seed=4)
        x = cuopjit.channels_last(x) if cl else x
        wt = cuopjit.random((k, c, kh, kw), seed=5, std=1 / math.sqrt(c * kh * kw))
        scale, shift = cuopjit.random((k,), seed=6, mean=1.0, std=0.1), cuopjit.random((k, 1, 1), seed=7)
        for mode, fields in MODES.items():
            plain = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st)
            plain.set_weight(wt)
            shape = plain.output_shape((n, c, h, w), pad_h=pad, pad_w=pad)
            residual = cuopjit.random(shape, seed=8)
            residual = cuopjit.channels_last(residual) if cl else residual
            jplain = cuopjit.JITConvolution2DFloat(plain)
            jplain.set_jit_config(_config(fields))
            y_plain = cuopjit.empty(shape, layout=layout)
            for expr in (BN_RELU, BN_RELU_RESIDUAL):
                fused = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st)
                fused.set_weight(wt)
                fused.set_epilogue(expr, scale=scale, shift=shift)
                jfused = cuopjit.JITConvolution2DFloat(fused)
                jfused.set_jit_config(_config(fields))
                per_call = {"residual": residual} if "residual" in expr else {}
                pads = {"pad_h": pad, "pad_w": pad}
                y_fused = cuopjit.empty(shape, layout=layout)
                base = 4 * (n * c * h * w + k * c * kh * kw + math.prod(shape))
                out.append({"family": "conv2d", "name": f"{name} {mode} +bn+relu" + ("+res" if per_call else ""),
                            "mode": mode, "shape": [n, c, h, w, k, kh, kw, st, pad], "epilogue": expr,
                            "flops": 2.0 * math.prod(shape) * c * kh * kw, "bytes_alone": base,
                            "bytes_fused": base + 8 * k + (4 * math.prod(shape) if per_call else 0),
                            "fused": (jfused, (x, y_fused), {**pads, **per_call}), "plain": (jplain, (x, y_plain), pads),
                            "env": {"scale": scale, "shift": shift, **per_call}})
    return out


def build_all(cases: list[dict]) -> None:
    """Compile every kernel the cases run, in parallel (the timed forwards then load them)."""
    specs = {}
    for case in cases:
        for side in ("fused", "plain"):
            jit, args, kwargs = case[side]
            plan = jit.operator.plan(*args, settings=jit._current_settings(), **kwargs)
            specs.update((spec, None) for spec in plan.specs)
    arch = of_device(cuopjit.get_device()).arch
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, arch), specs))
    print(f"{len(specs)} kernels built for {arch}", flush=True)


def check(case: dict) -> float:
    """||fused - epilogue(plain)|| / ||epilogue(plain)|| in float64 (the same product either way), over the first
    CHECK_ROWS rows of a GEMM's output / the first image of a convolution's (NumPy's erfc is slow)."""
    jit, args, kwargs = case["fused"]
    jit.forward(*args, **kwargs)
    pj, pargs, pkw = case["plain"]
    pj.forward(*pargs, **pkw)
    part = slice(0, CHECK_ROWS if case["family"] == "gemm" else 1)
    env = {"acc": pargs[1].to_numpy()[part].astype(np.float64)}
    for k, v in case["env"].items():
        arr = v.to_numpy().astype(np.float64)
        env[k] = (arr.reshape(-1, 1, 1) if arr.ndim == 1 else arr) if case["family"] == "conv2d" else arr
        env[k] = env[k][part] if env[k].shape == v.shape and v.ndim == 4 else env[k]
    ref = evaluate(parse_epilogue(case["epilogue"]), env)
    got = args[1].to_numpy()[part].astype(np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def floor_ms(case: dict, side: str, gbps: float) -> float:
    """The conv's floor: its bytes at copy speed or its flops at the dense peak, whichever is longer."""
    return max(case[f"bytes_{side}"] / gbps / 1e6, case["flops"] / PEAK[case["mode"]] * 1e3)


def run(case: dict, repeat: int, gbps: float) -> dict:
    """Time the fused forward and the plain one in alternating rounds (conv rows: against their floors too)."""
    jit, args, kwargs = case["fused"]
    pj, pargs, pkw = case["plain"]
    fused_t, plain_t = time_pair(lambda i: jit.forward(*args, **kwargs), lambda i: pj.forward(*pargs, **pkw),
                                 repeat=repeat)
    ratio = fused_t["median_ms"] / plain_t["median_ms"]
    row = {k: v for k, v in case.items() if k not in ("fused", "plain", "env")}
    row.update(fused=fused_t, plain=plain_t, ratio=ratio, goal=GOAL[case["family"]],
               goal_met=ratio <= GOAL[case["family"]], rel_error=check(case),
               kernel=jit.get_performance_profile().kernel_name,
               tflops=case["flops"] / fused_t["median_ms"] / 1e9)
    if case["family"] == "conv2d":
        row.update(floor_fused_ms=floor_ms(case, "fused", gbps), floor_alone_ms=floor_ms(case, "alone", gbps))
        row.update(fused_over_floor=fused_t["median_ms"] / row["floor_fused_ms"],
                   alone_over_floor=plain_t["median_ms"] / row["floor_alone_ms"],
                   floor_ratio=row["floor_fused_ms"] / row["floor_alone_ms"])
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="run cases whose name contains this (repeatable)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", default=str(RESULTS / "fusion.json"))
    ns = p.parse_args(argv)
    require_gpu("benchmarks/fusion.py")
    import torch
    wanted = (lambda name: not ns.only or any(o in name for o in ns.only))
    cases = [c for c in gemm_cases() + conv_cases() if wanted(c["name"])]
    build_all(cases)
    copy = copy_bandwidth() if any(c["family"] == "conv2d" for c in cases) else {"gbps": 0.0}
    print(f"copy bandwidth {copy['gbps']:.0f} GB/s", flush=True)
    rows = []
    for case in cases:
        r = run(case, ns.repeat, copy["gbps"])
        rows.append(r)
        print(f"{r['name']:<44} fused {r['fused']['median_ms']:.4f} ms  alone {r['plain']['median_ms']:.4f} ms  "
              f"x{r['ratio']:.3f} ({'MET' if r['goal_met'] else 'missed'} <= {r['goal']:.2f}; "
              f"{r['tflops']:.1f} TFLOP/s; rel err {r['rel_error']:.1e}) {r['kernel']}", flush=True)
        if "floor_fused_ms" in r:
            print(f"{'':<44} floor fused {r['floor_fused_ms']:.4f} ms  alone {r['floor_alone_ms']:.4f} ms "
                  f"(x{r['floor_ratio']:.3f}): fused at {r['fused_over_floor']:.2f}x its floor, alone at "
                  f"{r['alone_over_floor']:.2f}x", flush=True)
    blocks = [run_block(case, ns.repeat) for case in block_cases() if wanted(case["name"])]
    host = host_rows() if wanted("host") else []
    device = torch.cuda.get_device_name()
    out = save_json(ns.out, {"device": device, "copy_gbps": copy["gbps"], "rows": rows, "blocks": blocks,
                             "host": host}, gpu=True)
    chart(rows, str(out.with_suffix(".png")))
    return 0


def chart(rows: list[dict], png: str) -> None:
    """Fused and plain milliseconds per case, side by side."""
    bar_chart(png, [r["name"] for r in rows], [r["fused"]["median_ms"] for r in rows],
              [r["plain"]["median_ms"] for r in rows], "the product alone", "ms per forward (fused: cuopjit)")


if __name__ == "__main__":
    sys.exit(main())
