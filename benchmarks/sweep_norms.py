"""Sweep of row-kernel variants (block_size, tile_size, occupancy bound, float64 exp) for the
softmax / layernorm shapes that missed their goals in the first run. Prints the best per group.
Used once to pick the defaults in cuopjit/ops/rows.py (see benchmarks/NOTES.md, issue 5B)."""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import time_ms, to_cuopjit  # noqa: E402

import cuopjit  # noqa: E402
from cuopjit.ops import norm as _norm, rows as _rows, softmax as _softmax  # noqa: E402

OCC = {"value": None}


def _plan_rows(*args, **kwargs):
    plan = _rows.plan_rows(*args, **kwargs)
    return dataclasses.replace(plan, occ=OCC["value"]) if OCC["value"] else plan


_softmax.plan_rows = _plan_rows
_norm.plan_rows = _plan_rows


def config(block, tile, smem=True):
    cfg = cuopjit.JITConfig()
    cfg.block_size, cfg.tile_size, cfg.enable_shared_memory_opt = block, tile, smem
    return cfg.snapshot()


def sweep(op_name, dtype, shape, variants, out):
    import torch
    td = torch.float32 if dtype == "float32" else torch.float64
    x = torch.randn(shape, dtype=td, device="cuda") * 3
    y = torch.empty_like(x)
    g = torch.randn(shape[-1], dtype=td, device="cuda")
    b = torch.randn(shape[-1], dtype=td, device="cuda")
    if op_name == "softmax":
        ref = torch.softmax(x.double(), -1)
        t_torch = time_ms(lambda i: torch.softmax(x, -1), 3, 10)
    else:
        ref = torch.nn.functional.layer_norm(x.double(), shape[-1:], g.double(), b.double(), 1e-5)
        t_torch = time_ms(lambda i: torch.nn.functional.layer_norm(x, shape[-1:], g, b, 1e-5), 3, 10)
    nbytes = 2 * x.numel() * x.element_size()
    cx, cy = to_cuopjit(x), to_cuopjit(y)
    res = []
    for block, tile, occ, poly, smem in variants:
        OCC["value"] = occ
        cls = getattr(cuopjit, ("Softmax" if op_name == "softmax" else "LayerNorm")
                      + ("Float" if dtype == "float32" else "Double"))
        op = cls()
        if op_name == "softmax":
            op.exp_poly = poly
        else:
            op.set_gamma(to_cuopjit(g))
            op.set_beta(to_cuopjit(b))
        try:
            op._configure(config(block, tile, smem), None)
            op.forward(cx, cy)
            err = float((y.double() - ref).norm() / ref.norm())
            t = time_ms(lambda i: op.forward(cx, cy), 3, 10)
        except Exception as exc:
            print(f"  {op_name} {dtype} {shape} b{block} t{tile} occ{occ} poly{int(poly)}: {exc}")
            continue
        name = op.last_kernel.spec.name if op.last_kernel else "?"
        res.append({"block": block, "tile": tile, "occ": occ, "poly": poly, "smem": smem, "kernel": name,
                    "gbps": nbytes / t["median_ms"] / 1e6, "err": err})
    OCC["value"] = None
    gb_t = nbytes / t_torch["median_ms"] / 1e6
    res.sort(key=lambda r: -r["gbps"])
    print(f"{op_name} {dtype} {shape}: torch {gb_t:.0f} GB/s", flush=True)
    for r in res[:6]:
        print(f"   {r['gbps']:6.0f}  b{r['block']} t{r['tile']} occ{r['occ']} poly{int(r['poly'])} "
              f"smem{int(r['smem'])} {r['kernel']} err {r['err']:.1e}", flush=True)
    out.append({"op": op_name, "dtype": dtype, "shape": shape, "torch_gbps": gb_t, "variants": res})
    del x, y, cx, cy
    torch.cuda.empty_cache()


def main():
    out = []
    v_small = [(b, t, o, False, True) for b, t, o in itertools.product((128, 256, 512, 1024), (8, 16, 32),
                                                                       (None, 512))]
    sweep("softmax", "float32", (1048576, 128), v_small, out)
    v_long32 = [(b, t, o, False, True) for b, t, o in itertools.product((256, 512, 1024), (16, 32), (None, 512))]
    v_long32 += [(256, 32, None, False, False), (1024, 32, None, False, False)]
    sweep("layernorm", "float32", (4096, 32768), v_long32, out)
    v64 = [(b, t, o, p, True) for b, t, o, p in itertools.product((256, 512), (8, 16), (512, 1024),
                                                                   (False, True))]
    for shape in ((65536, 1024), (1048576, 128), (8192, 8192), (4096, 32768)):
        sweep("softmax", "float64", shape, v64, out)
    v64ln = [(b, t, o, False, True) for b, t, o in itertools.product((256, 512, 1024), (8, 16), (512, 1024))]
    for shape in ((8192, 8192), (4096, 32768)):
        sweep("layernorm", "float64", shape, v64ln, out)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
