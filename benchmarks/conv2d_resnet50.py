"""Convolution2D on torchvision ResNet-50's 23 distinct conv layers: cuopjit vs torch (cuDNN) in the same run.

The layers (stem 7x7/2, the bottlenecks' 1x1 and 3x3, the 3x3/2 and 1x1/2 downsampling ones), no bias (a
BatchNorm follows each), at batch 32 and 1. torch runs channels_last (cuDNN's fast layout, benchmark mode);
cuopjit runs `--layout` (nhwc: channels_last tensors in and out; nchw: contiguous). Modes: "fp32" (cuopjit's
exact kernels vs cuDNN with TF32 off), "tf32" (enable_tensor_core=True vs cuDNN with TF32 on) and "3xtf32"
(precision="3xtf32" vs cuDNN fp32); `--dtype float16,bfloat16` adds (or, without --modes, runs only) the 16-bit
modes: Convolution2DHalf / BFloat16 vs cuDNN on half / bfloat16 channels_last tensors (a ratio chart per mode,
`<out>.png`). Kernel time: tensors are wrapped once, the weight set once; each timing is
the median of CUDA-event batches, cuopjit and torch alternating (benchmarks/mb_common.py `time_pair`); errors
are against torch float64 on the first image. Every kernel is compiled first, in parallel. `--choices` also
times every candidate of the family (what auto-tuning compares) and reports the heuristic's pick against the
fastest; `--once` only runs each forward three times (for ncu / compute-sanitizer).

    python benchmarks/conv2d_resnet50.py [--batch 32,1] [--modes fp32,tf32,3xtf32] [--dtype float16,bfloat16]
                                         [--layout nhwc|nchw]
                                         [--only 3,17] [--choices] [--once] [--out benchmarks/results/...json]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from cuopjit.build import pipeline  # noqa: E402
from cuopjit.ops.conv2d import packing  # noqa: E402
from cuopjit.ops.conv2d.problem import ConvPlan  # noqa: E402
from cuopjit.run import executor  # noqa: E402
from cuopjit.target import of_device  # noqa: E402
from mb_common import time_ms, time_pair  # noqa: E402
from results_io import ratio_panels, require_gpu, save_json  # noqa: E402

# (C, H, W, K, kernel, stride, pad): torchvision resnet50 (v1.5: stride on the 3x3), in network order
LAYERS = [(3, 224, 224, 64, 7, 2, 3),
          (64, 56, 56, 64, 1, 1, 0), (64, 56, 56, 64, 3, 1, 1), (64, 56, 56, 256, 1, 1, 0), (256, 56, 56, 64, 1, 1, 0),
          (256, 56, 56, 128, 1, 1, 0), (128, 56, 56, 128, 3, 2, 1), (128, 28, 28, 512, 1, 1, 0),
          (256, 56, 56, 512, 1, 2, 0), (512, 28, 28, 128, 1, 1, 0), (128, 28, 28, 128, 3, 1, 1),
          (512, 28, 28, 256, 1, 1, 0), (256, 28, 28, 256, 3, 2, 1), (256, 14, 14, 1024, 1, 1, 0),
          (512, 28, 28, 1024, 1, 2, 0), (1024, 14, 14, 256, 1, 1, 0), (256, 14, 14, 256, 3, 1, 1),
          (1024, 14, 14, 512, 1, 1, 0), (512, 14, 14, 512, 3, 2, 1), (512, 7, 7, 2048, 1, 1, 0),
          (1024, 14, 14, 2048, 1, 2, 0), (2048, 7, 7, 512, 1, 1, 0), (512, 7, 7, 512, 3, 1, 1)]
MODES = ("fp32", "tf32", "3xtf32", "float16", "bfloat16")
HALVES = {"float16": ("Half", "float16"), "bfloat16": ("BFloat16", "bfloat16")}   # class suffix, torch dtype


def name(layer: tuple) -> str:
    c, h, w, k, r, s, _ = layer
    return f"{r}x{r}{'/' + str(s) if s > 1 else ''} {c}->{k} {h}^2"


def config(mode: str) -> cuopjit.JITConfig:
    cfg = cuopjit.JITConfig()
    cfg.enable_tensor_core = mode == "tf32"
    if mode == "3xtf32":
        cfg.precision = "3xtf32"
    return cfg


def setup(layer: tuple, batch: int, mode: str, nhwc: bool) -> dict:
    """torch tensors (channels_last), the cuopjit operator under the mode's config and its arguments."""
    import torch
    c, h, w, k, r, s, p = layer
    fmt = torch.channels_last
    suffix, dt = HALVES.get(mode, ("Float", "float32"))
    dt = getattr(torch, dt)
    x = torch.randn(batch, c, h, w, device="cuda").to(dtype=dt, memory_format=fmt)
    wt = (torch.randn(k, c, r, r, device="cuda") / math.sqrt(c * r * r)).to(dtype=dt, memory_format=fmt)
    conv = getattr(cuopjit, "Convolution2D" + suffix)(c, k, r, r, s, s, pad_h=p, pad_w=p)
    conv.set_weight(cuopjit.tensor(wt.contiguous()))
    out = conv.output_shape((batch, c, h, w))
    y = torch.full(out, float("nan"), device="cuda", dtype=dt)
    xs, ys = (x, y.to(memory_format=fmt)) if nhwc else (x.contiguous(), y)
    op = getattr(cuopjit, "JITConvolution2D" + suffix)(conv)
    op.set_jit_config(config(mode))
    args = (cuopjit.tensor(xs), cuopjit.tensor(ys))
    return {"x": x, "w": wt, "y": ys, "op": op, "args": args, "keep": (xs,)}


def build_all(cases: list[dict], choices: bool) -> None:
    """Compile every kernel the cases run (and with `choices` every candidate's), 16 at a time."""
    specs = {}
    for case in cases:
        for plan in plans(case, choices):
            specs.update((spec, None) for spec in plan.specs)
    arch = of_device(cuopjit.get_device()).arch
    start = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, arch), specs))
    print(f"{len(specs)} kernels built for {arch} in {time.perf_counter() - start:.1f} s", flush=True)


def plans(case: dict, every: bool) -> list:
    """The heuristic's plan of a case, or every candidate's (the family's choices under the mode's config)."""
    op, (x, y) = case["op"], case["args"]
    settings = op._current_settings()
    if not every:
        return [op.operator.plan(x, y, settings=settings)]
    conv = op.operator
    problem, target = conv.problem(x, y), of_device(cuopjit.get_device())
    family = conv.family
    return [family.plan(problem, c, target) for c in family.choices(problem, settings.config, target)]


def time_choices(case: dict) -> dict:
    """ms of every candidate's forward (label -> ms) on the case's tensors: a plan that packs the weight is timed
    as a Convolution2D runs it, the packing done once beforehand (cuopjit/ops/conv2d/packing.py)."""
    import torch
    conv, (x, y) = case["op"].operator, case["args"]
    settings, ordinal = case["op"]._current_settings(), cuopjit.get_device()
    _, pointers, _ = conv.bind(x, y)
    found = {}
    for plan in plans(case, True):
        keep = None
        if packing.packed_bytes(plan) if isinstance(plan, ConvPlan) else 0:
            keep = cuopjit.empty((-(-packing.packed_bytes(plan) // 8),), "float64")
            packs, plan = packing.split(plan, keep.ptr)
            executor.load(packs, ordinal, settings)(pointers, 0)
        run = executor.load(plan, ordinal, settings)
        found[plan.choice] = time_ms(lambda i: run(pointers, 0))["median_ms"]
        torch.cuda.synchronize()
        del keep
    return found


def run_case(layer: tuple, batch: int, mode: str, case: dict, once: bool, choices: bool) -> dict:
    import torch
    op, args, x, wt = case["op"], case["args"], case["x"], case["w"]
    c, h, w, k, r, s, p = layer
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    mine = lambda i: op.forward(*args)
    theirs = lambda i: torch.nn.functional.conv2d(x, wt, None, s, p)
    if once:
        for _ in range(3):
            mine(0)
            theirs(0)
        torch.cuda.synchronize()
        return {}
    mine(0)
    torch.cuda.synchronize()
    ref = torch.nn.functional.conv2d(x[:1].double(), wt.double(), None, s, p)
    err = ((case["y"][:1].double() - ref).norm() / ref.norm()).item()
    a, b = time_pair(mine, theirs)
    flops = 2.0 * case["y"].numel() * c * r * r
    prof = op.get_performance_profile()
    row = {"layer": list(layer), "name": name(layer), "batch": batch, "mode": mode,
           "kernel": getattr(prof, "kernel_name", ""), "cuopjit_ms": a["median_ms"], "torch_ms": b["median_ms"],
           "ratio": b["median_ms"] / a["median_ms"], "cuopjit_tflops": flops / a["median_ms"] / 1e9, "rel_error": err}
    if choices:
        row["choices_ms"] = time_choices(case)
        row["heuristic_vs_best"] = min(row["choices_ms"].values()) / row["choices_ms"][plans(case, False)[0].choice]
    torch.backends.cudnn.allow_tf32 = False
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", default="32,1")
    p.add_argument("--modes", default="")
    p.add_argument("--dtype", default="", help="float16,bfloat16: the 16-bit modes")
    p.add_argument("--layout", default="nhwc", choices=("nhwc", "nchw"))
    p.add_argument("--only", default="", help="comma list of layer indices (0-22)")
    p.add_argument("--choices", action="store_true", help="also time every candidate (heuristic vs tuned)")
    p.add_argument("--once", action="store_true", help="run each forward 3 times, no timing (profilers)")
    p.add_argument("--out", default=None, help="JSON path (default results/conv2d_resnet50.json, with --dtype alone "
                                                "results/conv2d_resnet50_half.json)")
    a = p.parse_args()
    a.out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                  "conv2d_resnet50_half.json" if a.dtype and not a.modes else "conv2d_resnet50.json")
    require_gpu("benchmarks/conv2d_resnet50.py")
    import torch
    torch.backends.cudnn.benchmark = True
    picked = [int(i) for i in a.only.split(",")] if a.only else list(range(len(LAYERS)))
    modes = ([m for m in a.modes.split(",") if m] or ([] if a.dtype else list(MODES[:3]))) + \
        [d for d in a.dtype.split(",") if d]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode / dtype {', '.join(unknown)}: choose from {', '.join(MODES)}")
    todo = [(i, bt, m) for bt in map(int, a.batch.split(",")) for m in modes for i in picked
            if not (bt == 1 and m == "3xtf32")]
    rows = []
    for batch in sorted({t[1] for t in todo}, reverse=True):
        cases = {(i, m): setup(LAYERS[i], batch, m, a.layout == "nhwc") for i, bt, m in todo if bt == batch}
        build_all(list(cases.values()), a.choices)
        for (i, m), case in cases.items():
            row = run_case(LAYERS[i], batch, m, case, a.once, a.choices)
            if row:
                row["index"] = i
                rows.append(row)
                extra = f" heur/best {row['heuristic_vs_best']:.2f}" if "heuristic_vs_best" in row else ""
                print(f"{i:2d} b{batch:<2d} {m:6s} {row['name']:22s} {row['cuopjit_ms']:8.4f} {row['torch_ms']:8.4f} "
                      f"{row['ratio']:5.2f}x err {row['rel_error']:.1e}{extra}  {row['kernel']}", flush=True)
        cases.clear()
        torch.cuda.empty_cache()
    if a.once:
        return
    summary = []
    for batch in sorted({r["batch"] for r in rows}, reverse=True):
        for m in MODES:
            got = [r["ratio"] for r in rows if r["batch"] == batch and r["mode"] == m]
            if got:
                summary.append({"batch": batch, "mode": m, "geomean": geomean(got), "min": min(got), "max": max(got)})
                print(f"batch {batch:2d} {m:6s} geomean {summary[-1]['geomean']:.3f}x  min {min(got):.3f}x  "
                      f"max {max(got):.3f}x  ({len(got)} layers)")
    save_json(a.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "layout": a.layout,
                      "cudnn": torch.backends.cudnn.version(), "rows": rows, "summary": summary}, gpu=True)
    top = max(r["batch"] for r in rows)
    ratio_panels(os.path.splitext(a.out)[0] + ".png", [name(LAYERS[i]) for i in picked],
                 {m: [next((r["ratio"] for r in rows if r["index"] == i and r["mode"] == m and r["batch"] == top), None)
                      for i in picked] for m in modes}, "cuDNN ms / cuopjit ms",
                 f"Conv2D, ResNet-50 layers, batch {top}, {a.layout}")


if __name__ == "__main__":
    main()
