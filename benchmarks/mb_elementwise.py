"""Memory-bound workloads of issue 5 part A: BLAS-1, ReLU and pools (format: mb_common.py)."""
from __future__ import annotations

from mb_common import GIB, rotation, to_cuopjit, torch_dtype

STREAM_GOAL = {"goal": ">= 0.97x PyTorch and >= 93% of copy", "goal_torch": 0.97, "goal_copy": 0.93}
POOL_GOAL = {"goal": ">= 1.2x PyTorch and >= 90% of copy", "goal_torch": 1.2, "goal_copy": 0.9}
POOL_SHAPE = (32, 64, 56, 56)
ITEMSIZE = {"float32": 4, "float64": 8}


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def _streaming(name: str, dtype: str):
    """A 1 GiB-per-operand workload for one of the BLAS-1 / ReLU ops."""
    n = GIB // ITEMSIZE[dtype]
    arrays = 3 if name == "axpy" else 2
    nbytes = {"copy": 2, "scal": 2, "axpy": 3, "relu": 2, "dot": 2}[name] * GIB

    def setup():
        import torch
        import cuopjit
        td = torch_dtype(dtype)
        x = torch.randn(n, device="cuda", dtype=td)
        y = torch.randn(n, device="cuda", dtype=td)
        cx, cy = to_cuopjit(x), to_cuopjit(y)
        suffix = "Float" if dtype == "float32" else "Double"
        if name == "copy":
            op = getattr(cuopjit, "Copy" + suffix)()
            run_c, run_t = (lambda i: op.forward(cx, cy)), (lambda i: y.copy_(x))

            def check():
                y.fill_(float("nan"))
                op.forward(cx, cy)
                return _rel(y, x)
        elif name == "scal":
            op = getattr(cuopjit, "Scal" + suffix)(1.0)
            run_c, run_t = (lambda i: op.forward(cx)), (lambda i: x.mul_(1.0))

            def check():  # alpha 1 would pass untouched data: check with 0.5, then restore x
                x0 = x.clone()
                getattr(cuopjit, "Scal" + suffix)(0.5).forward(cx)
                err = _rel(x, 0.5 * x0)
                x.copy_(x0)
                return err
        elif name == "axpy":
            op = getattr(cuopjit, "Axpy" + suffix)(1e-3)
            run_c, run_t = (lambda i: op.forward(cx, cy)), (lambda i: y.add_(x, alpha=1e-3))

            def check():
                y0 = y.clone()
                op.forward(cx, cy)
                err = _rel(y, y0 + 1e-3 * x)
                y.copy_(y0)
                return err
        elif name == "relu":
            op = getattr(cuopjit, "Relu" + suffix)()
            run_c, run_t = (lambda i: op.forward(cx, cy)), (lambda i: torch.clamp_min(x, 0.0, out=y))

            def check():
                y.fill_(float("nan"))
                op.forward(cx, cy)
                return _rel(y, torch.relu(x))
        else:  # dot: cuopjit writes the sum to a device scalar, as torch.dot does (no host sync)
            op = getattr(cuopjit, "Dot" + suffix)()
            r = torch.empty(1, device="cuda", dtype=td)
            cr = to_cuopjit(r)
            run_c, run_t = (lambda i: op.forward(cx, cy, result=cr)), (lambda i: torch.dot(x, y))

            def check():
                op.forward(cx, cy, result=cr)
                ref = torch.dot(x.double(), y.double())
                return float((r.double() - ref).abs() / (x.double() * y.double()).abs().sum())
        return {"run_cuopjit": run_c, "run_torch": run_t, "check": check}

    return {"name": name, "dtype": dtype, "shape": [n] * (arrays - 1 if name != "scal" else 1), "bytes": nbytes,
            "setup": setup, **STREAM_GOAL}


def _pool(name: str, dtype: str):
    """2x2 max/avg pools and global pools on 32x64x56x56, rotating among buffer sets (input ~26 MB)."""
    itemsize = ITEMSIZE[dtype]
    numel = 1
    for d in POOL_SHAPE:
        numel *= d
    out_numel = numel // 4 if name in ("maxpool2d", "avgpool2d") else POOL_SHAPE[0] * POOL_SHAPE[1]
    nbytes = (numel + out_numel) * itemsize

    def setup():
        import torch
        import torch.nn.functional as F
        import cuopjit
        td = torch_dtype(dtype)
        k = rotation(nbytes)
        xs = [torch.randn(POOL_SHAPE, device="cuda", dtype=td) for _ in range(k)]
        oshape = (POOL_SHAPE[0], POOL_SHAPE[1]) + ((28, 28) if name in ("maxpool2d", "avgpool2d") else (1, 1))
        ys = [torch.empty(oshape, device="cuda", dtype=td) for _ in range(k)]
        cxs, cys = [to_cuopjit(t) for t in xs], [to_cuopjit(t) for t in ys]
        suffix = "Float" if dtype == "float32" else "Double"
        cls, tfn = {"maxpool2d": ("MaxPool2D", lambda t: F.max_pool2d(t, 2)),
                    "avgpool2d": ("AveragePool2D", lambda t: F.avg_pool2d(t, 2)),
                    # amax, not adaptive_max_pool2d(t, 1), which runs at ~65 GB/s: the fastest PyTorch idiom
                    "globalmaxpool2d": ("GlobalMaxPool2D", lambda t: t.amax(dim=(2, 3), keepdim=True)),
                    "globalavgpool2d": ("GlobalAveragePool2D", lambda t: F.adaptive_avg_pool2d(t, 1))}[name]
        op = getattr(cuopjit, cls + suffix)()

        def check():
            ys[0].fill_(float("nan"))
            op.forward(cxs[0], cys[0])
            return _rel(ys[0], tfn(xs[0]))

        return {"run_cuopjit": lambda i: op.forward(cxs[i % k], cys[i % k]),
                "run_torch": lambda i: tfn(xs[i % k]), "check": check, "rotation": k}

    return {"name": name, "dtype": dtype, "shape": list(POOL_SHAPE), "bytes": nbytes, "setup": setup, **POOL_GOAL}


WORKLOADS = [_streaming(name, dt) for dt in ("float32", "float64") for name in ("scal", "copy", "axpy", "relu", "dot")]
WORKLOADS += [_pool(name, dt) for dt in ("float32", "float64")
              for name in ("maxpool2d", "avgpool2d", "globalmaxpool2d", "globalavgpool2d")]
