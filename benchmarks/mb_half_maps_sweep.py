"""Kernel-shape sweep of the 16-bit memory-bound kernels on ResNet's 32 x 256 x 56 x 56 activation (issue 24): each
candidate JITConfig of ReLU, the elementwise block tail, BatchNorm inference, max pool 3x3/2 (padding 1) and global
average pool, NCHW and channels_last, timed in float16 (cuopjit alone, rotating buffers past L2) as a percentage of
the device's copy bandwidth. The first candidate of each is the default; the defaults of the 16-bit families were
chosen from this table (benchmarks/NOTES.md).

    python benchmarks/mb_half_maps_sweep.py [--json benchmarks/results/mb_half_maps_sweep.json]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, rotation, time_ms, to_cuopjit  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402

ACT = (32, 256, 56, 56)
DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "mb_half_maps_sweep.json")
# (op, layouts, candidate JITConfig fields; {} = the default)
CANDIDATES = [
    ("relu", ("nchw",), [{}, {"tile_size": 32}, {"tile_size": 64}, {"tile_size": 32, "block_size": 512}]),
    ("tail", ("nchw", "nhwc"), [{}, {"tile_size": 32}, {"tile_size": 64}]),
    ("bn", ("nchw", "nhwc"), [{}, {"tile_size": 16}, {"tile_size": 64}, {"block_size": 512}, {"block_size": 128}]),
    ("maxpool", ("nchw", "nhwc"), [{}, {"enable_memory_coalescing": False}, {"block_size": 128}, {"block_size": 512}]),
    ("gap", ("nchw", "nhwc"), [{}, {"tile_size": 16}, {"tile_size": 32}, {"tile_size": 64}, {"block_size": 512}]),
]


def _setup(op: str, lay: str):
    """(operator, operands(i) -> (args, kwargs) of call i, bytes of one call) on rotating float16 buffers."""
    import torch
    import cuopjit
    n, c = math.prod(ACT), ACT[1]
    out = {"maxpool": (32, c, 28, 28), "gap": (32, c, 1, 1)}.get(op, ACT)
    nbytes = 2 * (n * (2 if op == "tail" else 1) + math.prod(out))
    k = rotation(nbytes)
    fmt = torch.channels_last if lay == "nhwc" else torch.contiguous_format
    make = (lambda shape: torch.randn(shape, device="cuda").half().contiguous(memory_format=fmt))
    xs = [to_cuopjit(make(ACT)) for _ in range(k)]
    rs = [to_cuopjit(make(ACT)) for _ in range(k)] if op == "tail" else xs
    ys = [to_cuopjit(make(out) if op != "gap" else torch.empty(out, device="cuda").half()) for _ in range(k)]
    vec = (lambda: to_cuopjit(torch.randn(c, 1, 1, device="cuda").half()))
    if op == "relu":
        o = cuopjit.ReluHalf()
        return o, (lambda i: ((xs[i % k], ys[i % k]), {})), nbytes
    if op == "tail":
        o, s, b = cuopjit.ElementwiseHalf("out = relu(x * scale + shift + r)"), vec(), vec()
        return o, (lambda i: ((), dict(x=xs[i % k], scale=s, shift=b, r=rs[i % k], out=ys[i % k]))), nbytes
    if op == "bn":
        o = cuopjit.BatchNormHalf()
    elif op == "maxpool":
        o = cuopjit.MaxPool2DHalf(3, 3, 2, 2, 1, 1)
    else:
        o = cuopjit.GlobalAveragePool2DHalf()
    return o, (lambda i: ((xs[i % k], ys[i % k]), {})), nbytes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=DEFAULT_JSON)
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_half_maps_sweep.py")
    import torch
    import cuopjit
    from cuopjit import target
    from cuopjit.build import pipeline
    tgt = target.of_device(0)
    runs, specs = [], set()
    for op, lays, fields_list in CANDIDATES:
        for lay in lays:
            o, operands, nbytes = _setup(op, lay)
            args, kwargs = operands(0)
            problem = o.problem(*args, **kwargs)
            for fields in fields_list:
                jit = cuopjit.JITWrapper(o)
                cfg = cuopjit.JITConfig()
                for key, value in fields.items():
                    setattr(cfg, key, value)
                jit.set_jit_config(cfg)
                specs.update(o.family.default_plan(problem, cfg.snapshot(), tgt).specs)
                runs.append((op, lay, fields, (lambda i, f=jit.forward, ops=operands: f(*ops(i)[0], **ops(i)[1])),
                             nbytes))
    with ThreadPoolExecutor(16) as pool:          # every candidate's kernels compiled first, in parallel
        list(pool.map(lambda spec: pipeline.build(spec, tgt.arch), specs))
    copy = copy_bandwidth()
    print(f"device copy: {copy['gbps']:.0f} GB/s ({torch.cuda.get_device_name()})", flush=True)
    rows = []
    for op, lay, fields, fn, nbytes in runs:
        t = time_ms(fn)
        gbps = nbytes / t["median_ms"] / 1e6
        rows.append({"op": op, "layout": lay, "fields": fields, "ms": t["median_ms"], "gbps": gbps,
                     "copy_fraction": gbps / copy["gbps"]})
        print(f"{op:8s} {lay:5s} {str(fields):55s} {t['median_ms'] * 1e3:7.1f} us {gbps:6.0f} GB/s "
              f"({100 * gbps / copy['gbps']:5.1f}% of copy)", flush=True)
    save_json(ns.json, {"device": torch.cuda.get_device_name(), "copy": copy, "rows": rows}, gpu=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
