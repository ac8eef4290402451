"""BLAS beyond GEMM: GEMV, BatchMatMul, MatMul, SYMM, TRSM: cuopjit vs PyTorch (cuBLAS) in one run.

Rows (issue "The rest of cuOP's BLAS"): GEMV 8192² (GB/s, both trans, fp32 and fp64; the device copy
bandwidth measured in the same run), GEMV 1000² and 33 x 100000, BatchMatMul 100 x 256³ fp32 exact
(torch TF32 off) and on tensor cores (kernel_type="tensor_core" vs torch TF32 on), MatMul 4096³ next to
GemmFloat 4096³ (one code path), SYMM 4096² vs torch.matmul on the full symmetric matrix, TRSM 4096²
(left/right x lower/upper) vs torch.linalg.solve_triangular, TFLOP/s as m n d / t. Each timing is the
median of 40 event-timed calls after warm-up, cuopjit and torch alternating in four rounds
(benchmarks/mb_common.py `time_pair`); small GEMVs rotate buffer sets
so no call finds its matrix in L2. Every row also reports cuopjit's error against float64.

    python benchmarks/blas.py [--only gemv,bmm,matmul,symm,trsm] [--dtype float32|float64|both]
                              [--out benchmarks/results/blas.json]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import copy_bandwidth, rotation, time_ms, time_pair, to_cuopjit, torch_dtype  # noqa: E402
from results_io import require_gpu, save_json  # noqa: E402


def _cls(name: str, dtype: str):
    return getattr(cuopjit, name + ("Float" if dtype == "float32" else "Double"))


def _row(kind, dtype, shape, mine, theirs, work, unit, err, goal, **extra) -> dict:
    scale = 1e6 if unit == "GB/s" else 1e9
    row = {"workload": kind, "dtype": dtype, "shape": shape, "cuopjit_ms": mine["median_ms"],
           "torch_ms": theirs["median_ms"], "cuopjit": work / mine["median_ms"] / scale,
           "torch": work / theirs["median_ms"] / scale, "unit": unit, "ratio": theirs["median_ms"] / mine["median_ms"],
           "rel_error": err, "goal": goal,
           "rounds_ms": {"cuopjit": mine.get("rounds_ms"), "torch": theirs.get("rounds_ms")}, **extra}
    print(f"{kind:22s} {dtype:8s} {shape:18s} {row['cuopjit']:9.1f} {row['torch']:9.1f} {unit:8s} "
          f"{row['ratio']:6.2f}  err {err:.1e}  goal {goal}", flush=True)
    if "parts_ms" in extra:
        print(f"{'':22s} alone: " + ", ".join(f"{k} {v:.3f} ms" for k, v in extra["parts_ms"].items()), flush=True)
    return row


def _err(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


def gemv(dtype: str, m: int, n: int, trans: bool, goal: str) -> dict:
    import torch
    tdt = torch_dtype(dtype)
    nbytes = (m * n + m + n) * tdt.itemsize
    k = rotation(nbytes)
    a = [torch.randn(m, n, dtype=tdt, device="cuda") for _ in range(k)]
    x = [torch.randn(m if trans else n, dtype=tdt, device="cuda") for _ in range(k)]
    y = [torch.full((n if trans else m,), float("nan"), dtype=tdt, device="cuda") for _ in range(k)]
    ops = []
    for i in range(k):
        op = _cls("Gemv", dtype)(trans)
        op.set_weight(to_cuopjit(a[i]))
        ops.append((op, to_cuopjit(x[i]), to_cuopjit(y[i])))
    ops[0][0].forward(ops[0][1], ops[0][2])
    torch.cuda.synchronize()
    ref = (a[0].double().t() if trans else a[0].double()) @ x[0].double()
    err = _err(y[0], ref)
    mine, theirs = time_pair(lambda i: ops[i % k][0].forward(ops[i % k][1], ops[i % k][2]),
                             lambda i: torch.mv(a[i % k].t() if trans else a[i % k], x[i % k], out=y[i % k]))
    return _row("gemv" + (" T" if trans else " N"), dtype, f"{m}x{n}", mine, theirs, nbytes, "GB/s", err, goal)


def bmm(dtype: str, tensor_core: bool, tile: int = 0) -> dict:
    import torch
    tdt = torch_dtype(dtype)
    b, s = 100, 256
    a = torch.randn(b, s, s, dtype=tdt, device="cuda")
    w = torch.randn(b, s, s, dtype=tdt, device="cuda")
    c = torch.full((b, s, s), float("nan"), dtype=tdt, device="cuda")
    op = _cls("JITBatchMatMul", dtype)(_cls("BatchMatMul", dtype)())
    cfg = cuopjit.JITConfig()
    cfg.kernel_type = "tensor_core" if tensor_core else "auto"
    cfg.tile_size = tile
    op.set_jit_config(cfg)
    ca, cw, cc = to_cuopjit(a), to_cuopjit(w), to_cuopjit(c)
    op.forward(ca, cw, cc)
    torch.cuda.synchronize()
    err = _err(c, a.double() @ w.double())
    torch.backends.cuda.matmul.allow_tf32 = tensor_core
    mine, theirs = time_pair(lambda i: op.forward(ca, cw, cc), lambda i: torch.bmm(a, w, out=c))
    torch.backends.cuda.matmul.allow_tf32 = False
    name = op.get_performance_profile().kernel_name
    return _row("bmm" + (" tc" if tensor_core else " exact") + (f" tile {tile}" if tile else ""), dtype, "100x256^3",
                mine, theirs, 2.0 * b * s ** 3, "TFLOP/s", err, "info" if tile else ">= 1.0x torch.bmm", kernel=name,
                launches=1)


def matmul(dtype: str) -> list[dict]:
    import torch
    tdt = torch_dtype(dtype)
    s = 4096
    a = torch.randn(s, s, dtype=tdt, device="cuda")
    w = torch.randn(s, s, dtype=tdt, device="cuda")
    c = torch.full((s, s), float("nan"), dtype=tdt, device="cuda")
    ca, cw, cc = to_cuopjit(a), to_cuopjit(w), to_cuopjit(c)
    mm = _cls("MatMul", dtype)()
    gemm = _cls("Gemm", dtype)()
    gemm.set_weight(cw)
    mm.forward(ca, cw, cc)
    torch.cuda.synchronize()
    err = _err(c, a.double() @ w.double())
    mine, theirs = time_pair(lambda i: mm.forward(ca, cw, cc), lambda i: torch.matmul(a, w, out=c))
    ref_gemm = time_ms(lambda i: gemm.forward(ca, cc))
    same = mm.plan(ca, cw, cc) == gemm.plan(ca, cc)
    rows = [_row("matmul", dtype, "4096^3", mine, theirs, 2.0 * s ** 3, "TFLOP/s", err, "same as GemmFloat",
                 gemm_ms=ref_gemm["median_ms"], same_plan_as_gemm=same)]
    print(f"{'':22s} GemmFloat/Double {2.0 * s ** 3 / ref_gemm['median_ms'] / 1e9:.1f} TFLOP/s; same plan: {same}")
    return rows


def symm(dtype: str, side: int, uplo: int) -> dict:
    import torch
    tdt = torch_dtype(dtype)
    s = 4096
    full = torch.randn(s, s, dtype=tdt, device="cuda")
    full = full + full.t()
    stored = full.triu() if uplo else full.tril()
    b = torch.randn(s, s, dtype=tdt, device="cuda")
    c = torch.full((s, s), float("nan"), dtype=tdt, device="cuda")
    op = _cls("Symm", dtype)(side, uplo)
    op.set_weight(to_cuopjit(stored))
    cb, cc = to_cuopjit(b), to_cuopjit(c)
    op.forward(cb, cc)
    torch.cuda.synchronize()
    ref = b.double() @ full.double() if side else full.double() @ b.double()
    err = _err(c, ref)
    mine, theirs = time_pair(lambda i: op.forward(cb, cc),
                             lambda i: torch.matmul(b, full, out=c) if side else torch.matmul(full, b, out=c))
    mode = ("R" if side else "L") + ("U" if uplo else "L")
    parts = _parts(op.plan(cb, cc), op.bind(cb, cc)[1])
    return _row(f"symm {mode}", dtype, "4096^2", mine, theirs, 2.0 * s ** 3, "TFLOP/s", err,
                ">= 1.0x torch.matmul", parts_ms=parts)


def trsm(dtype: str, side: int, uplo: int) -> dict:
    import torch
    tdt = torch_dtype(dtype)
    s = 4096
    t = torch.rand(s, s, dtype=tdt, device="cuda").sub_(0.5).mul_(2.0 / s)
    t = (t.triu(1) if uplo else t.tril(-1)) + torch.diag(1 + torch.rand(s, dtype=tdt, device="cuda"))
    b = torch.randn(s, s, dtype=tdt, device="cuda")
    x = torch.full((s, s), float("nan"), dtype=tdt, device="cuda")
    op = _cls("Trsm", dtype)(side, uplo, 0, 0, 1.0)
    op.set_matrix_a(to_cuopjit(t))
    cb, cx = to_cuopjit(b), to_cuopjit(x)
    op.forward(cb, cx)
    torch.cuda.synchronize()
    t64 = t.double()
    resid = (x.double() @ t64 if side else t64 @ x.double()) - b.double()
    err = (resid.norm() / b.double().norm()).item()
    plan = op.plan(cb, cx)
    mine, theirs = time_pair(lambda i: op.forward(cb, cx),
                             lambda i: torch.linalg.solve_triangular(t, b, upper=bool(uplo), left=not side, out=x))
    pointers = op.bind(cb, cx)[1]
    parts = _parts(plan, pointers, by_grid=True)
    mode = ("R" if side else "L") + ("U" if uplo else "L")
    choices = _trsm_choices(op, cb, cx, pointers)
    print(f"{'':22s} gemm total {sum(v for k, v in parts.items() if k.startswith('gemm')):.3f} ms; every choice: "
          + ", ".join(f"{k} {v:.3f} ms" for k, v in choices.items()), flush=True)
    return _row(f"trsm {mode}", dtype, "4096^2", mine, theirs, float(s) ** 3, "TFLOP/s", err,
                ">= 1.0x solve_triangular", launches=len(plan.launches), error_kind="residual", parts_ms=parts,
                choices_ms=choices)


def _trsm_choices(op, b, x, pointers) -> dict:
    """Milliseconds of the plan of every choice the TRSM family offers (what auto-tuning would time)."""
    from cuopjit.device import driver
    from cuopjit.run import executor
    from cuopjit.ops.gemm import trsm as family
    from cuopjit.config import DEFAULT
    from cuopjit.target import of_device
    problem, target = op.problem(b, x), of_device(driver.current_ordinal())
    out = {}
    for choice in family.choices(problem, DEFAULT.config, target):
        run = executor.load(family.plan(problem, choice, target), driver.current_ordinal(), DEFAULT)
        out[choice.label] = round(time_ms(lambda i: run(pointers, 0))["median_ms"], 4)
    return out


def _parts(plan, pointers, by_grid: bool = False) -> dict:
    """Milliseconds of a plan's launches of each kernel kind run alone (where a multi-launch plan's time goes);
    `by_grid`: GEMM launches grouped by grid too (TRSM: one group per level of the recursion)."""
    from cuopjit.run import executor
    from cuopjit.run.plan import Plan
    from cuopjit.config import DEFAULT

    def key(kl) -> str:
        return kl.spec.kernel + (f" {kl.grid[0]}x{kl.grid[1]}" if by_grid and kl.spec.kernel == "gemm" else "")

    out = {}
    for kind in dict.fromkeys(key(kl) for kl in plan.launches):
        sub = Plan(tuple(kl for kl in plan.launches if key(kl) == kind), plan.operands, plan.workspace)
        run = executor.load(sub, 0, DEFAULT)
        out[f"{kind} x{len(sub.launches)}"] = round(time_ms(lambda i: run(pointers, 0))["median_ms"], 4)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="gemv,bmm,matmul,symm,trsm")
    p.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    p.add_argument("--out", default="benchmarks/results/blas.json")
    args = p.parse_args()
    require_gpu("benchmarks/blas.py")
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    only = set(args.only.split(","))
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    copy = copy_bandwidth()
    print(f"device copy bandwidth: {copy['gbps']:.0f} GB/s")
    rows = []
    for dtype in dtypes:
        if "gemv" in only:
            for trans in (False, True):
                rows.append(gemv(dtype, 8192, 8192, trans, ">= 2800 GB/s"))
                rows.append(gemv(dtype, 1000, 1000, trans, ">= 1.0x torch"))
                rows.append(gemv(dtype, 33, 100000, trans, ">= 1.0x torch"))
        if "bmm" in only and dtype == "float32":
            rows += [bmm(dtype, False), bmm(dtype, True), bmm(dtype, False, 64), bmm(dtype, False, 32)]
        if "matmul" in only:
            rows += matmul(dtype)
        if "symm" in only:
            rows += [symm(dtype, side, uplo) for side in (0, 1) for uplo in (0, 1)]
        if "trsm" in only:
            rows += [trsm(dtype, side, uplo) for side in (0, 1) for uplo in (0, 1)]
        torch.cuda.empty_cache()
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "copy_gbps": copy["gbps"], "rows": rows}, gpu=True)


if __name__ == "__main__":
    main()
