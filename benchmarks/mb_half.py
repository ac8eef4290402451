"""The memory-bound operators in float16 and bfloat16 (issue 24) against PyTorch, as a fraction of the copy bandwidth:
Softmax and LayerNorm, and on ResNet's 32 x 256 x 56 x 56 activation in NCHW and channels_last: ReLU, the
elementwise tail of a residual block (relu(x * scale + shift + r), per-channel scale and shift), BatchNorm
(inference and training, 16-bit parameters), max pool 3x3/2 (padding 1) and global average pool.

Each workload is timed against torch's own op on the same tensors (torch.softmax, F.layer_norm, torch.relu, the
eager tail (four kernels: torch has no fused form), F.batch_norm, F.max_pool2d, F.adaptive_avg_pool2d: float32
inside, 16-bit in and out, as ours) in alternating rounds (mb_common.time_pair), in the same process as a 1 GiB torch
`copy_` that gives the device's copy bandwidth. "bytes" counts each tensor read once and written once, 2 bytes an
element (training BatchNorm reads x twice unless it stays in L2: its bytes count one read). Goal of issue 24: >= 93%
of the copy bandwidth.

    python benchmarks/mb_half.py [--only NAME] [--dtype float16] [--json benchmarks/results/mb_half.json]

benchmarks/results/mb_half.json holds the Softmax / LayerNorm rows, mb_half_maps.json the 32 x 256 x 56 x 56 ones
(`--only 32x256x56x56`) and the same maps at batch 128 (`--only 128x256x56x56`: 4x the bytes, where the launch and
the ramp weigh a quarter as much); mb_half_maps_sweep.py chose their kernel shapes. "copy here" is a torch copy_
of the workload's own byte count (mb_common.copy_bandwidth_at): the floor a launch and a ramp leave at that size.

Exports WORKLOADS in the format of mb_common.py; writes JSON and a PNG (results_io) beside --json.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, copy_bandwidth_at, rotation, time_pair, to_cuopjit  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

DTYPES = ("float16", "bfloat16")
SHAPES = [(65536, 1024), (16384, 4096), (8192, 8192), (4096, 32768), (1048576, 128)]
LN_SHAPES = [(32768, 768)] + SHAPES
GOAL_COPY = 0.93
DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mb_half.json")


def _torch_dtype(name: str):
    import torch
    return getattr(torch, name)


def _softmax(shape, dtype, axis=-1):
    def setup():
        import torch
        import cuopjit
        k = rotation(4 * math.prod(shape))
        xs = [torch.randn(shape, device="cuda").mul_(4).to(_torch_dtype(dtype)) for _ in range(k)]
        ys = [torch.empty_like(xs[0]) for _ in range(k)]
        cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
        op = {"float16": cuopjit.SoftmaxHalf, "bfloat16": cuopjit.SoftmaxBFloat16}[dtype]()

        def check():
            op.forward(cxs[0], cys[0], axis=axis)
            ref = torch.softmax(xs[0].double(), dim=axis)
            return float((ys[0].double() - ref).norm() / ref.norm())
        return dict(run_cuopjit=lambda i: op.forward(cxs[i % k], cys[i % k], axis=axis),
                    run_torch=lambda i: torch.softmax(xs[i % k], axis), check=check)
    return setup


def _layernorm(shape, dtype):
    def setup():
        import torch
        import cuopjit
        td = _torch_dtype(dtype)
        k = rotation(4 * math.prod(shape))
        xs = [(torch.randn(shape, device="cuda") * 2 + 1).to(td) for _ in range(k)]
        ys = [torch.empty_like(xs[0]) for _ in range(k)]
        g, b = torch.randn(shape[-1:], device="cuda").to(td), torch.randn(shape[-1:], device="cuda").to(td)
        cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
        op = {"float16": cuopjit.LayerNormHalf, "bfloat16": cuopjit.LayerNormBFloat16}[dtype]()
        op.set_gamma(to_cuopjit(g))
        op.set_beta(to_cuopjit(b))
        norm = shape[-1:]

        def check():
            op.forward(cxs[0], cys[0])
            ref = torch.nn.functional.layer_norm(xs[0].double(), norm, g.double(), b.double(), 1e-5)
            return float((ys[0].double() - ref).norm() / ref.norm())
        return dict(run_cuopjit=lambda i: op.forward(cxs[i % k], cys[i % k]),
                    run_torch=lambda i: torch.nn.functional.layer_norm(xs[i % k], norm, g, b, 1e-5), check=check)
    return setup


ACT = (32, 256, 56, 56)   # ResNet-50's first-stage activation, batch 32
ACT_LARGE = (128, 256, 56, 56)   # the same at batch 128: 205 MB of float16, the ramp a quarter as heavy
LAYOUTS = ("nchw", "nhwc")


def _activation(torch, shape, dtype, lay, scale=1.0, offset=0.0):
    """A 16-bit torch tensor of normal values in NCHW or channels_last memory."""
    t = (torch.randn(shape, device="cuda") * scale + offset).to(_torch_dtype(dtype))
    return t.contiguous(memory_format=torch.channels_last) if lay == "nhwc" else t


def _map(kind: str, shape, dtype: str, lay: str):
    """relu, tail, bn, bn_train, maxpool, gap over `shape` in layout `lay`: cuopjit's op and torch's on the same
    tensors, rotated (mb_common.rotation), checked against torch in float64."""
    def setup():
        import torch
        import torch.nn.functional as F
        import cuopjit
        td, c = _torch_dtype(dtype), shape[1]
        n_out = {"maxpool": math.prod(shape) // 4, "gap": shape[0] * c}.get(kind, math.prod(shape))
        k = rotation(2 * (math.prod(shape) * (2 if kind == "tail" else 1) + n_out))
        xs = [_activation(torch, shape, dtype, lay, 2.0, 0.5) for _ in range(k)]
        rs = [_activation(torch, shape, dtype, lay) for _ in range(k)] if kind == "tail" else xs
        if kind == "maxpool":
            ys = [torch.empty_like(F.max_pool2d(xs[0], 3, 2, 1)) for _ in range(k)]
        elif kind == "gap":
            ys = [torch.empty((shape[0], c, 1, 1), device="cuda", dtype=td) for _ in range(k)]
        else:
            ys = [torch.empty_like(xs[0]) for _ in range(k)]
        cx, cr, cy = ([to_cuopjit(t) for t in ts] for ts in (xs, rs, ys))
        g, b = torch.randn(c, device="cuda").to(td), torch.randn(c, device="cuda").to(td)
        rm, rv = torch.randn(c, device="cuda").to(td), (torch.rand(c, device="cuda") + 0.5).to(td)
        suffix = {"float16": "Half", "bfloat16": "BFloat16"}[dtype]
        if kind == "relu":
            op = getattr(cuopjit, "Relu" + suffix)()
            mine, theirs = (lambda i: op.forward(cx[i % k], cy[i % k])), (lambda i: torch.relu(xs[i % k]))
            ref = (lambda: torch.relu(xs[0].double()))
        elif kind == "tail":
            op = getattr(cuopjit, "Elementwise" + suffix)("out = relu(x * scale + shift + r)")
            cs, cb = to_cuopjit(g.view(c, 1, 1)), to_cuopjit(b.view(c, 1, 1))
            s4, b4 = g.view(1, c, 1, 1), b.view(1, c, 1, 1)
            mine = (lambda i: op.forward(x=cx[i % k], scale=cs, shift=cb, r=cr[i % k], out=cy[i % k]))
            theirs = (lambda i: torch.relu(xs[i % k] * s4 + b4 + rs[i % k]))
            ref = (lambda: torch.relu(xs[0].double() * s4.double() + b4.double() + rs[0].double()))
        elif kind in ("bn", "bn_train"):
            train = kind == "bn_train"
            op = getattr(cuopjit, "BatchNorm" + suffix)(momentum=0.0).train(train)   # momentum 0: stats unchanged
            for name, t in (("gamma", g), ("beta", b), ("running_mean", rm), ("running_var", rv)):
                getattr(op, "set_" + name)(to_cuopjit(t))
            mine = (lambda i: op.forward(cx[i % k], cy[i % k]))
            theirs = (lambda i: F.batch_norm(xs[i % k], rm, rv, g, b, train, 0.0, 1e-5))
            ref = (lambda: F.batch_norm(xs[0].double(), rm.double(), rv.double(), g.double(), b.double(), train,
                                        0.0, 1e-5))
        elif kind == "maxpool":
            op = getattr(cuopjit, "MaxPool2D" + suffix)(3, 3, 2, 2, 1, 1)
            mine, theirs = (lambda i: op.forward(cx[i % k], cy[i % k])), (lambda i: F.max_pool2d(xs[i % k], 3, 2, 1))
            ref = (lambda: F.max_pool2d(xs[0].double(), 3, 2, 1))
        else:
            op = getattr(cuopjit, "GlobalAveragePool2D" + suffix)()
            mine = (lambda i: op.forward(cx[i % k], cy[i % k]))
            theirs = (lambda i: F.adaptive_avg_pool2d(xs[i % k], 1))
            ref = (lambda: F.adaptive_avg_pool2d(xs[0].double(), 1))

        def check():
            mine(0)
            want = ref()
            return float((ys[0].double() - want).norm() / want.norm())
        return dict(run_cuopjit=mine, run_torch=theirs, check=check)
    return setup


def _map_bytes(kind: str, shape) -> int:
    n = math.prod(shape)
    return 2 * {"relu": 2 * n, "tail": 3 * n, "bn": 2 * n, "bn_train": 2 * n, "maxpool": n + n // 4,
                "gap": n + shape[0] * shape[1]}[kind]


def _workloads() -> list[dict]:
    out = []
    goal = {"goal": ">= 93% of copy", "goal_torch": None, "goal_copy": GOAL_COPY}
    for dtype in DTYPES:
        for shape in SHAPES:
            out.append({"name": f"softmax_{shape[0]}x{shape[1]}", "dtype": dtype, "shape": list(shape),
                        "bytes": 2 * math.prod(shape) * 2, **goal, "setup": _softmax(shape, dtype)})
        out.append({"name": "softmax_axis1_256x1024x256", "dtype": dtype, "shape": [256, 1024, 256],
                    "bytes": 2 * 256 * 1024 * 256 * 2, **goal, "setup": _softmax((256, 1024, 256), dtype, axis=1)})
        for shape in LN_SHAPES:
            out.append({"name": f"layernorm_{shape[0]}x{shape[1]}", "dtype": dtype, "shape": list(shape),
                        "bytes": (2 * math.prod(shape) + 2 * shape[1]) * 2, **goal, "setup": _layernorm(shape, dtype)})
        for act in (ACT, ACT_LARGE):
            for kind in ("relu", "tail", "bn", "bn_train", "maxpool", "gap"):
                for lay in LAYOUTS:
                    out.append({"name": f"{kind}_{lay}_{'x'.join(map(str, act))}", "dtype": dtype, "shape": list(act),
                                "bytes": _map_bytes(kind, act), **goal, "setup": _map(kind, act, dtype, lay)})
    return out


WORKLOADS = _workloads()


def run(w: dict, copy_gbps: float) -> dict:
    """One workload: error against float64 torch, then cuopjit and torch in alternating rounds."""
    f = w["setup"]()
    err = f["check"]()
    tc, tt = time_pair(f["run_cuopjit"], f["run_torch"])
    f.clear()
    here = copy_bandwidth_at(w["bytes"])
    gb_c, gb_t = w["bytes"] / tc["median_ms"] / 1e6, w["bytes"] / tt["median_ms"] / 1e6
    return {"name": w["name"], "dtype": w["dtype"], "shape": w["shape"], "bytes": w["bytes"],
            "cuopjit_ms": tc["median_ms"], "cuopjit_gbps": gb_c, "cuopjit_rounds_ms": tc["rounds_ms"],
            "torch_ms": tt["median_ms"], "torch_gbps": gb_t, "ratio": gb_c / gb_t, "copy_fraction": gb_c / copy_gbps,
            "torch_copy_fraction": gb_t / copy_gbps, "copy_here_gbps": here, "here_fraction": gb_c / here,
            "rel_err": err, "goal": w["goal"],
            "met": gb_c >= w["goal_copy"] * copy_gbps}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="substring of a workload name (repeatable)")
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--json", default=DEFAULT_JSON, help="results file (the PNG goes beside it)")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_half.py")
    import torch
    copy = copy_bandwidth()
    device = torch.cuda.get_device_name()
    print(f"device copy: {copy['gbps']:.0f} GB/s ({device})", flush=True)
    rows = []
    for w in WORKLOADS:
        if (ns.only and not any(o in w["name"] for o in ns.only)) or (ns.dtype and w["dtype"] != ns.dtype):
            continue
        try:
            row = run(w, copy["gbps"])
        except Exception as exc:  # report and go on
            rows.append({"name": w["name"], "dtype": w["dtype"], "error": f"{type(exc).__name__}: {exc}"})
            print(f"{w['name']:30s} {w['dtype']:9s} ERROR {exc}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        rows.append(row)
        print(f"{w['name']:30s} {w['dtype']:9s} cuopjit {row['cuopjit_gbps']:6.0f} GB/s "
              f"({100 * row['copy_fraction']:5.1f}% of copy, {100 * row['here_fraction']:5.1f}% of copy here "
              f"{row['copy_here_gbps']:.0f})  torch {row['torch_gbps']:6.0f} GB/s "
              f"({100 * row['torch_copy_fraction']:5.1f}%)  x{row['ratio']:5.2f}  err {row['rel_err']:.1e}  "
              f"{'ok' if row['met'] else 'MISS'}", flush=True)
    save_json(ns.json, {"device": device, "copy": copy, "rows": rows}, gpu=True)
    done = [r for r in rows if "error" not in r]
    bar_chart(ns.json.removesuffix(".json") + ".png", [f"{r['name']} {r['dtype']}" for r in done],
              [r["cuopjit_gbps"] for r in done], [r["torch_gbps"] for r in done], "PyTorch", "GB/s",
              decorate=lambda ax, xs: (ax.axhline(copy["gbps"], color="k", linewidth=0.8, label="copy"),
                                       ax.axhline(GOAL_COPY * copy["gbps"], color="k", linestyle=":",
                                                  linewidth=0.8, label="93% of copy")))
    print("\n| workload | dtype | cuopjit GB/s | % of copy | % of copy here | PyTorch GB/s | ratio | goal met |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | {r['dtype']} | ERROR | | | | | {r['error'][:60]} |")
        else:
            print(f"| {r['name']} | {r['dtype']} | {r['cuopjit_gbps']:.0f} | {100 * r['copy_fraction']:.1f} | "
                  f"{100 * r['here_fraction']:.1f} | "
                  f"{r['torch_gbps']:.0f} | {r['ratio']:.2f} | {'yes' if r['met'] else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
