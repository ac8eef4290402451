"""Memory-bound workloads of issues 5B and 16: Softmax (last and inner axes), LayerNorm (rows and cuOP's
NCHW form), BatchNorm (inference and training), float32 and float64.

Exports WORKLOADS in the format of mb_common.py (benchmarks/memory_bound.py runs them).
"bytes" counts x read once + y written once (+ gamma/beta, + 4 per-channel parameters); "min_bytes"
is what the algorithm must move at least (training BatchNorm of an x larger than L2 reads it twice).
Run alone (`python benchmarks/mb_norms.py [--only NAME] [--dtype float32] [--json out.json]`)
it times every workload against PyTorch in one process and prints a table.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, rotation, time_pair, to_cuopjit, torch_dtype  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

ROW_SHAPES = [(65536, 1024), (8192, 8192), (4096, 32768), (1048576, 128)]
GOAL = ">= 2800 GB/s and >= PyTorch"
GOAL_COPY = 2800 / 3005  # the 2800 GB/s goal over the ~3005 GB/s device copy


def _softmax(shape, dtype, axis=-1):
    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        x = torch.randn(shape, dtype=td, device="cuda") * 4
        y = torch.empty_like(x)
        cx, cy = to_cuopjit(x), to_cuopjit(y)
        op = (cuopjit.SoftmaxFloat if dtype == "float32" else cuopjit.SoftmaxDouble)()

        def check():
            op.forward(cx, cy, axis=axis)
            ref = torch.softmax(x.double(), dim=axis)
            return float((y.double() - ref).norm() / ref.norm())
        return dict(run_cuopjit=lambda i: op.forward(cx, cy, axis=axis),
                    run_torch=lambda i: torch.softmax(x, axis),
                    check=check)
    return setup


def _layernorm(shape, dtype, per_channel=False):
    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        x = torch.randn(shape, dtype=td, device="cuda") * 2 + 1
        y = torch.empty_like(x)
        norm = shape[1:] if per_channel else shape[-1:]
        gshape = shape[1:2] if per_channel else shape[-1:]
        g = torch.randn(gshape, dtype=td, device="cuda")
        b = torch.randn(gshape, dtype=td, device="cuda")
        cx, cy = to_cuopjit(x), to_cuopjit(y)
        op = (cuopjit.LayerNormFloat if dtype == "float32" else cuopjit.LayerNormDouble)()
        op.set_gamma(to_cuopjit(g))
        op.set_beta(to_cuopjit(b))
        if per_channel:
            cs = (1, shape[1]) + (1,) * (len(shape) - 2)
            gw, bw = g.reshape(cs), b.reshape(cs)
            run_torch = lambda i: torch.nn.functional.layer_norm(x, norm, eps=1e-5) * gw + bw  # noqa: E731
        else:
            run_torch = lambda i: torch.nn.functional.layer_norm(x, norm, g, b, 1e-5)  # noqa: E731

        def check():
            op.forward(cx, cy)
            ref = run_torch(0) if dtype == "float64" else torch.nn.functional.layer_norm(
                x.double(), norm, None if per_channel else g.double(), None if per_channel else b.double(), 1e-5)
            if per_channel and dtype == "float32":
                ref = ref * gw.double() + bw.double()
            return float((y.double() - ref.double()).norm() / ref.double().norm())
        return dict(run_cuopjit=lambda i: op.forward(cx, cy), run_torch=run_torch, check=check)
    return setup


def _batchnorm(shape, dtype, training=False):
    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        c = shape[1]
        k = rotation(2 * math.prod(shape) * (4 if dtype == "float32" else 8))
        xs = [torch.randn(shape, dtype=td, device="cuda") * 2 + 1 for _ in range(k)]
        ys = [torch.empty_like(xs[0]) for _ in range(k)]
        cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
        x, y, cx, cy = xs[0], ys[0], cxs[0], cys[0]
        g, b = torch.randn(c, dtype=td, device="cuda"), torch.randn(c, dtype=td, device="cuda")
        m, v = torch.randn(c, dtype=td, device="cuda"), torch.rand(c, dtype=td, device="cuda") + 0.5
        tm, tv = m.clone(), v.clone()
        op = (cuopjit.BatchNormFloat if dtype == "float32" else cuopjit.BatchNormDouble)()
        op.train(training)
        for name, t in (("gamma", g), ("beta", b), ("running_mean", m), ("running_var", v)):
            getattr(op, "set_" + name)(to_cuopjit(t))

        def run_torch(i):
            return torch.nn.functional.batch_norm(xs[i % k], tm, tv, g, b, training, 0.1, 1e-5)

        def check():
            y.fill_(float("nan"))
            m0, v0 = m.clone(), v.clone()
            op.forward(cx, cy)
            ref = torch.nn.functional.batch_norm(x.double(), m0.double(), v0.double(), g.double(), b.double(),
                                                 training, 0.1, 1e-5)
            return float((y.double() - ref).norm() / ref.norm())
        return dict(run_cuopjit=lambda i: op.forward(cxs[i % k], cys[i % k]), run_torch=run_torch, check=check,
                    rotation=k)
    return setup


def _workloads() -> list[dict]:
    out = []
    for dtype in ("float32", "float64"):
        size = 4 if dtype == "float32" else 8
        for shape in ROW_SHAPES:
            n = math.prod(shape)
            out.append({"name": f"softmax_{shape[0]}x{shape[1]}", "dtype": dtype, "shape": list(shape),
                        "bytes": 2 * n * size, "goal": GOAL, "goal_torch": 1.0, "goal_copy": GOAL_COPY,
                        "setup": _softmax(shape, dtype)})
            out.append({"name": f"layernorm_{shape[0]}x{shape[1]}", "dtype": dtype, "shape": list(shape),
                        "bytes": (2 * n + 2 * shape[1]) * size, "goal": GOAL, "goal_torch": 1.0,
                        "goal_copy": GOAL_COPY, "setup": _layernorm(shape, dtype)})
        bn = (32, 64, 224, 224)
        n = math.prod(bn)
        out.append({"name": "batchnorm_32x64x224x224", "dtype": dtype, "shape": list(bn),
                    "bytes": (2 * n + 4 * 64) * size, "goal": ">= 2800 GB/s", "goal_torch": None,
                    "goal_copy": GOAL_COPY, "setup": _batchnorm(bn, dtype)})
    # issue 16: every workload at >= 90% of copy, counting the bytes its algorithm must move ("min_bytes")
    one_pass = {"goal": ">= 90% of copy (min bytes)", "goal_torch": None, "goal_copy": 0.9}
    big = math.prod((32, 64, 224, 224))
    out.append({"name": "batchnorm_train_32x64x224x224", "dtype": "float32", "shape": [32, 64, 224, 224],
                "bytes": 2 * big * 4, "min_bytes": 3 * big * 4, "min_note": "x (411 MB) > L2: read twice",
                **one_pass, "setup": _batchnorm((32, 64, 224, 224), "float32", training=True)})
    small = math.prod((32, 64, 56, 56))
    for dtype, size in (("float32", 4), ("float64", 8)):
        out.append({"name": "batchnorm_train_32x64x56x56", "dtype": dtype, "shape": [32, 64, 56, 56],
                    "bytes": 2 * small * size, "min_bytes": 2 * small * size,
                    "min_note": "x fits in L2: the apply re-reads it from L2", **one_pass,
                    "setup": _batchnorm((32, 64, 56, 56), dtype, training=True)})
    out.append({"name": "softmax_axis1_256x1024x256", "dtype": "float32", "shape": [256, 1024, 256],
                "bytes": 2 * 256 * 1024 * 256 * 4, **one_pass, "setup": _softmax((256, 1024, 256), "float32", axis=1)})
    out.append({"name": "softmax_axis1_4096x64x512", "dtype": "float32", "shape": [4096, 64, 512],
                "bytes": 2 * 4096 * 64 * 512 * 4, **one_pass, "setup": _softmax((4096, 64, 512), "float32", axis=1)})
    out.append({"name": "softmax_axis1_256x1024x256", "dtype": "float64", "shape": [256, 1024, 256],
                "bytes": 2 * 256 * 1024 * 256 * 8, **one_pass, "setup": _softmax((256, 1024, 256), "float64", axis=1)})
    out.append({"name": "layernorm_cuop_nchw_32x64x224x224", "dtype": "float32", "shape": [32, 64, 224, 224],
                "bytes": 2 * big * 4, "min_note": "a 12.8 MB sample stays in L2 between its passes", **one_pass,
                "setup": _layernorm((32, 64, 224, 224), "float32", per_channel=True)})
    return out


WORKLOADS = _workloads()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", action="append", help="substring of a workload name (repeatable)")
    p.add_argument("--dtype", choices=["float32", "float64"])
    p.add_argument("--json", help="write the results here")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_norms.py")
    import torch
    copy = copy_bandwidth()
    print(f"device copy: {copy['gbps']:.0f} GB/s ({torch.cuda.get_device_name()})", flush=True)
    rows = []
    for w in WORKLOADS:
        if ns.only and not any(o in w["name"] for o in ns.only):
            continue
        if ns.dtype and w["dtype"] != ns.dtype:
            continue
        try:
            f = w["setup"]()
            err = f["check"]() if f.get("check") else None
            tc, tt = time_pair(f["run_cuopjit"], f["run_torch"])   # alternating rounds
            tc2 = {"median_ms": max(tc["rounds_ms"])}  # the slowest round: the spread is the noise
        except Exception as exc:  # report and go on
            import traceback
            traceback.print_exc()
            rows.append({"name": w["name"], "dtype": w["dtype"], "error": f"{type(exc).__name__}: {exc}"})
            print(f"{w['name']:36s} {w['dtype']:8s} ERROR {exc}", flush=True)
            continue
        finally:
            f = None
            torch.cuda.empty_cache()
        gb_c = w["bytes"] / tc["median_ms"] / 1e6
        gb_c2 = w["bytes"] / tc2["median_ms"] / 1e6
        gb_t = w["bytes"] / tt["median_ms"] / 1e6
        ok = (w["goal_copy"] is None or gb_c >= w["goal_copy"] * copy["gbps"]) and (
            w["goal_torch"] is None or gb_c >= w["goal_torch"] * gb_t)
        row = {"name": w["name"], "dtype": w["dtype"], "shape": w["shape"], "bytes": w["bytes"],
               "cuopjit_ms": tc["median_ms"], "cuopjit_gbps": gb_c, "cuopjit_gbps_repeat": gb_c2,
               "torch_ms": tt["median_ms"], "torch_gbps": gb_t, "ratio": gb_c / gb_t, "rel_err": err,
               "goal": w["goal"], "met": ok}
        rows.append(row)
        print(f"{w['name']:36s} {w['dtype']:8s} cuopjit {gb_c:7.0f} (slowest round {gb_c2:5.0f}) GB/s  "
              f"torch {gb_t:7.0f} GB/s  "
              f"x{gb_c / gb_t:5.2f}  err {err if err is None else f'{err:.1e}'}  {'ok' if ok else 'MISS'}",
              flush=True)
    if ns.json:
        save_json(ns.json, {"copy": copy, "rows": rows}, gpu=True)
    print("\n| workload | dtype | cuopjit GB/s | PyTorch GB/s | ratio | goal met |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | {r['dtype']} | ERROR | | | {r['error'][:60]} |")
        else:
            print(f"| {r['name']} | {r['dtype']} | {r['cuopjit_gbps']:.0f} | {r['torch_gbps']:.0f} | "
                  f"{r['ratio']:.2f} | {'yes' if r['met'] else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
