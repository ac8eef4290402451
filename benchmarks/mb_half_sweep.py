"""Layout sweep of the 16-bit row kernels (issue 24): the float16 tables of cuopjit/ops/rows, each candidate timed on
the workloads it decides (float16, cuopjit alone, rotating buffers past L2) and checked against float64 torch.

    short_ept    rows.SHORT_EPT[2]: elements per thread of the short-row layout (rows of up to 256 threads)
    stream_sm    softmax.STREAM[2]: the stream-kernel table (max length, threads, blocks per SM, vectors in flight,
                 cp.async); () = no stream kernel (clusters)
    stream_ln    layernorm.LN_STREAM[2]: the same for LayerNorm
    strided      (softmax.STRIDED_TILE[2], softmax.STRIDED_BLOCK[2]): a non-last axis's defaults

    python benchmarks/mb_half_sweep.py [--json out.json]

Prints GB/s and % of the copy bandwidth per candidate and workload, and writes the best candidate per knob (the
highest geometric mean, the current value unless another beats it by more than 1%) with every measurement.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mb_common import copy_bandwidth, rotation, time_ms  # noqa: E402
from results_io import require_gpu  # noqa: E402

SHORT = [(32768, 768), (65536, 1024), (8192, 2048), (16384, 4096), (1048576, 128)]
LONG = [(4096, 32768), (2048, 20000), (1024, 24576)]
# 4 vectors of 8 in flight spill at 64 registers: 2 (32 bytes a thread, as float32's 2 vectors of 4)
STREAMS = [((32768, 1024, 1, 2, True),), ((32768, 512, 2, 2, True),), ((32768, 256, 4, 2, True),), ()]


def knobs():
    """name -> (candidates, setter, workloads (op, shape, axis)); the first candidate is the current value."""
    from cuopjit.ops.rows import common as rows, layernorm, softmax
    return {
        "short_ept": ([8, 16, 32], lambda v: rows.SHORT_EPT.__setitem__(2, v),
                      [(op, s, -1) for op in ("softmax", "layernorm") for s in SHORT]),
        "stream_sm": (STREAMS, lambda v: softmax.STREAM.__setitem__(2, v), [("softmax", s, -1) for s in LONG]),
        "stream_ln": (STREAMS, lambda v: layernorm.LN_STREAM.__setitem__(2, v), [("layernorm", s, -1) for s in LONG]),
        "strided": ([(32, 512), (32, 1024), (64, 512), (16, 512), (16, 1024)],
                    lambda v: (softmax.STRIDED_TILE.__setitem__(2, v[0]), softmax.STRIDED_BLOCK.__setitem__(2, v[1])),
                    [("softmax", shape, 1) for shape in ((256, 1024, 256), (4096, 64, 512), (64, 512, 1024))]),
    }


class Workload:
    """Rotating float16 buffers of one shape (x, y, gamma, beta) and its float64 reference."""

    def __init__(self, op: str, shape: tuple, axis: int):
        import torch
        import cuopjit
        self.op, self.shape, self.axis = op, shape, axis
        k = rotation(4 * math.prod(shape))
        self.xs = [(torch.randn(shape, device="cuda") * 2 + 1).half() for _ in range(k)]
        self.ys = [torch.empty_like(self.xs[0]) for _ in range(k)]
        self.g, self.b = torch.randn(shape[-1:], device="cuda").half(), torch.randn(shape[-1:], device="cuda").half()
        self.cx, self.cy = [cuopjit.tensor(t) for t in self.xs], [cuopjit.tensor(t) for t in self.ys]
        self.bytes = 4 * math.prod(shape) + (4 * shape[-1] if op == "layernorm" else 0)
        x = self.xs[0].double()
        self.ref = (torch.softmax(x, axis) if op == "softmax" else
                    torch.nn.functional.layer_norm(x, shape[-1:], self.g.double(), self.b.double(), 1e-5))

    def measure(self) -> dict:
        """A fresh operator (plans under the tables as they are now): GB/s, max error, the plan's choice."""
        import cuopjit
        if self.op == "softmax":
            op = cuopjit.SoftmaxHalf()
            run = (lambda i: op.forward(self.cx[i % len(self.cx)], self.cy[i % len(self.cy)], axis=self.axis))
        else:
            op = cuopjit.LayerNormHalf()
            op.set_gamma(cuopjit.tensor(self.g))
            op.set_beta(cuopjit.tensor(self.b))
            run = (lambda i: op.forward(self.cx[i % len(self.cx)], self.cy[i % len(self.cy)]))
        run(0)
        err = float((self.ys[0].double() - self.ref).abs().max())
        t = time_ms(run)
        choice = op.plan(self.cx[0], self.cy[0], **({"axis": self.axis} if self.op == "softmax" else {})).choice
        return {"gbps": self.bytes / t["median_ms"] / 1e6, "err": err, "choice": choice}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default="mb_half_sweep.json")
    ns = p.parse_args(argv)
    require_gpu("benchmarks/mb_half_sweep.py")
    import torch
    copy = copy_bandwidth()["gbps"]
    print(f"device copy: {copy:.0f} GB/s ({torch.cuda.get_device_name()})", flush=True)
    best, rows = {}, []
    for name, (candidates, setter, workloads) in knobs().items():
        loads = [Workload(*w) for w in workloads]
        means = []
        for cand in candidates:
            setter(cand)
            got = [w.measure() for w in loads]
            ok = all(g["err"] < 2e-2 for g in got)
            means.append(math.exp(sum(math.log(g["gbps"]) for g in got) / len(got)) if ok else 0.0)
            for w, g in zip(loads, got):
                rows.append({"knob": name, "candidate": cand, "op": w.op, "shape": w.shape, **g})
                print(f"{name:9s} {str(cand):28s} {w.op:9s} {str(w.shape):18s} {g['gbps']:6.0f} GB/s "
                      f"({100 * g['gbps'] / copy:5.1f}%)  err {g['err']:.1e}  {g['choice']}", flush=True)
            print(f"{name:9s} {str(cand):28s} geomean {means[-1]:6.0f} GB/s{'' if ok else '  WRONG RESULTS'}",
                  flush=True)
        pick = max(range(len(candidates)), key=lambda i: means[i])
        best[name] = candidates[pick] if means[pick] > 1.01 * means[0] else candidates[0]
        setter(candidates[0])
        loads.clear()
        torch.cuda.empty_cache()
    print("best:", json.dumps(best), flush=True)
    with open(ns.json, "w") as f:
        json.dump({"copy_gbps": copy, "best": best, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
