"""Sweep of long-row layouts for the softmax / layernorm shapes under 2800 GB/s (issue 5B/5C):
the cluster kernel (the old default) against stream kernels (one block per row, the row read
twice: head stashed in shared memory, the rest re-read from L2) of several block sizes, blocks
per SM, vectors in flight, with and without the stash. PyTorch and the cluster kernel are timed
in the same run (the cluster twice: the spread is the noise). Prints a short table per shape;
`python benchmarks/sweep_norms.py [out.json]`. Results: benchmarks/NOTES.md, section 5C.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import time_ms, to_cuopjit  # noqa: E402

import cuopjit  # noqa: E402
from cuopjit.ops import norm as _norm, rows as _rows, softmax as _softmax  # noqa: E402

ORIGINAL = {"softmax": _softmax.plan_rows, "layernorm": _norm.plan_rows}
MODULES = {"softmax": _softmax, "layernorm": _norm}

# (threads, blocks per SM, vectors in flight, stash, cp.async stash) per row size in bytes.
# Run 1 (NOTES.md 5C) measured stash through registers and no stash; run 2 adds cp.async stashes.
STREAM_VARIANTS = {
    64 * 1024: [(256, 3, 4, True, False), (256, 3, 4, True, True), (512, 2, 2, True, True),
                (256, 4, 2, True, True)],
    128 * 1024: [(512, 2, 2, True, False), (512, 2, 2, True, True), (1024, 1, 2, True, True),
                 (512, 1, 4, True, True), (256, 4, 2, True, True)],
    256 * 1024: [(512, 1, 4, True, False), (512, 1, 4, True, True), (1024, 1, 2, True, True),
                 (512, 2, 2, True, True)],
}
SHAPES = [("layernorm", "float32", (4096, 32768)), ("softmax", "float64", (8192, 8192)),
          ("softmax", "float64", (4096, 32768)), ("layernorm", "float64", (4096, 32768)),
          ("softmax", "float32", (4096, 32768))]  # the last: control (met the goal with clusters)


def _force(op_name, plan):
    """Make the op's planner return `plan` (None: the old planner, clusters, no stream table)."""
    orig = ORIGINAL[op_name]
    if plan is None:
        MODULES[op_name].plan_rows = lambda *a, **kw: orig(*a, **{k: v for k, v in kw.items() if k != "stream"})
    elif plan == "default":
        MODULES[op_name].plan_rows = orig
    else:
        MODULES[op_name].plan_rows = lambda *a, **kw: plan


def sweep(op_name, dtype, shape, out):
    import torch
    td = torch.float32 if dtype == "float32" else torch.float64
    x = torch.randn(shape, dtype=td, device="cuda") * 3 + (1 if op_name == "layernorm" else 0)
    y = torch.empty_like(x)
    g = torch.randn(shape[-1], dtype=td, device="cuda")
    b = torch.randn(shape[-1], dtype=td, device="cuda")
    if op_name == "softmax":
        ref = torch.softmax(x.double(), -1)
        run_torch = lambda i: torch.softmax(x, -1)  # noqa: E731
    else:
        ref = torch.nn.functional.layer_norm(x.double(), shape[-1:], g.double(), b.double(), 1e-5)
        run_torch = lambda i: torch.nn.functional.layer_norm(x, shape[-1:], g, b, 1e-5)  # noqa: E731
    nbytes = 2 * x.numel() * x.element_size()
    cx, cy = to_cuopjit(x), to_cuopjit(y)
    vec = 16 // x.element_size()
    row_bytes = shape[-1] * x.element_size()
    variants = [("cluster (old)", None), ("default (new planner)", "default")]
    for threads, k, nv, stash, copy_async in STREAM_VARIANTS[row_bytes]:
        p = _rows.plan_stream(np.dtype(dtype), shape[-1] // vec, vec, threads, k, nv, stash=stash,
                              l2_per_sm=1 << 40, copy_async=copy_async)
        variants.append((f"stream t{threads} k{k} nv{nv} stash {p.stash_bytes(np.dtype(dtype)) // 1024} KB"
                         + (" cp.async" if copy_async else ""), p))
    variants.append(("cluster (old) again", None))
    res = []
    t_torch = time_ms(run_torch, 3, 20)
    for label, plan in variants:
        _force(op_name, plan)
        cls = getattr(cuopjit, ("Softmax" if op_name == "softmax" else "LayerNorm")
                      + ("Float" if dtype == "float32" else "Double"))
        op = cls()
        if op_name == "layernorm":
            op.set_gamma(to_cuopjit(g))
            op.set_beta(to_cuopjit(b))
        try:
            y.fill_(float("nan"))
            op.forward(cx, cy)
            err = float((y.double() - ref).norm() / ref.norm())
            t = time_ms(lambda i: op.forward(cx, cy), 3, 20)
        except Exception as exc:  # report and go on
            print(f"  {op_name} {dtype} {shape} {label}: {type(exc).__name__}: {exc}", flush=True)
            continue
        finally:
            _force(op_name, "default")
        info = op.last_kernel.info if op.last_kernel else None
        res.append({"variant": label, "kernel": op.last_kernel.spec.name if op.last_kernel else "?",
                    "gbps": nbytes / t["median_ms"] / 1e6, "min_ms": t["min_ms"], "max_ms": t["max_ms"],
                    "err": err, "registers": getattr(info, "registers", None),
                    "spill": getattr(info, "spill_bytes", None)})
    gb_t = nbytes / t_torch["median_ms"] / 1e6
    print(f"\n{op_name} {dtype} {shape}: torch {gb_t:.0f} GB/s", flush=True)
    for r in res:
        print(f"   {r['gbps']:6.0f}  {r['variant']:43s} {r['kernel']:38s} err {r['err']:.1e} "
              f"regs {r['registers']} spill {r['spill']}", flush=True)
    out.append({"op": op_name, "dtype": dtype, "shape": shape, "torch_gbps": gb_t, "variants": res})
    del x, y, cx, cy, ref
    torch.cuda.empty_cache()


def main():
    out = []
    for op_name, dtype, shape in SHAPES:
        sweep(op_name, dtype, shape, out)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
