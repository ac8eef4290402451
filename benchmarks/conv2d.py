"""Convolution2D: cuopjit vs torch.nn.functional.conv2d (cuDNN, benchmark mode) in the same run, TFLOP/s.

Workloads (the issue's goal rows): the seed's 3x3 layer (32x64x224^2 -> 128, pad 1), ResNet-50 layers
at batch 32 (1x1, 3x3, 3x3 stride 2, 7x7 stride 2 on 3 channels) and a depthwise 3x3 on 32x256x56^2.
Modes: "fp32" (cuopjit's exact SIMT kernel; cuDNN with TF32 off), "tf32" (enable_tensor_core=True;
cuDNN with TF32 on) and "3xtf32" (precision="3xtf32": float32-accurate tensor-core products; against
cuDNN fp32, TF32 off). Every layer has a bias; both sides write NCHW. cuopjit packs the weight once, at
its first forward (not per forward; see benchmarks/conv2d_resnet50.py for ResNet-50's 23 layers on
channels_last tensors). Each timing is the median of 40 calls between CUDA events after warm-up, cuopjit
and cuDNN alternating in four rounds (benchmarks/mb_common.py `time_pair`); errors are ||out - ref|| / ||ref|| against torch float64 on the device, over
the first ERR_IMAGES images of the batch. --breakdown adds each kernel's time (torch.profiler).

    python benchmarks/conv2d.py [--only seed,resnet,depthwise] [--modes fp32,tf32,3xtf32] [--breakdown]
                                [--out benchmarks/results/conv2d.json]
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import time_pair, to_cuopjit  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

# name, group, (N, C, H, W, K, kh, kw, stride, pad, groups)
LAYERS = [("seed 3x3 64->128 224^2", "seed", (32, 64, 224, 224, 128, 3, 3, 1, 1, 1)),
          ("resnet 1x1 256->64 56^2", "resnet", (32, 256, 56, 56, 64, 1, 1, 1, 0, 1)),
          ("resnet 3x3 64->64 56^2", "resnet", (32, 64, 56, 56, 64, 3, 3, 1, 1, 1)),
          ("resnet 3x3/2 128->128 56^2", "resnet", (32, 128, 56, 56, 128, 3, 3, 2, 1, 1)),
          ("resnet 7x7/2 3->64 224^2", "resnet", (32, 3, 224, 224, 64, 7, 7, 2, 3, 1)),
          ("depthwise 3x3 256 56^2", "depthwise", (32, 256, 56, 56, 256, 3, 3, 1, 1, 256))]
BREAKDOWN = False
ERR_IMAGES = 2      # the error is measured on the first images of the batch (float64 convolution is slow)
GOALS = {"seed": {"fp32": 1.0, "tf32": 1.0, "3xtf32": 2.0}, "resnet": {"fp32": 1.0, "tf32": 1.0, "3xtf32": 1.0},
         "depthwise": {"fp32": 1.0}}


def case(name: str, group: str, layer: tuple, mode: str) -> dict:
    """Time one layer in one mode with cuopjit and cuDNN; check cuopjit against float64."""
    import torch
    n, c, h, w, k, kh, kw, st, pad, groups = layer
    x = torch.randn(n, c, h, w, device="cuda")
    wt = torch.randn(k, c // groups, kh, kw, device="cuda") / math.sqrt(c // groups * kh * kw)
    b = torch.randn(k, device="cuda")
    conv = cuopjit.Convolution2DFloat(c, k, kh, kw, st, st, groups=groups)
    conv.set_weight(to_cuopjit(wt))
    conv.set_bias(to_cuopjit(b))
    oh = conv.output_shape(x.shape, pad_h=pad, pad_w=pad)
    y = torch.full(oh, float("nan"), device="cuda")
    op = cuopjit.JITConvolution2DFloat(conv)
    cfg = cuopjit.JITConfig()
    cfg.enable_tensor_core = mode == "tf32"
    if mode == "3xtf32":
        cfg.precision = "3xtf32"
    op.set_jit_config(cfg)
    cx, cy = to_cuopjit(x), to_cuopjit(y)
    op.forward(cx, cy, pad_h=pad, pad_w=pad)
    torch.cuda.synchronize()
    ref = torch.nn.functional.conv2d(x[:ERR_IMAGES].double(), wt.double(), b.double(), st, pad, 1, groups)
    err = ((y[:ERR_IMAGES].double() - ref).norm() / ref.norm()).item()
    del ref
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    mine, theirs = time_pair(lambda i: op.forward(cx, cy, pad_h=pad, pad_w=pad),
                             lambda i: torch.nn.functional.conv2d(x, wt, b, st, pad, 1, groups))
    torch.backends.cudnn.allow_tf32 = False
    flops = 2.0 * y.numel() * (c // groups) * kh * kw
    prof = op.get_performance_profile()
    launches = breakdown(lambda: op.forward(cx, cy, pad_h=pad, pad_w=pad)) if BREAKDOWN else {}
    return {"launch_ms": launches, "name": name, "group": group, "mode": mode, "layer": list(layer),
            "cuopjit_kernel": getattr(prof, "kernel_name", ""), "cuopjit_ms": mine["median_ms"],
            "torch_ms": theirs["median_ms"], "cuopjit_tflops": flops / mine["median_ms"] / 1e9,
            "torch_tflops": flops / theirs["median_ms"] / 1e9, "ratio": theirs["median_ms"] / mine["median_ms"],
            "rel_error": err}


def breakdown(fn, calls: int = 5) -> dict:
    """Mean device time per call of each kernel one forward launches (torch.profiler / CUPTI), ms."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / calls / 1e3 for e in prof.key_averages() if e.device_time_total > 0}


def summary(rows: list[dict]) -> list[dict]:
    """Per goal row (group, mode): the ratio vs cuDNN (geometric mean over the group's layers) and the goal."""
    out = []
    for group, modes in GOALS.items():
        for mode, goal in modes.items():
            ratios = [r["ratio"] for r in rows if r["group"] == group and r["mode"] == mode]
            if ratios:
                gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
                out.append({"group": group, "mode": mode, "geomean_ratio": gm, "goal": goal, "met": gm >= goal})
    return out


def chart(rows: list[dict], path: str) -> None:
    """cuopjit vs cuDNN TFLOP/s per layer and mode."""
    bar_chart(path, [f"{r['name']} {r['mode']}" for r in rows], [r["cuopjit_tflops"] for r in rows],
              [r["torch_tflops"] for r in rows], "cuDNN (torch)", "TFLOP/s", width=0.6)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="seed,resnet,depthwise", help="comma list of seed, resnet, depthwise")
    p.add_argument("--modes", default="fp32,tf32,3xtf32", help="comma list of fp32, tf32, 3xtf32")
    p.add_argument("--breakdown", action="store_true", help="also time each kernel of a forward (torch.profiler)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "conv2d.json"))
    args = p.parse_args()
    global BREAKDOWN
    BREAKDOWN = args.breakdown
    require_gpu("benchmarks/conv2d.py")
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    groups, modes = args.only.split(","), args.modes.split(",")
    rows = []
    for name, group, layer in LAYERS:
        for mode in modes:
            if group in groups and mode in GOALS[group]:
                rows.append(case(name, group, layer, mode))
                r = rows[-1]
                print(f"{r['name']:28s} {mode:5s} {r['cuopjit_tflops']:7.2f} {r['torch_tflops']:7.2f} "
                      f"{r['ratio']:5.2f}x err {r['rel_error']:.1e}  {r['cuopjit_kernel']}", flush=True)
                for kernel, ms in r["launch_ms"].items():
                    print(f"    {ms:8.3f} ms  {kernel}", flush=True)
                torch.cuda.empty_cache()
    goals = summary(rows)
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "cudnn": torch.backends.cudnn.version(), "rows": rows, "goals": goals}, gpu=True)
    chart(rows, os.path.splitext(args.out)[0] + ".png")
    print(f"{'layer':28s} {'mode':5s} {'cuopjit':>8s} {'cuDNN':>8s} {'ratio':>6s}  (TFLOP/s)")
    for r in rows:
        print(f"{r['name']:28s} {r['mode']:5s} {r['cuopjit_tflops']:8.2f} {r['torch_tflops']:8.2f} {r['ratio']:6.2f}")
    for g in goals:
        print(f"goal {g['group']:9s} {g['mode']:5s} geomean {g['geomean_ratio']:.2f}x vs cuDNN (goal >= "
              f"{g['goal']:.1f}x): {'met' if g['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
