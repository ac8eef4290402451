"""User-written elementwise programs (issue 26 item 3) against the same expression in PyTorch eager and a copy.

    python benchmarks/mb_expr.py [--only NAME ...] [--repeat N] [--out FILE.json]

Exports WORKLOADS in mb_common.py's format (family "elementwise": `cuopjit bench elementwise` runs them).
Run alone, each workload is timed in alternating rounds (mb_common.time_pair) twice: against the same
expression in PyTorch eager, and against a torch `copy_` moving the same number of bytes (half read, half
written) in the same rounds. "bytes" counts every tensor operand once (each input read once, each output
written once; the per-channel vectors too). Goal (issue 26): >= 93% of the copy's bandwidth.
Writes JSON under benchmarks/results/ only when a GPU ran.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import GIB, copy_bandwidth, rotation, time_pair, to_cuopjit, torch_dtype  # noqa: E402
from results_io import RESULTS, require_gpu, save_json  # noqa: E402

RESNET = "out = relu(x * scale + shift + r)"
AXPBY = "out = a * x + b * y"
ITEMSIZE = {"float32": 4, "float64": 8}
GOAL = {"goal": ">= 93% of copy", "goal_torch": None, "goal_copy": 0.93}


def _resnet(name: str, dtype: str, shape: tuple, vector: tuple):
    """relu(x * scale + shift + r) with x, r of `shape` and scale, shift of `vector` (broadcast)."""
    numel = 1
    for d in shape:
        numel *= d
    vec = 1
    for d in vector:
        vec *= d
    nbytes = (3 * numel + 2 * vec) * ITEMSIZE[dtype]

    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        k = rotation(nbytes)
        xs = [torch.randn(shape, device="cuda", dtype=td) for _ in range(k)]
        rs = [torch.randn(shape, device="cuda", dtype=td) for _ in range(k)]
        ys = [torch.empty(shape, device="cuda", dtype=td) for _ in range(k)]
        scale = torch.rand(vector, device="cuda", dtype=td) + 0.5
        shift = torch.randn(vector, device="cuda", dtype=td)
        cx, cr, cy = ([to_cuopjit(t) for t in ts] for ts in (xs, rs, ys))
        cs, cb = to_cuopjit(scale), to_cuopjit(shift)
        op = (cuopjit.ElementwiseFloat if dtype == "float32" else cuopjit.ElementwiseDouble)(RESNET)

        def mine(i):
            op.forward(x=cx[i % k], scale=cs, shift=cb, r=cr[i % k], out=cy[i % k])

        def theirs(i):
            torch.clamp_min(xs[i % k] * scale + shift + rs[i % k], 0, out=ys[i % k])

        def check():
            ys[0].fill_(float("nan"))
            mine(0)
            ref = torch.relu(xs[0].double() * scale.double() + shift.double() + rs[0].double())
            return float((ys[0].double() - ref).norm() / ref.norm())
        return {"run_cuopjit": mine, "run_torch": theirs, "check": check, "rotation": k}

    return {"family": "elementwise", "name": name, "dtype": dtype, "shape": list(shape), "vector": list(vector),
            "program": RESNET, "bytes": nbytes, "setup": setup, **GOAL}


def _axpby(dtype: str):
    """a * x + b * y over 1 GiB operands, a and b Python numbers (kernel parameters)."""
    n = GIB // ITEMSIZE[dtype]

    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        x, y = (torch.randn(n, device="cuda", dtype=td) for _ in range(2))
        out = torch.empty_like(x)
        cx, cy, co = to_cuopjit(x), to_cuopjit(y), to_cuopjit(out)
        op = (cuopjit.ElementwiseFloat if dtype == "float32" else cuopjit.ElementwiseDouble)(AXPBY)

        def check():
            out.fill_(float("nan"))
            op.forward(x=cx, y=cy, a=0.5, b=-1.25, out=co)
            ref = 0.5 * x.double() - 1.25 * y.double()
            return float((out.double() - ref).norm() / ref.norm())
        return {"run_cuopjit": lambda i: op.forward(x=cx, y=cy, a=0.5, b=-1.25, out=co),
                "run_torch": lambda i: torch.add(x * 0.5, y * -1.25, out=out), "check": check}

    return {"family": "elementwise", "name": "elementwise_axpby_1gib", "dtype": dtype, "shape": [n, n],
            "program": AXPBY, "bytes": 3 * n * ITEMSIZE[dtype], "setup": setup, **GOAL}


NCHW, NHWC = (32, 256, 56, 56), (32, 56, 56, 256)
WORKLOADS = [
    _axpby("float32"),
    _resnet("elementwise_resnet_full_1gib", "float32", (GIB // 4,), (GIB // 4,)),
    _resnet("elementwise_resnet_nchw_channel", "float32", NCHW, (256, 1, 1)),
    _resnet("elementwise_resnet_nhwc_channel", "float32", NHWC, (256,)),
    _resnet("elementwise_resnet_nchw_channel", "float64", NCHW, (256, 1, 1)),
]


def run(w: dict, repeat: int) -> dict:
    """Time one workload against PyTorch and against a copy of the same bytes, in alternating rounds."""
    import torch
    fns = w["setup"]()
    row = {k: v for k, v in w.items() if k != "setup"}
    row["rel_error_vs_float64"] = fns["check"]()
    half = w["bytes"] // 8
    bufs = [torch.empty(half, device="cuda", dtype=torch.float32).normal_(),
            torch.empty(half, device="cuda", dtype=torch.float32)]
    mine, torch_t = time_pair(fns["run_cuopjit"], fns["run_torch"], repeat=repeat)
    mine2, copy_t = time_pair(fns["run_cuopjit"], lambda i: bufs[1].copy_(bufs[0]), repeat=repeat)
    bufs.clear()
    del fns
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    row.update(cuopjit=mine, torch=torch_t, cuopjit_vs_copy=mine2, copy=copy_t)
    row["cuopjit_gbps"] = w["bytes"] / mine["median_ms"] / 1e6
    row["torch_gbps"] = w["bytes"] / torch_t["median_ms"] / 1e6
    row["copy_gbps"] = 8 * half / copy_t["median_ms"] / 1e6
    row["pct_copy"] = copy_t["median_ms"] / mine2["median_ms"] * (w["bytes"] / (8 * half))
    row["speedup_vs_torch"] = torch_t["median_ms"] / mine["median_ms"]
    row["goal_met"] = row["pct_copy"] >= w["goal_copy"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="run workloads whose name contains this (repeatable)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--out", default=str(RESULTS / "mb_expr.json"))
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_expr.py")
    import torch
    copy = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, copy bandwidth {copy['gbps']:.0f} GB/s (torch copy_ of 1 GiB)")
    rows = []
    for w in WORKLOADS:
        if ns.only and not any(o in w["name"] for o in ns.only):
            continue
        rows.append(run(w, ns.repeat))
        r = rows[-1]
        print(f"{r['name']:<34}{r['dtype']:<9}{r['bytes'] / 1e6:>9.1f} MB  cuopjit {r['cuopjit']['median_ms']:.4f} ms "
              f"{r['cuopjit_gbps']:>6.0f} GB/s  torch {r['torch_gbps']:>6.0f} GB/s  x{r['speedup_vs_torch']:.2f}  "
              f"copy {r['copy_gbps']:>6.0f} GB/s  {100 * r['pct_copy']:.1f}% of copy "
              f"({'MET' if r['goal_met'] else 'missed'}; rel err {r['rel_error_vs_float64']:.1e})", flush=True)
    save_json(ns.out, {"device": torch.cuda.get_device_name(), "copy_1gib": copy, "workloads": rows}, gpu=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
