"""Sweep the JITConfig knobs of issue 16's kernels against each other on one device, in one process.

    python benchmarks/mb_sweep.py [--only NAME ...] [--repeat N] [--json FILE]

For each workload (strided softmax, training BatchNorm, NCHW LayerNorm, window and global pools) it
times the default plan and a few tile_size / block_size / shared-memory variants through the same
RunSettings a JIT wrapper passes, and prints GB/s on the one-read-one-write bytes; what this table
shows is how the defaults in ops/ were chosen (benchmarks/NOTES.md, section 16). A config key that
starts with "_" sets a module constant of the operator's family for that row (a fresh plan memo).
`--only gap` (or no --only) also times the strided softmax of memory_bound.py on both of its inputs
and allocation orders (softmax_gap); `--only history` times it after replaying memory_bound.py's
earlier workloads' allocations (softmax_after_history: the one cause of the gap NOTES.md 16 v2 left);
`--only scaling` times the f32 pools at 1, 4 and 16 times memory_bound.py's size beside a copy of the same
bytes and fits fixed cost + rate (pool_scaling: what keeps a ~10 us pool from the 1 GiB copy's rate).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, rotation, time_ms, time_pair, to_cuopjit, torch_dtype  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

POOL = (32, 64, 56, 56)


def _cases() -> list[tuple]:
    """(name, dtype, shape, operator class name, constructor, forward kwargs, output shape, configs)."""
    tiles = [{}, {"tile_size": 8}, {"tile_size": 16}, {"tile_size": 32}]
    blocks = [{"block_size": 128}, {"block_size": 256}, {"block_size": 512}]
    unfold = {"_FOLD_FINALIZE": False}             # batchnorm training: the finalize as its own kernel
    out = [("softmax_axis1", "float32", (256, 1024, 256), "SoftmaxFloat", {}, {"axis": 1}, None,
            [{}, {"tile_size": 64}, {"tile_size": 16}]),
           ("softmax_axis1", "float64", (256, 1024, 256), "SoftmaxDouble", {}, {"axis": 1}, None,
            [{}, {"tile_size": 16}, {"tile_size": 32}]),
           ("softmax_axis1", "float32", (4096, 64, 512), "SoftmaxFloat", {}, {"axis": 1}, None, [{}]),
           ("bn_train", "float32", (32, 64, 224, 224), "BatchNormFloat", {}, {}, None, [{}, unfold]),
           ("bn_train", "float32", (32, 64, 56, 56), "BatchNormFloat", {}, {}, None,
            [{}, unfold, {"block_size": 512}, {"tile_size": 8}]),
           ("bn_train", "float64", (32, 64, 56, 56), "BatchNormDouble", {}, {}, None, [{}, unfold]),
           # NCHW LayerNorm: the resident kernel (evict-last hint on or off, 256 threads), the two-kernel
           # split-row path, and the default again (drift within the run)
           ("ln_nchw", "float32", (32, 64, 224, 224), "LayerNormFloat", {}, {}, None,
            [{}, {"_RESIDENT_KEEP": False}, {"block_size": 256}, {"enable_shared_memory_opt": False}, {}]),
           # long rows: the stream kernel of one 1024-thread block per SM (default) or two of 512 (104 KB stashed)
           ("ln_rows", "float32", (4096, 32768), "LayerNormFloat", {}, {}, None,
            [{}, {"_LN_STREAM": {4: ((32768, 512, 2, 2, True),), 8: ((32768, 1024, 1, 2, True),)}}])]
    for dt in ("float32", "float64"):
        suffix = "Float" if dt == "float32" else "Double"
        for op in ("GlobalMaxPool2D", "GlobalAveragePool2D"):
            out.append((op, dt, POOL, op + suffix, {}, {}, POOL[:2], tiles + blocks
                        + [{"tile_size": 16, "block_size": 256}, {"tile_size": 32, "block_size": 512}]))
        out.append(("MaxPool2D", dt, POOL, "MaxPool2D" + suffix, {}, {}, (32, 64, 28, 28),
                    [{}, {"tile_size": 8}, {"tile_size": 16}] + blocks))
    return out


def run_case(case, repeat: int) -> list[dict]:
    import torch
    import cuopjit
    from cuopjit import target
    from cuopjit.config import DEFAULT, RunSettings
    name, dtype, shape, cls, ctor, kwargs, oshape, configs = case
    td = torch_dtype(dtype)
    nbytes = (math.prod(shape) + math.prod(oshape or shape)) * (4 if dtype == "float32" else 8)
    k = rotation(nbytes)
    xs = [torch.randn(shape, dtype=td, device="cuda") for _ in range(k)]
    ys = [torch.empty(oshape or shape, dtype=td, device="cuda") for _ in range(k)]
    cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
    op = getattr(cuopjit, cls)(**ctor)
    if cls.startswith("BatchNorm"):
        op.train()
    if cls.startswith("LayerNorm"):   # 2-D x: over the last axis; NCHW: cuOP's per-channel gamma of x.shape[1]
        op.set_gamma(to_cuopjit(torch.randn(shape[-1] if len(shape) == 2 else shape[1], dtype=td, device="cuda")))
        op.set_beta(to_cuopjit(torch.randn(shape[-1] if len(shape) == 2 else shape[1], dtype=td, device="cuda")))
    rows = []
    for fields in configs:
        cfg = cuopjit.JITConfig()
        module = sys.modules[type(op).__module__]
        saved = {}
        for key, value in fields.items():
            if key.startswith("_"):   # a module constant of the operator's family (a fresh plan memo)
                saved[key[1:]] = getattr(module, key[1:])
                setattr(module, key[1:], value)
                op._plans.clear()
                op._plans[DEFAULT] = op._default_plans = {}
            else:
                setattr(cfg, key, value)
        settings = RunSettings.of(cfg.snapshot())
        try:
            runs = [op.prepared(settings, 0, (cxs[i], cys[i]), kwargs)[:2] for i in range(k)]
            label = op.family.default_plan(op.problem(cxs[0], cys[0], **kwargs), settings.config,
                                           target.of_device(0)).choice
            t = time_ms(lambda i: runs[i % k][0](runs[i % k][1], 0), repeat=repeat)
        except Exception as exc:  # report and go on
            print(f"{name} {dtype} {shape} {fields}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        finally:
            for key, value in saved.items():
                setattr(module, key, value)
            if saved:
                op._plans.clear()
                op._plans[DEFAULT] = op._default_plans = {}
        gbps = nbytes / t["median_ms"] / 1e6
        rows.append({"name": name, "dtype": dtype, "shape": list(shape), "config": str(fields), "choice": label,
                     "ms": t["median_ms"], "gbps": gbps})
        print(f"{name:20s} {dtype:8s} {str(shape):22s} {str(fields):45s} {label:32s} {t['median_ms']:.4f} ms "
              f"{gbps:7.0f} GB/s", flush=True)
    del xs, ys, cxs, cys
    torch.cuda.empty_cache()
    return rows


def softmax_gap(repeat: int) -> list[dict]:
    """Why memory_bound.py's softmax axis-1 f32 row (x = 4 * randn; y allocated after x, reusing randn's
    block) read slower than this sweep's (x = randn, y allocated after it): the same plans timed on both
    inputs (scaled in place: same addresses), both allocation orders, and forward vs the runner; run it
    after memory_bound.py in the same device session to see the GPU's state (clocks) as that run leaves it."""
    import torch
    import cuopjit
    from cuopjit.config import DEFAULT
    shape, rows = (256, 1024, 256), []
    nbytes = 2 * math.prod(shape) * 4
    for order in ("sweep", "memory_bound"):
        if order == "sweep":
            x = torch.randn(shape, device="cuda")
            y = torch.empty(shape, device="cuda")
        else:
            x = torch.randn(shape, device="cuda") * 4
            y = torch.empty_like(x)
        cx, cy = to_cuopjit(x), to_cuopjit(y)
        current = 1.0 if order == "sweep" else 4.0
        for scale in (1.0, 4.0):
            x.mul_(scale / current)   # in place: the same addresses, the other input
            current = scale
            op = cuopjit.SoftmaxFloat()
            run, ptrs, _ = op.prepared(DEFAULT, 0, (cx, cy), {"axis": 1})
            t = time_ms(lambda i: run(ptrs, 0), repeat=repeat)
            rows.append({"order": order, "scale": scale, "path": "runner", "ms": t["median_ms"],
                         "gbps": nbytes / t["median_ms"] / 1e6, "x": x.data_ptr(), "y": y.data_ptr()})
            t = time_ms(lambda i: op.forward(cx, cy, axis=1), repeat=repeat)
            rows.append({"order": order, "scale": scale, "path": "forward", "ms": t["median_ms"],
                         "gbps": nbytes / t["median_ms"] / 1e6, "x": x.data_ptr(), "y": y.data_ptr()})
            for r in rows[-2:]:
                print(f"gap {r['order']:13s} x*{r['scale']:.0f} {r['path']:8s} {r['ms']:.4f} ms {r['gbps']:7.0f} GB/s "
                      f"(y - x = {(r['y'] - r['x']) / 2**20:+.0f} MiB, x % 2 MiB = {r['x'] % (1 << 21)})", flush=True)
        x = y = cx = cy = None
        torch.cuda.empty_cache()
    return rows


def softmax_after_history(repeat: int) -> list[dict]:
    """The strided softmax f32 of memory_bound.py timed after this process has replayed the setup and
    check (allocations, reference computations, frees) of every workload memory_bound.py runs before it,
    as that script's process has: if it slows to memory_bound's figure here, the history is the cause."""
    import torch
    import cuopjit
    from memory_bound import load_workloads
    for w in load_workloads():
        if w["name"].startswith("softmax_axis1"):
            break
        fns = w["setup"]() if "setup" in w else w
        if fns.get("check") is not None:
            fns["check"]()
        fns = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    shape = (256, 1024, 256)
    x = torch.randn(shape, device="cuda") * 4
    y = torch.empty_like(x)
    cx, cy = to_cuopjit(x), to_cuopjit(y)
    op = cuopjit.SoftmaxFloat()
    t = time_ms(lambda i: op.forward(cx, cy, axis=1), repeat=repeat)
    gbps = 2 * math.prod(shape) * 4 / t["median_ms"] / 1e6
    print(f"history softmax_axis1 f32 after memory_bound's earlier workloads: {t['median_ms']:.4f} ms "
          f"{gbps:7.0f} GB/s", flush=True)
    return [{"name": "softmax_after_history", "ms": t["median_ms"], "gbps": gbps}]


def pool_scaling(repeat: int) -> list[dict]:
    """Why the f32 pools of memory_bound.py (32 x 64 x 56 x 56, ~10 us a call) stay under 90% of the 1 GiB copy:
    the default plan at N = 32, 128 and 512 beside a torch copy of the same bytes, in alternating rounds
    (time_pair), then a fit time = fixed + bytes / rate over the sizes for both. A fixed cost of a few us with
    an asymptotic rate at the copy's means the kernel streams at the limit and the launch (gap, ramp, drain) is
    what is left; a low asymptotic rate means the kernel itself is short of it."""
    import torch
    import torch.nn.functional as F
    import cuopjit
    rows = []
    for cls, oshape in (("MaxPool2DFloat", lambda n: (n, 64, 28, 28)), ("GlobalAveragePool2DFloat", lambda n: (n, 64))):
        op, pts = getattr(cuopjit, cls)(), []
        for n in (32, 128, 512):
            shape = (n, 64, 56, 56)
            nbytes = (math.prod(shape) + math.prod(oshape(n))) * 4
            k = rotation(nbytes)
            xs = [torch.randn(shape, device="cuda") for _ in range(k)]
            ys = [torch.empty(oshape(n), device="cuda") for _ in range(k)]
            cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
            src = [torch.randn(nbytes // 8, device="cuda") for _ in range(k)]
            dst = [torch.empty_like(src[0]) for _ in range(k)]
            ys[0].fill_(float("nan"))
            op.forward(cxs[0], cys[0])
            ref = F.max_pool2d(xs[0], 2) if cls.startswith("Max") else xs[0].mean(dim=(2, 3))
            err = float((ys[0].double() - ref.double()).norm() / ref.double().norm())
            tp, tc = time_pair(lambda i: op.forward(cxs[i % k], cys[i % k]), lambda i: dst[i % k].copy_(src[i % k]),
                               repeat=max(5, repeat // 2))
            pts.append((nbytes, tp["median_ms"], tc["median_ms"]))
            rows.append({"name": "pool_scaling", "op": cls, "n": n, "bytes": nbytes, "ms": tp["median_ms"],
                         "copy_ms": tc["median_ms"], "gbps": nbytes / tp["median_ms"] / 1e6,
                         "copy_gbps": nbytes / tc["median_ms"] / 1e6, "rel_err": err})
            print(f"scaling {cls:26s} N={n:4d} {nbytes / 1e6:7.1f} MB  pool {tp['median_ms'] * 1e3:8.2f} us "
                  f"{rows[-1]['gbps']:6.0f} GB/s  copy {tc['median_ms'] * 1e3:8.2f} us {rows[-1]['copy_gbps']:6.0f} GB/s"
                  f"  err {err:.1e}", flush=True)
            for bufs in (xs, ys, cxs, cys, src, dst):
                bufs.clear()
            torch.cuda.empty_cache()
        for label, col in (("pool", 1), ("copy", 2)):   # least squares: ms = fixed + bytes / rate
            b = [p[0] for p in pts]
            t = [p[col] for p in pts]
            mb, mt = sum(b) / len(b), sum(t) / len(t)
            slope = sum((x - mb) * (y - mt) for x, y in zip(b, t)) / sum((x - mb) ** 2 for x in b)
            fixed = mt - slope * mb
            rows.append({"name": "pool_scaling_fit", "op": cls, "side": label, "fixed_us": fixed * 1e3,
                         "rate_gbps": 1 / slope / 1e6})
            print(f"fit     {cls:26s} {label}: fixed {fixed * 1e3:5.2f} us, rate {1 / slope / 1e6:6.0f} GB/s", flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="substring of a case name (repeatable)")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", help="write the results here")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_sweep.py")
    copy = copy_bandwidth()
    print(f"device copy: {copy['gbps']:.0f} GB/s", flush=True)
    rows = []
    if not ns.only or "gap" in ns.only:
        rows += [{"name": "softmax_gap", **r} for r in softmax_gap(ns.repeat)]
    if ns.only and "history" in ns.only:
        rows += softmax_after_history(ns.repeat)
    if ns.only and "scaling" in ns.only:
        rows += pool_scaling(ns.repeat)
    for case in _cases():
        if ns.only and not any(o in case[0] for o in ns.only):
            continue
        rows += run_case(case, ns.repeat)
    if ns.json:
        save_json(ns.json, {"copy": copy, "rows": rows}, gpu=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
