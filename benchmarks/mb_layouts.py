"""Memory-bound workloads of issue 25 (channels_last): BatchNorm (inference, training), ReLU, the 3x3/2 max pool,
global average pool and a ResNet block's tail (an elementwise program with per-channel scale/shift) on
32x256x56x56 channels_last, each beside its NCHW form, against PyTorch on the same layout; and the layout copies
(NCHW -> NHWC, NHWC -> NCHW) against torch's .contiguous(memory_format=...) (format: mb_common.py).

Names start with "nhwc_" or "nchw_" (`--only nhwc_`, `--only layout_`): the NCHW twin shows whether channels_last
runs at the speed of NCHW (the goal). "bytes" is each input read once and each output written once.
"""
from __future__ import annotations

import math

from mb_common import rotation, to_cuopjit, torch_dtype

SHAPE = (32, 256, 56, 56)
SAME = {"goal": ">= 0.95x PyTorch (same layout)", "goal_torch": 0.95, "goal_copy": None}
COPY = {"goal": ">= 85% of copy and >= PyTorch", "goal_torch": 1.0, "goal_copy": 0.85}


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def _workload(name: str, kind: str, nhwc: bool, nbytes: int, goal: dict, min_bytes: int | None = None) -> dict:
    def setup():
        import torch
        import torch.nn.functional as F
        import cuopjit
        fmt = torch.channels_last if nhwc else torch.contiguous_format
        td = torch_dtype("float32")
        k = rotation(nbytes)
        xs = [torch.randn(SHAPE, device="cuda", dtype=td).to(memory_format=fmt) for _ in range(k)]
        c = SHAPE[1]
        to = torch.contiguous_format if nhwc else torch.channels_last   # the layout copies' target
        if kind == "layout":   # NCHW -> NHWC (nhwc=False: x is NCHW) or NHWC -> NCHW
            ys = [torch.empty_like(x, memory_format=to) for x in xs]
            op = cuopjit.ops.layouts.RelayoutFloat()
            args = [(to_cuopjit(x), to_cuopjit(y)) for x, y in zip(xs, ys)]
            ref, tfn = (lambda x: x), (lambda x: x.contiguous(memory_format=to))
        elif kind in ("batchnorm", "batchnorm_train"):
            training = kind == "batchnorm_train"
            ys = [torch.empty_like(x) for x in xs]
            g, b = torch.randn(c, device="cuda"), torch.randn(c, device="cuda")
            m, v = torch.randn(c, device="cuda"), torch.rand(c, device="cuda") + 0.5
            tm, tv = m.clone(), v.clone()
            op = cuopjit.BatchNormFloat().train(training)
            for n, t in (("gamma", g), ("beta", b), ("running_mean", m), ("running_var", v)):
                getattr(op, "set_" + n)(to_cuopjit(t))
            args = [(to_cuopjit(x), to_cuopjit(y)) for x, y in zip(xs, ys)]
            m0, v0 = m.clone(), v.clone()

            def ref(x):
                return F.batch_norm(x.double(), m0.double(), v0.double(), g.double(), b.double(), training, 0.1, 1e-5)
            tfn = (lambda x: F.batch_norm(x, tm, tv, g, b, training, 0.1, 1e-5))
        elif kind == "relu":
            ys = [torch.empty_like(x) for x in xs]
            op, args = cuopjit.ReluFloat(), [(to_cuopjit(x), to_cuopjit(y)) for x, y in zip(xs, ys)]
            ref, tfn = torch.relu, (lambda x: torch.relu(x))
        elif kind == "maxpool":
            ys = [torch.empty(SHAPE[:2] + (28, 28), device="cuda").to(memory_format=fmt) for _ in xs]
            op, args = cuopjit.MaxPool2DFloat(3, 3, 2, 2, 1, 1), [(to_cuopjit(x), to_cuopjit(y)) for x, y in zip(xs, ys)]
            ref = tfn = (lambda x: F.max_pool2d(x, 3, 2, 1))
        elif kind == "globalavgpool":
            ys = [torch.empty(SHAPE[:2] + (1, 1), device="cuda") for _ in xs]
            op = cuopjit.GlobalAveragePool2DFloat()
            args = [(to_cuopjit(x), to_cuopjit(y)) for x, y in zip(xs, ys)]
            ref = tfn = (lambda x: F.adaptive_avg_pool2d(x, 1))
        elif kind == "tail":
            rs = [torch.randn(SHAPE, device="cuda").to(memory_format=fmt) for _ in xs]
            ys = [torch.empty_like(x) for x in xs]
            s, t = torch.randn(c, 1, 1, device="cuda"), torch.randn(c, 1, 1, device="cuda")
            prog = cuopjit.ElementwiseFloat("out = relu(x * scale + shift + r)")
            cs, ct = to_cuopjit(s), to_cuopjit(t)
            kw = [dict(x=to_cuopjit(x), scale=cs, shift=ct, r=to_cuopjit(r), out=to_cuopjit(y))
                  for x, r, y in zip(xs, rs, ys)]
            op, args = None, None
            ref = (lambda x: torch.relu(x.double() * s.double() + t.double() + rs[0].double()))
            tfn = (lambda x: torch.relu(torch.addcmul(t, x, s).add_(rs[0])))
        if kind == "tail":
            def run_c(i):
                prog.forward(**kw[i % k])
        else:
            def run_c(i):
                op.forward(*args[i % k])

        out_fmt = to if kind == "layout" else fmt

        def check():
            ys[0].fill_(float("nan"))
            run_c(0)
            assert ys[0].is_contiguous(memory_format=out_fmt), "the output left its layout"
            return _rel(ys[0], ref(xs[0]))
        return {"run_cuopjit": run_c, "run_torch": lambda i: tfn(xs[i % k]), "check": check, "rotation": k}

    row = {"name": name, "dtype": "float32", "shape": list(SHAPE), "bytes": nbytes, "setup": setup, **goal}
    if min_bytes:
        row["min_bytes"] = min_bytes
        row["min_note"] = "x (103 MB) > L2: the training apply reads it again"
    return row


def _workloads() -> list[dict]:
    n = math.prod(SHAPE) * 4
    out = []
    for nhwc in (True, False):
        tag = "nhwc" if nhwc else "nchw"
        out += [_workload(f"{tag}_batchnorm_32x256x56x56", "batchnorm", nhwc, 2 * n, SAME),
                _workload(f"{tag}_batchnorm_train_32x256x56x56", "batchnorm_train", nhwc, 2 * n, SAME, 3 * n),
                _workload(f"{tag}_relu_32x256x56x56", "relu", nhwc, 2 * n, SAME),
                _workload(f"{tag}_maxpool3x3s2_32x256x56x56", "maxpool", nhwc, n + n // 4, SAME),
                _workload(f"{tag}_globalavgpool_32x256x56x56", "globalavgpool", nhwc, n, SAME),
                _workload(f"{tag}_resnet_tail_32x256x56x56", "tail", nhwc, 3 * n, SAME)]
    out += [_workload("layout_nchw_to_nhwc_32x256x56x56", "layout", False, 2 * n, COPY),
            _workload("layout_nhwc_to_nchw_32x256x56x56", "layout", True, 2 * n, COPY)]
    return out


WORKLOADS = _workloads()
