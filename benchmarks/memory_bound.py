"""Memory-bound operators side by side with PyTorch, against the device's copy bandwidth.

    python benchmarks/memory_bound.py [--only NAME ...] [--dtype float32|float64] [--out FILE.json]

Workloads come from mb_elementwise.py (BLAS-1, ReLU, pools), mb_norms.py (Softmax, LayerNorm,
BatchNorm) and mb_layouts.py (channels_last beside NCHW, layout copies: `--only nhwc_ --only nchw_ --only
layout_`) when present; the dict format and the timing method are in mb_common.py. Prints a table
(GB/s counting the bytes each call must move, % of the copy bandwidth, ratio to PyTorch, goal met),
writes JSON and, where matplotlib is installed, a PNG chart beside it.

Two figures per workload: "bytes" counts each input read once and each output written once (the
one-read-one-write figure); "min_bytes" (default: bytes) is what the workload's algorithm must move
at least, stated with "min_note" where it differs (BatchNorm training of an x larger than L2 reads
it twice). Goals on the copy bandwidth are checked against the min-bytes (effective) figure.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mb_common import copy_bandwidth, copy_bandwidth_at, time_pair  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402


def load_workloads() -> list[dict]:
    from mb_elementwise import WORKLOADS as ours
    out = list(ours)
    for module in ("mb_norms", "mb_layouts"):
        try:
            out += list(__import__(module).WORKLOADS)
        except ImportError as exc:
            print(f"({module}.py not loaded: {exc})")
    return out


def run_one(w: dict, repeat: int) -> dict:
    import torch
    fns = w["setup"]() if "setup" in w else w
    row = {k: v for k, v in w.items() if k not in ("setup", "run_cuopjit", "run_torch", "check")}
    row["started_unix"] = round(time.time(), 2)   # when it began: match against a clock log (nvidia-smi -lms)
    row.setdefault("min_bytes", row["bytes"])
    check = fns.get("check")
    if check is not None:
        row["rel_error_vs_torch"] = check()
    row["rotation"] = fns.get("rotation", 1)
    # alternating rounds (cuopjit, torch, torch, cuopjit, ...): clock drift within the run falls on both sides
    row["cuopjit"], row["torch"] = time_pair(fns["run_cuopjit"], fns["run_torch"], repeat=max(5, repeat // 3))
    del fns
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return row


def chart(rows: list[dict], copy_gbps: float, path: str) -> None:
    """cuopjit vs PyTorch GB/s per workload, with the copy bandwidth as a line."""
    ok = [r for r in rows if "cuopjit_gbps" in r]
    bar_chart(path, [f"{r['name']} {r['dtype'].replace('float', 'f')}" for r in ok], [r["cuopjit_gbps"] for r in ok],
              [r["torch_gbps"] for r in ok], "PyTorch", "GB/s (bytes read + written)", width=0.45,
              decorate=lambda ax, xs: ax.axhline(copy_gbps, color="k", ls="--", lw=1,
                                                 label=f"copy {copy_gbps:.0f} GB/s"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="run workloads whose name contains this (repeatable)")
    p.add_argument("--dtype", choices=["float32", "float64"])
    p.add_argument("--repeat", type=int, default=30, help="timed batches per side (in 4 alternating rounds)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "memory_bound.json"))
    p.add_argument("--no-chart", action="store_true")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/memory_bound.py")

    import torch
    workloads = [w for w in load_workloads()
                 if (not ns.only or any(o in w["name"] for o in ns.only)) and (not ns.dtype or w["dtype"] == ns.dtype)]
    copy = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, copy bandwidth {copy['gbps']:.0f} GB/s (torch copy_ of 1 GiB)")
    rows = []
    for w in workloads:
        try:
            r = run_one(w, ns.repeat)
        except Exception as exc:
            traceback.print_exc(limit=4)
            rows.append({"name": w["name"], "dtype": w["dtype"], "error": f"{type(exc).__name__}: {exc}"})
            print(f"{w['name']} {w['dtype']}: FAILED ({type(exc).__name__}: {exc})", flush=True)
            continue
        r["cuopjit_gbps"] = r["bytes"] / r["cuopjit"]["median_ms"] / 1e6
        r["torch_gbps"] = r["bytes"] / r["torch"]["median_ms"] / 1e6
        r["pct_copy"] = r["cuopjit_gbps"] / copy["gbps"]
        r["effective_gbps"] = r["min_bytes"] / r["cuopjit"]["median_ms"] / 1e6
        r["pct_copy_effective"] = r["effective_gbps"] / copy["gbps"]
        r["ratio_torch"] = r["cuopjit_gbps"] / r["torch_gbps"]
        if r["bytes"] < 256 * 10**6:   # short kernels: the copy at the same size, for reference
            r["copy_same_size_gbps"] = copy_bandwidth_at(r["bytes"], ns.repeat)
        r["goal_met"] = ((r.get("goal_torch") is None or r["ratio_torch"] >= r["goal_torch"])
                         and (r.get("goal_copy") is None or r["pct_copy_effective"] >= r["goal_copy"]))
        rows.append(r)
        print(f"{r['name']} {r['dtype']}: {r['cuopjit']['median_ms']:.4f} ms vs torch {r['torch']['median_ms']:.4f} ms"
              f" (rel err {r.get('rel_error_vs_torch') if r.get('rel_error_vs_torch') is not None else float('nan'):.1e})",
              flush=True)

    head = (f"{'workload':<34}{'dtype':<9}{'MB 1R1W':>9}{'MB min':>9}{'cuopjit GB/s':>14}{'torch GB/s':>12}"
            f"{'% copy':>8}{'eff GB/s':>10}{'% eff':>8}{'x torch':>9}{'copy@size':>10}  goal")
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<34}{r['dtype']:<9}  ERROR {r['error']}")
            continue
        print(f"{r['name']:<34}{r['dtype']:<9}{r['bytes'] / 1e6:>9.1f}{r['min_bytes'] / 1e6:>9.1f}"
              f"{r['cuopjit_gbps']:>14.0f}{r['torch_gbps']:>12.0f}{100 * r['pct_copy']:>7.1f}%"
              f"{r['effective_gbps']:>10.0f}{100 * r['pct_copy_effective']:>7.1f}%{r['ratio_torch']:>9.3f}"
              f"{r.get('copy_same_size_gbps', float('nan')):>10.0f}  "
              f"{'MET' if r['goal_met'] else 'missed'} ({r['goal']})")
    save_json(ns.out, {"device": torch.cuda.get_device_name(), "copy": copy, "workloads": rows}, gpu=True)
    if not ns.no_chart:
        chart(rows, copy["gbps"], os.path.splitext(ns.out)[0] + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
