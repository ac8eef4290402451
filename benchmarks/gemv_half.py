"""GemvHalf / GemvBFloat16 (issue 24) against torch.mv on the same 16-bit tensors, as a fraction of the copy
bandwidth: y = A x and y = A^T x (torch.mv(A.t(), x)) for A of 16384², 8192² and 4096², float16 and bfloat16.

Bytes count A, x and y once each, 2 bytes an element. Each row is timed in alternating rounds (mb_common.time_pair),
with A, x and y rotated so that repeated calls do not hit in L2; "copy" is a 1 GiB torch copy_, and "copy here" a
torch copy_ of the GEMV's own byte count (what a launch and a ramp leave of the bandwidth at that size: a 4096²
GEMV reads 32 MiB in ~11 us). Goal: >= 90% of copy bandwidth.

    python benchmarks/gemv_half.py [--only 4096] [--dtype float16] [--json benchmarks/results/gemv_half.json]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, copy_bandwidth_at, rotation, time_pair, to_cuopjit  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

DTYPES = ("float16", "bfloat16")
SIZES = (16384, 8192, 4096)
GOAL_COPY = 0.90
DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gemv_half.json")


def _setup(n: int, trans: bool, dtype: str):
    import torch
    import cuopjit
    td = getattr(torch, dtype)
    k = rotation(2 * n * n)
    a = [torch.randn(n, n, device="cuda").to(td) for _ in range(k)]
    x = [torch.randn(n, device="cuda").to(td) for _ in range(k)]
    y = [torch.empty(n, device="cuda", dtype=td) for _ in range(k)]
    cls = {"float16": cuopjit.GemvHalf, "bfloat16": cuopjit.GemvBFloat16}[dtype]
    ops = [cls(trans) for _ in range(k)]
    for op, t in zip(ops, a):
        op.set_weight(to_cuopjit(t))
    cx, cy = [to_cuopjit(t) for t in x], [to_cuopjit(t) for t in y]

    def theirs(i):
        return torch.mv(a[i % k].t() if trans else a[i % k], x[i % k])

    def check():
        ops[0].forward(cx[0], cy[0])
        ref = torch.mv(a[0].double().t() if trans else a[0].double(), x[0].double())
        return float((y[0].double() - ref).norm() / ref.norm())
    return (lambda i: ops[i % k].forward(cx[i % k], cy[i % k])), theirs, check


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="substring of a row name (repeatable)")
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--json", default=DEFAULT_JSON, help="results file (the PNG goes beside it)")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/gemv_half.py")
    import torch
    copy = copy_bandwidth()
    device = torch.cuda.get_device_name()
    print(f"device copy: {copy['gbps']:.0f} GB/s ({device})", flush=True)
    rows = []
    for dtype in DTYPES:
        for n in SIZES:
            for trans in (False, True):
                name = f"gemv_{'t' if trans else 'n'}_{n}x{n}"
                if (ns.only and not any(o in name for o in ns.only)) or (ns.dtype and dtype != ns.dtype):
                    continue
                nbytes = 2 * (n * n + 2 * n)
                mine, theirs, check = _setup(n, trans, dtype)
                err = check()
                tc, tt = time_pair(mine, theirs)
                torch.cuda.empty_cache()
                here = copy_bandwidth_at(nbytes)
                gc, gt = nbytes / tc["median_ms"] / 1e6, nbytes / tt["median_ms"] / 1e6
                row = {"name": name, "dtype": dtype, "bytes": nbytes, "cuopjit_ms": tc["median_ms"],
                       "cuopjit_gbps": gc, "torch_ms": tt["median_ms"], "torch_gbps": gt, "ratio": gc / gt,
                       "copy_fraction": gc / copy["gbps"], "copy_here_gbps": here, "here_fraction": gc / here,
                       "rel_err": err, "met": gc >= GOAL_COPY * copy["gbps"]}
                rows.append(row)
                print(f"{name:20s} {dtype:9s} cuopjit {gc:6.0f} GB/s ({100 * row['copy_fraction']:5.1f}% of copy, "
                      f"{100 * row['here_fraction']:5.1f}% of copy here {here:.0f})  torch {gt:6.0f} GB/s  "
                      f"x{row['ratio']:5.2f}  err {err:.1e}  {'ok' if row['met'] else 'MISS'}", flush=True)
    save_json(ns.json, {"device": device, "copy": copy, "rows": rows}, gpu=True)
    bar_chart(ns.json.removesuffix(".json") + ".png", [f"{r['name']} {r['dtype']}" for r in rows],
              [r["cuopjit_gbps"] for r in rows], [r["torch_gbps"] for r in rows], "torch.mv", "GB/s",
              decorate=lambda ax, xs: ax.axhline(GOAL_COPY * copy["gbps"], color="k", linestyle=":",
                                                 linewidth=0.8, label="90% of copy"))
    print("\n| GEMV | dtype | cuopjit GB/s | % of copy | % of copy here | torch.mv GB/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['dtype']} | {r['cuopjit_gbps']:.0f} | {100 * r['copy_fraction']:.1f} | "
              f"{100 * r['here_fraction']:.1f} | {r['torch_gbps']:.0f} | {r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
