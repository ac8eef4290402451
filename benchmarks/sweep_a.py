"""Variant sweep behind the defaults of the streaming map, dot and pool kernels (issue 5 part A).

Times kernel variants that the operators' defaults do not expose (grid shape, cache hints, items
per thread, outputs per thread) on the benchmark's data, with mb_common.time_ms. Prints one line
per variant; writes JSON to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mb_common import GIB, rotation, time_ms  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="sweep_a.json")
    ns = p.parse_args()
    import numpy as np
    import torch
    import cuopjit
    from cuopjit import driver, kernels
    from cuopjit.launch import Launch
    from cuopjit.ops.base import scalar_t
    from cuopjit.ops.pool import Window, pool2d_kernel

    dev = driver.get_device()
    rows = []

    def launch(template, kernel, params, grid, block, args):
        spec = kernels.make_spec(template, kernel, "sweep_" + kernel, params)
        fn = kernels.get_function(spec, dev.ordinal, kernels.MEMORY_ONLY).function
        return Launch(fn, (grid, 1, 1), (block, 1, 1), 0, args)

    for dtype in ("float32", "float64"):
        td = getattr(torch, dtype)
        item = 4 if dtype == "float32" else 8
        vec = 16 // item
        n = GIB // item
        x = torch.randn(n, device="cuda", dtype=td)
        y = torch.randn(n, device="cuda", dtype=td)
        for op in ("copy", "axpy"):
            nbytes = (3 if op == "axpy" else 2) * GIB
            for threads, items, stream, gridmode in [(256, 4, True, "persist"), (256, 4, False, "persist"),
                                                     (256, 4, True, "full"), (256, 4, False, "full"),
                                                     (256, 2, False, "full"), (256, 8, False, "full"),
                                                     (256, 2, True, "full"), (256, 8, True, "persist"),
                                                     (512, 4, False, "persist"), (128, 4, False, "full"),
                                                     (256, 1, False, "full"), (512, 2, False, "full")]:
                params = {"scalar_t": scalar_t(np.dtype(dtype)), "unroll": True, "op": op, "simple": False,
                          "THREADS": threads, "VEC": vec, "ITEMS": items, "STREAM": stream}
                work = -(-n // (threads * vec * items))
                grid = work if gridmode == "full" else min(work, dev.sm_count * (2048 // threads))
                sc = "f32" if dtype == "float32" else "f64"
                lc = launch("elementwise.cu.jinja", "elementwise", params, grid, threads,
                            [("ptr", x.data_ptr()), ("ptr", y.data_ptr()), ("i64", n), (sc, 1e-3)])
                t = time_ms(lambda i: lc())
                r = {"op": op, "dtype": dtype, "threads": threads, "items": items, "stream": stream, "grid": gridmode,
                     "ms": t["median_ms"], "gbps": nbytes / t["median_ms"] / 1e6}
                rows.append(r)
                print(r, flush=True)
        del x, y
        torch.cuda.empty_cache()

        # window pools: outputs per thread and block size
        shape = (32, 64, 56, 56)
        nbytes_in = int(np.prod(shape)) * item
        k = rotation(nbytes_in * 5 // 4)
        xs = [torch.randn(shape, device="cuda", dtype=td) for _ in range(k)]
        ys = [torch.empty((32, 64, 28, 28), device="cuda", dtype=td) for _ in range(k)]
        cfg = cuopjit.JITConfig().snapshot()
        for op in ("max", "avg"):
            for opt, threads in [(vec, 256), (2 * vec, 256), (2 * vec, 128), (4 * vec, 128), (vec, 128), (vec, 512)]:
                if opt > 28:
                    continue
                template, _, params = pool2d_kernel(np.dtype(dtype), cfg, op, Window(2, 2, 2, 2, 0, 0), 56, 28,
                                                    True, True, False, opt=opt)
                params["THREADS"] = threads
                groups = -(-28 // opt)
                total = 32 * 64 * 28 * groups
                grid = -(-total // threads)
                ls = [launch(template, "pool2d", params, grid, threads,
                             [("ptr", xs[j].data_ptr()), ("ptr", ys[j].data_ptr()), ("i64", total), ("i32", 56),
                              ("i32", 56), ("i32", 28), ("i32", 28), ("i32", groups)]) for j in range(k)]
                t = time_ms(lambda i: ls[i % k]())
                r = {"op": op + "pool2d", "dtype": dtype, "opt": opt, "threads": threads, "ms": t["median_ms"],
                     "gbps": nbytes_in * 5 / 4 / t["median_ms"] / 1e6, "inner": t["inner"]}
                rows.append(r)
                print(r, flush=True)
        # global pools: threads per row, items, block
        ys = [torch.empty((32, 64), device="cuda", dtype=td) for _ in range(k)]
        for op in ("max", "avg"):
            for tpr, items, threads in [(128, 4, 256), (256, 4, 256), (64, 4, 256), (128, 2, 256), (256, 2, 256),
                                        (64, 8, 256), (128, 4, 128), (512, 2, 512)]:
                params = {"scalar_t": scalar_t(np.dtype(dtype)), "unroll": True, "op": op, "kernel": "global_pool",
                          "THREADS": threads, "VEC": vec, "TPR": tpr, "ITEMS": items, "VEC_G": vec}
                grid = -(-2048 // (threads // tpr))
                ls = [launch("pool.cu.jinja", "global_pool", params, grid, threads,
                             [("ptr", xs[j].data_ptr()), ("ptr", ys[j].data_ptr()), ("i64", 2048), ("i64", 3136)])
                      for j in range(k)]
                t = time_ms(lambda i: ls[i % k]())
                r = {"op": "global" + op, "dtype": dtype, "tpr": tpr, "items": items, "threads": threads,
                     "ms": t["median_ms"], "gbps": nbytes_in / t["median_ms"] / 1e6, "inner": t["inner"]}
                rows.append(r)
                print(r, flush=True)
        del xs, ys
        torch.cuda.empty_cache()
    with open(ns.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
