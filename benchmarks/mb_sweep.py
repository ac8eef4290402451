"""Sweep the JITConfig knobs of issue 16's kernels against each other on one device, in one process.

    python benchmarks/mb_sweep.py [--only NAME ...] [--repeat N] [--json FILE]

For each workload (strided softmax, training BatchNorm, NCHW LayerNorm, window and global pools) it
times the default plan and a few tile_size / block_size / shared-memory variants through the same
RunSettings a JIT wrapper passes, and prints GB/s on the one-read-one-write bytes; what this table
shows is how the defaults in ops/ were chosen (benchmarks/NOTES.md, section 16).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, rotation, time_ms, to_cuopjit, torch_dtype  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

POOL = (32, 64, 56, 56)


def _cases() -> list[tuple]:
    """(name, dtype, shape, operator class name, constructor, forward kwargs, output shape, configs)."""
    tiles = [{}, {"tile_size": 8}, {"tile_size": 16}, {"tile_size": 32}]
    blocks = [{"block_size": 128}, {"block_size": 256}, {"block_size": 512}]
    out = [("softmax_axis1", "float32", (256, 1024, 256), "SoftmaxFloat", {}, {"axis": 1}, None,
            [{}, {"block_size": 1024}, {"block_size": 256}, {"tile_size": 16}, {"tile_size": 64}]),
           ("softmax_axis1", "float64", (256, 1024, 256), "SoftmaxDouble", {}, {"axis": 1}, None,
            [{}, {"tile_size": 16}, {"tile_size": 8, "block_size": 1024}, {"block_size": 256}]),
           ("softmax_axis1", "float32", (4096, 64, 512), "SoftmaxFloat", {}, {"axis": 1}, None,
            [{}, {"block_size": 1024}, {"block_size": 256}, {"tile_size": 16}]),
           ("bn_train", "float32", (32, 64, 224, 224), "BatchNormFloat", {}, {}, None,
            [{}, {"block_size": 512}, {"tile_size": 32}, {"block_size": 128}]),
           ("bn_train", "float32", (32, 64, 56, 56), "BatchNormFloat", {}, {}, None,
            [{}, {"block_size": 512}, {"tile_size": 32}]),
           ("bn_train", "float64", (32, 64, 56, 56), "BatchNormDouble", {}, {}, None, [{}, {"block_size": 512}]),
           ("ln_nchw", "float32", (32, 64, 224, 224), "LayerNormFloat", {}, {}, None,
            [{}, {"enable_shared_memory_opt": False}, {"block_size": 256}, {"tile_size": 16},
             {"_RESIDENT_SLACK": 0.0}, {"_RESIDENT_SLACK": 0.25}, {"_RESIDENT_SLACK": 1.0}])]
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
    from cuopjit.settings import DEFAULT, RunSettings
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
    if cls.startswith("LayerNorm"):
        op.set_gamma(to_cuopjit(torch.randn(shape[1], dtype=td, device="cuda")))
        op.set_beta(to_cuopjit(torch.randn(shape[1], dtype=td, device="cuda")))
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
    for case in _cases():
        if ns.only and not any(o in case[0] for o in ns.only):
            continue
        rows += run_case(case, ns.repeat)
    if ns.json:
        save_json(ns.json, {"copy": copy, "rows": rows}, gpu=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
