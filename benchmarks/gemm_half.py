"""float16 / bfloat16 GEMM: cuopjit (wgmma f16 / bf16 on the H100) vs torch.matmul (cuBLAS) in the same run (JSON + PNG).

Workloads (issue 24, goal >= 1.0x cuBLAS each): 4096³ and 8192³ A @ B; a BERT-base layer at 8 x 512 tokens, the
products `x @ W^T` (GemmHalf(trans_b=True) on W as nn.Linear stores it, N x K) 4096 x 2304 x 768 (QKV),
4096 x 3072 x 768 and 4096 x 768 x 3072 (the FFN); the attention products over 96 heads [96, 512, 64] @ [96, 64, 512]
and [96, 512, 512] @ [96, 512, 64] (BatchMatMulHalf). Each timing is the median of 40 calls between CUDA events after
warm-up, cuopjit and torch alternating in four rounds (benchmarks/mb_common.py `time_pair`); errors are
||out - ref|| / ||ref|| against a float64 product of the 16-bit inputs, for both libraries. Every kernel is compiled
first, 16 at a time.

    python benchmarks/gemm_half.py [--dtypes float16,bfloat16] [--only qkv] [--out benchmarks/results/gemm_half.json]
    python benchmarks/gemm_half.py --sweep [--only qkv]     (every wgmma build of each case, planned directly)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from mb_common import time_ms, time_pair, to_cuopjit  # noqa: E402
from results_io import bar_chart, require_gpu, save_json  # noqa: E402

# name, kind, batch, m, n, k: "nn" A[m, k] @ B[k, n]; "linear" x[m, k] @ W[n, k]^T; "bmm" A[b, m, k] @ B[b, k, n]
CASES = [("sq4096", "nn", 1, 4096, 4096, 4096), ("sq8192", "nn", 1, 8192, 8192, 8192),
         ("qkv", "linear", 1, 4096, 2304, 768), ("ffn1", "linear", 1, 4096, 3072, 768),
         ("ffn2", "linear", 1, 4096, 768, 3072), ("scores", "bmm", 96, 512, 512, 64),
         ("context", "bmm", 96, 512, 64, 512)]
NAMES = {"float16": "Half", "bfloat16": "BFloat16"}


def operands(kind: str, batch: int, m: int, n: int, k: int, dtype: str):
    """(A, B as cuopjit reads it, B as torch multiplies it, the operator, its JIT wrapper)."""
    import torch
    dt, name = getattr(torch, dtype), NAMES[dtype]
    if kind == "bmm":
        a = torch.randn(batch, m, k, device="cuda").to(dt)
        b = (torch.randn(batch, k, n, device="cuda") / math.sqrt(k)).to(dt)
        op = getattr(cuopjit, "BatchMatMul" + name)()
        return a, b, b, op, getattr(cuopjit, "JITBatchMatMul" + name)(op)
    a = torch.randn(m, k, device="cuda").to(dt)
    w = (torch.randn(n, k, device="cuda") if kind == "linear" else torch.randn(k, n, device="cuda")) / math.sqrt(k)
    w = w.to(dt)
    op = getattr(cuopjit, "Gemm" + name)(trans_b=kind == "linear")
    op.set_weight(to_cuopjit(w))
    return a, w, w.t() if kind == "linear" else w, op, getattr(cuopjit, "JITGemm" + name)(op)


def specs(kind: str, batch: int, m: int, n: int, k: int, dtype: str) -> set:
    """The kernels a case's forward runs (its problem planned as forward plans it)."""
    import torch
    a, b, _, op, _ = operands(kind, batch, m, n, k, dtype)
    c = torch.empty((batch, m, n) if kind == "bmm" else (m, n), device="cuda", dtype=a.dtype)
    args = (to_cuopjit(a), to_cuopjit(b), to_cuopjit(c)) if kind == "bmm" else (to_cuopjit(a), to_cuopjit(c))
    plan = op.family.default_plan(op.problem(*args), cuopjit.JITConfig().snapshot(), cuopjit.target.of_device(0))
    return set(plan.specs)


def case(name: str, kind: str, batch: int, m: int, n: int, k: int, dtype: str) -> dict:
    """Time one product with cuopjit and torch; both checked against float64."""
    import torch
    a, b, bt, _, jit = operands(kind, batch, m, n, k, dtype)
    shape = (batch, m, n) if kind == "bmm" else (m, n)
    c, ct = torch.full(shape, float("nan"), device="cuda", dtype=a.dtype), torch.empty(shape, device="cuda",
                                                                                      dtype=a.dtype)
    ca, cb, cc = to_cuopjit(a), to_cuopjit(b), to_cuopjit(c)
    run = (lambda i: jit.forward(ca, cb, cc)) if kind == "bmm" else (lambda i: jit.forward(ca, cc))
    run(0)
    torch.matmul(a, bt, out=ct)
    torch.cuda.synchronize()
    ref = a.double() @ bt.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    err_torch = ((ct.double() - ref).norm() / ref.norm()).item()
    del ref
    mine, theirs = time_pair(run, lambda i: torch.matmul(a, bt, out=ct))
    flops = 2.0 * batch * m * n * k
    return {"name": name, "dtype": dtype, "kind": kind, "shape": [batch, m, n, k],
            "cuopjit_kernel": getattr(jit.get_performance_profile(), "kernel_name", ""),
            "cuopjit_ms": mine["median_ms"], "torch_ms": theirs["median_ms"],
            "rounds_ms": {"cuopjit": mine["rounds_ms"], "torch": theirs["rounds_ms"]},
            "cuopjit_tflops": flops / mine["median_ms"] / 1e9, "torch_tflops": flops / theirs["median_ms"] / 1e9,
            "ratio": theirs["median_ms"] / mine["median_ms"], "rel_error": err, "torch_rel_error": err_torch}


def torch_kernels(fn) -> str:
    """The CUDA kernels one call of `fn` launches (torch.profiler)."""
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return ", ".join(sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}))


def sweep(cases: list[tuple]) -> None:
    """Time every wgmma build (consumers, width, blocks per SM) of each case, planned directly (the cost model's
    data: cuopjit/ops/gemm/wgmma_tiles.py), and the pick's tile order in bands of 4 and 16 P-tiles, beside the
    heuristic's pick and torch (its kernels named); every output checked against torch's."""
    import dataclasses
    import torch
    from cuopjit.build import pipeline
    from cuopjit.config import DEFAULT
    from cuopjit.ops.gemm import wgmma, wgmma_plan, wgmma_tiles
    from cuopjit.run import executor
    target = cuopjit.target.of_device(0)
    planned = []
    for c in cases:
        _, kind, batch, m, n, k, dtype = c
        a, b, bt, op, jit = operands(kind, batch, m, n, k, dtype)
        out = torch.empty((batch, m, n) if kind == "bmm" else (m, n), device="cuda", dtype=a.dtype)
        args = (to_cuopjit(a), to_cuopjit(b), to_cuopjit(out)) if kind == "bmm" else (to_cuopjit(a), to_cuopjit(out))
        problem = op.problem(*args)
        problem = getattr(problem, "gemm", problem)
        pick = op.family.default_plan(op.problem(*args), cuopjit.JITConfig().snapshot(), target)
        builds = []
        for cons, q in wgmma_tiles.HALF_BUILDS:
            for per_sm in ((1, 2) if cons == 1 and q <= 128 else (1,)):
                if not problem.trans_b and q % wgmma.MN_BOX:
                    continue
                stages = wgmma.stages_for(cons, q, False, target, per_sm, wgmma.epilogue_bytes(problem, cons, q))
                ch = wgmma.WgmmaChoice(cons, q, stages, per_sm=per_sm, bk=wgmma.bk(dtype))
                builds.append(wgmma_plan.plan(problem, ch, target))
        head = wgmma.choices(problem, cuopjit.JITConfig().snapshot(), target, False)[0]
        for group in (4, 16):
            builds.append(wgmma_plan.plan(problem, dataclasses.replace(head, group=group), target))
        planned.append((c, a, b, bt, out, builds, pick.choice))
    specs = {kl.spec for *_, builds, _ in planned for plan in builds for kl in plan.launches}
    print(f"{len(specs)} kernels to build", flush=True)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, target.arch), specs))
    for c, a, b, bt, out, builds, pick in planned:
        ptrs = tuple(to_cuopjit(t).ptr for t in (a, b, out))
        flops = 2.0 * c[2] * c[3] * c[4] * c[5]
        ref = torch.matmul(a, bt)
        ms = time_ms(lambda i: torch.matmul(a, bt, out=ref), repeat=10)["median_ms"]
        print(f"sweep {c[6]:8s} {c[0]:8s} {'torch':36s} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.1f} TF/s  "
              f"{torch_kernels(lambda: torch.matmul(a, bt, out=ref))}", flush=True)
        for plan in builds:
            run = executor.load(plan, 0, DEFAULT)
            out.fill_(float("nan"))
            run(ptrs, 0)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = time_ms(lambda i: run(ptrs, 0), repeat=10)["median_ms"]
            print(f"sweep {c[6]:8s} {c[0]:8s} {plan.choice:36s} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.1f} TF/s"
                  f" err {err:.1e}" + ("  <- pick" if plan.choice == pick else ""), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--only", default="", help="comma-separated case names (default: all)")
    p.add_argument("--out", default="benchmarks/results/gemm_half.json")
    p.add_argument("--sweep", action="store_true", help="time every wgmma build instead (no JSON)")
    args = p.parse_args()
    require_gpu("benchmarks/gemm_half.py")
    import torch
    from cuopjit.build import pipeline
    only = set(filter(None, args.only.split(",")))
    cases = [(*c, dt) for dt in args.dtypes.split(",") for c in CASES if not only or c[0] in only]
    if args.sweep:
        sweep(cases)
        return
    wanted = set().union(*(specs(*c[1:]) for c in cases))
    arch = cuopjit.target.of_device(0).arch
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, arch), wanted))
    print(f"{len(wanted)} kernels built", flush=True)
    rows = []
    for c in cases:
        rows.append(case(*c))
        r = rows[-1]
        print(f"{r['dtype']:9s} {r['name']:8s} {r['cuopjit_tflops']:7.1f} {r['torch_tflops']:7.1f} TFLOP/s "
              f"x{r['ratio']:5.2f} err {r['rel_error']:.1e} (torch {r['torch_rel_error']:.1e})  {r['cuopjit_kernel']}",
              flush=True)
        torch.cuda.empty_cache()
    save_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, gpu=True)
    bar_chart(os.path.splitext(args.out)[0] + ".png", [f"{r['dtype']} {r['name']}" for r in rows],
              [r["cuopjit_tflops"] for r in rows], [r["torch_tflops"] for r in rows], "torch (cuBLAS)", "TFLOP/s")
    for dt in args.dtypes.split(","):
        got = [r["ratio"] for r in rows if r["dtype"] == dt]
        if got:
            print(f"{dt}: min x{min(got):.2f}, geomean x{math.prod(got) ** (1 / len(got)):.2f} over {len(got)}")


if __name__ == "__main__":
    main()
