"""Sweep explicit GEMM builds on the shapes whose heuristic they decide, next to torch in the same run (JSON).

For every shape (a BERT-base layer's linear and attention products, the batched 100 x 256³, GEMM 4096³ /
8192³ and `A @ W^T` with few rows) it times, planned directly and launched on the legacy stream:
the heuristic's plan in each mode, every wgmma TF32 build of TF32_BUILDS and 3xTF32 build of SPLIT_BUILDS,
and the float32 SIMT shapes of SIMT_BUILDS (with the heuristic's split-K where it splits); and torch with TF32
on and off. Kernels compile first, in parallel. Each row carries the error against a float64 product on
the device, so a build that computes wrong numbers is visible next to its speed. cuopjit/ops/gemm/wgmma_tiles.py's
cost model and heuristics.py's SIMT_RATE were set from such a run
(benchmarks/results/gemm_sweep.json).

    python benchmarks/gemm_sweep.py [--groups bert,big,skinny] [--out sweep.json]
    ncu ... python benchmarks/gemm_sweep.py --profile qkv [--builds 2x192,2x256]   (launches only, no timing)
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import cuopjit  # noqa: E402
from cuopjit.build import pipeline  # noqa: E402
from cuopjit.config import DEFAULT  # noqa: E402
from cuopjit.ops.gemm import gemv, heuristics, matmul, plans as gk, shapes as gs, wgmma as gw, wgmma_plan  # noqa: E402
from cuopjit.run.plan import Plan, ptr  # noqa: E402
from cuopjit.run import executor  # noqa: E402
from mb_common import time_ms, to_cuopjit  # noqa: E402

# (name, batch, m, n, k, trans_a, trans_b) per group
GROUPS = {
    "bert": [("qkv", 1, 4096, 2304, 768, False, True), ("ffn1", 1, 4096, 3072, 768, False, True),
             ("ffn2", 1, 4096, 768, 3072, False, True), ("proj", 1, 4096, 768, 768, False, True),
             ("scores", 96, 512, 512, 64, False, True), ("scores_nn", 96, 512, 512, 64, False, False),
             ("context", 96, 512, 64, 512, False, False), ("bmm256", 100, 256, 256, 256, False, False)],
    "big": [("g4096_nn", 1, 4096, 4096, 4096, False, False), ("g4096_nt", 1, 4096, 4096, 4096, False, True),
            ("g8192_nn", 1, 8192, 8192, 8192, False, False)],
    "skinny": [(f"m{m}_{n}x{k}", 1, m, n, k, False, True) for m in (1, 33, 256, 1000)
               for n, k in ((768, 3072), (2304, 768), (4096, 4096))],
}
# (consumers, tile width, blocks per SM)
TF32_BUILDS = ([(2, q, 1) for q in (256, 224, 192, 160, 128, 96, 64)] + [(1, q, 2) for q in (128, 96, 64)]
               + [(1, q, 1) for q in (256, 192)])
SPLIT_BUILDS = [(2, 128, 1), (2, 96, 1), (2, 64, 1), (1, 128, 1), (1, 64, 1)]
BIG_ONLY = {(2, 256, 1), (2, 224, 1), (2, 192, 1), (2, 128, 1)}     # 8192³ takes only these (time)
SIMT_BUILDS = [*gs.AUTO_SIMT, gs.SKINNY_SIMT]


def problem_of(batch: int, m: int, n: int, k: int, ta: bool, tb: bool) -> gk.GemmProblem:
    p = gk.packed("float32", m, n, k, ta, tb)
    if batch > 1:
        p = dataclasses.replace(p, batch=batch, stride_a=m * k, stride_b=k * n, stride_c=m * n)
    return p


def candidates(name: str, problem: gk.GemmProblem, target) -> list[tuple[str, str, object]]:
    """(mode, label, plan) of the heuristic's plans and every explicit build that this shape takes."""
    out = []
    for mode, fields in (("fp32", {}), ("tf32", {"enable_tensor_core": True}), ("3xtf32", {"precision": "3xtf32"})):
        cfg = cuopjit.JITConfig()
        for f, v in fields.items():
            setattr(cfg, f, v)
        plan = gk.FAMILY.default_plan(problem, cfg.snapshot(), target)
        out.append((mode, "auto:" + plan.choice, plan))
    big = problem.m * problem.n * problem.k * problem.batch > 2 ** 38
    for c, q, per_sm in TF32_BUILDS:
        if big and (c, q, per_sm) not in BIG_ONLY:
            continue
        ch = gw.WgmmaChoice(c, q, gw.stages_for(c, q, False, target, per_sm), per_sm=per_sm)
        out.append(("tf32", ch.label, wgmma_plan.plan(problem, ch, target)))
    for c, q, per_sm in ([] if big else SPLIT_BUILDS):
        ch = gw.WgmmaChoice(c, q, gw.stages_for(c, q, True, target, per_sm), split=True, per_sm=per_sm)
        out.append(("3xtf32", ch.label, wgmma_plan.plan(problem, ch, target)))
    for s in ([] if big else SIMT_BUILDS):
        base = gk.GemmChoice(s, **heuristics.pipeline_fields("float32", s, target))
        splits = heuristics.split_for(problem, base, target)
        for ch in dict.fromkeys((base, dataclasses.replace(base, split_k=splits))):
            out.append(("fp32", ch.label, gk.plan(problem, ch, target)))
    if problem.m == 1 and problem.trans_b and problem.batch == 1:     # y = W x: GEMV on W as stored (n x k)
        out.append(("fp32", "gemv", gemv_route(problem, target)))
    return out


def gemv_route(problem: gk.GemmProblem, target) -> Plan:
    """The one-row A @ W^T as GEMV on W (n x k): its plan with A and W swapped into GEMV's (x, A) places."""
    gp = gemv.GemvProblem("float32", problem.n, problem.k, False, problem.aligned, 1.0, 0.0, problem.ldb)
    plan = gemv.plan(gp, gemv.choices(gp, cuopjit.JITConfig().snapshot(), target)[0], target)
    moved = tuple(matmul.retarget(kl, (ptr(1), ptr(0), ptr(2)), ptr(3)) for kl in plan.launches)
    return Plan(moved, ("a", "b", "c"), workspace=plan.workspace, choice="gemv_" + plan.choice)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--groups", default="bert,big,skinny")
    p.add_argument("--out", default=None)
    p.add_argument("--profile", default=None, help="one shape: launch its TF32 builds and torch TF32 3x each")
    p.add_argument("--builds", default="2x192", help="--profile: consumers x tile width, besides the heuristic's")
    args = p.parse_args()
    import torch
    from results_io import save_json
    target = cuopjit.target.of_device(0)
    if args.profile:
        profile(args.profile, args.builds, target)
        return
    shapes = [s for g in args.groups.split(",") for s in GROUPS[g]]
    planned = [(s, candidates(s[0], problem_of(*s[1:]), target)) for s in shapes]
    specs = {kl.spec for _, cands in planned for _, _, plan in cands for kl in plan.launches}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda spec: pipeline.build(spec, "sm_90"), specs))
    print(f"{len(specs)} kernels built", flush=True)
    rows = []
    for (name, batch, m, n, k, ta, tb), cands in planned:
        sa = (batch, k, m) if ta else (batch, m, k)
        sb = (batch, n, k) if tb else (batch, k, n)
        a, b = torch.randn(*sa, device="cuda"), torch.randn(*sb, device="cuda")
        c = torch.empty(batch, m, n, device="cuda")
        opa, opb = (a.mT if ta else a), (b.mT if tb else b)
        ref = opa.double() @ opb.double()
        times = {}
        for tf32 in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            times[tf32] = time_ms(lambda i: torch.matmul(opa, opb, out=c), repeat=10)["median_ms"]
        torch.backends.cuda.matmul.allow_tf32 = False
        ptrs = tuple(to_cuopjit(t).ptr for t in (a, b, c))
        flops = 2.0 * batch * m * n * k
        for mode, label, plan in cands:
            run = executor.load(plan, 0, DEFAULT)
            c.fill_(float("nan"))
            run(ptrs, 0)
            torch.cuda.synchronize()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            mine = time_ms(lambda i: run(ptrs, 0), repeat=10)["median_ms"]
            theirs = times[mode == "tf32"]
            rows.append({"shape": name, "mnk": [batch, m, n, k], "mode": mode, "choice": label, "ms": mine,
                         "torch_ms": theirs, "ratio": theirs / mine, "tflops": flops / mine / 1e9, "rel_error": err})
            print(f"{name:16s} {mode:6s} {label:42s} {mine * 1e3:9.1f} us {flops / mine / 1e9:6.1f} TF/s "
                  f"torch {theirs * 1e3:9.1f} x{theirs / mine:5.2f} err {err:.1e}", flush=True)
        a = b = c = ref = None
        torch.cuda.empty_cache()
    if args.out:
        save_json(args.out, {"rows": rows, "device": torch.cuda.get_device_name()}, gpu=True)


def profile(name: str, builds: str, target) -> None:
    """Launch the heuristic's TF32 plan, the named builds and torch (TF32) three times each: a run for ncu."""
    import torch
    (batch, m, n, k, ta, tb), = [s[1:] for g in GROUPS.values() for s in g if s[0] == name]
    problem = problem_of(batch, m, n, k, ta, tb)
    cfg = cuopjit.JITConfig()
    cfg.enable_tensor_core = True
    plans = [gk.FAMILY.default_plan(problem, cfg.snapshot(), target)]
    for b in builds.split(","):
        c, q = map(int, b.split("x"))
        per_sm = 2 if c == 1 and q <= 128 else 1
        plans.append(wgmma_plan.plan(problem, gw.WgmmaChoice(c, q, gw.stages_for(c, q, False, target, per_sm),
                                                     per_sm=per_sm), target))
    a = torch.randn(batch, *((k, m) if ta else (m, k)), device="cuda")
    b = torch.randn(batch, *((n, k) if tb else (k, n)), device="cuda")
    c = torch.empty(batch, m, n, device="cuda")
    ptrs = tuple(to_cuopjit(t).ptr for t in (a, b, c))
    torch.backends.cuda.matmul.allow_tf32 = True
    for plan in plans:
        run = executor.load(plan, 0, DEFAULT)
        for _ in range(3):
            run(ptrs, 0)
        print(plan.choice, [kl.spec.name for kl in plan.launches], flush=True)
    for _ in range(3):
        torch.matmul(a.mT if ta else a, b.mT if tb else b, out=c)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
