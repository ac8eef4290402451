"""The wgmma GEMM's launch plan (templates/gemm/gemm_wgmma.cu.jinja; wgmma.py chooses the build): `check` turns a
build the template cannot compile into one error saying what to choose; `plan` gives the kernel's parameters, its
persistent launch over A, B, C and a workspace of tensor maps, and for 3xTF32 on copies the two split launches
(tf32x3.py) that come first.
"""
from __future__ import annotations

from ...build import pipeline
from ...run.plan import KernelLaunch, Plan, i32, i64, ptr, scalar
from ...target import Target
from . import tf32x3 as gemm_split
from .. import epilogue
from .wgmma import (CLUSTERS, HALVES, MAP_BYTES, MAX_WIDTH, MN_BOX, SPLIT_MAX, TEMPLATE, UNITS, WgmmaChoice, bk,
                    epilogue_bytes, inreg_ok, layout, smem_bytes, smem_limit, units, why_not)


def check(problem, choice: WgmmaChoice, target: Target) -> None:
    """The build's limits (the template's static_asserts), each as one error saying what to choose."""
    copies = choice.copies
    reason = why_not(problem, target, copies)
    if reason:
        raise ValueError(f"GEMM cannot run on the wgmma kernel: {reason}")
    if choice.inreg and (not choice.split or not inreg_ok(problem) or choice.cluster != 1):
        raise ValueError("GEMM 3xTF32 split in the kernel (inreg) reads float32 A and B by TMA as TF32 does (16-byte "
                         "aligned rows, not A^T @ B), with cluster 1: use inreg=False (the split copies)")
    if choice.split and choice.qn > SPLIT_MAX:
        raise ValueError(f"GEMM 3xTF32 wgmma tiles are at most {SPLIT_MAX} wide (a k-tile's sum and the running "
                         f"total in registers), not {choice.qn}: choose tile_size {SPLIT_MAX} or less")
    q_kmajor = problem.dtype not in HALVES or problem.trans_b
    if choice.bk != bk(problem.dtype):
        raise ValueError(f"GEMM wgmma bk={choice.bk}: {problem.dtype} k-tiles are {bk(problem.dtype)} elements (128 "
                         f"bytes): use bk={bk(problem.dtype)}")
    if not q_kmajor and (choice.instr_n % MN_BOX or choice.cluster != 1):
        raise ValueError(f"GEMM {problem.dtype} wgmma with B stored K x N reads it in boxes of {MN_BOX} columns: "
                         f"the instruction's N ({choice.instr_n}) must be a multiple of {MN_BOX}, cluster 1")
    if not (0 < choice.qn <= MAX_WIDTH and choice.qn % 8 == 0 and choice.instr_n % 8 == 0
            and choice.qn % choice.instr_n == 0):
        raise ValueError(f"GEMM wgmma qn={choice.qn} ni={choice.ni}: the tile width and each instruction's N must be "
                         f"multiples of 8 up to {MAX_WIDTH}, the instruction's N dividing the tile width: choose "
                         f"tile_size {choice.qn} or a smaller power of two")
    if (choice.per_sm not in (1, 2, 3) or choice.per_sm > 1 and (choice.consumers != 1 or copies or choice.qn > 128)
            or choice.per_sm == 3 and (not choice.inreg or choice.qn > 64)):
        raise ValueError(f"GEMM wgmma per_sm={choice.per_sm}: two blocks per SM need one consumer warpgroup, "
                         "TF32 (or 3xTF32 split in the kernel) and a tile at most 128 wide (128 registers per "
                         "thread), three the kernel split and a tile at most 64 wide: use per_sm=1")
    if choice.cluster not in CLUSTERS or choice.group % choice.cluster or (choice.qn // choice.cluster) % 8:
        raise ValueError(f"GEMM wgmma cluster={choice.cluster} group={choice.group} qn={choice.qn}: a cluster is one of "
                         f"{CLUSTERS} blocks, dividing the tile-order band and splitting the tile width into parts of "
                         "whole 8-row groups: use cluster=1")
    if choice.cluster > 1 and not target.clusters:
        raise ValueError(f"GEMM wgmma cluster={choice.cluster}: {target.arch} has no thread-block clusters: use cluster=1")


def plan(problem, choice: WgmmaChoice, target: Target) -> Plan:
    """One persistent launch over A, B, C and a workspace of one pair of tensor maps per block; 3xTF32 on copies
    first splits A and B into the workspace (two launches) and the wgmma kernel reads the parts from there."""
    check(problem, choice, target)
    copies = choice.copies
    p_is_a, p_kmajor = (True, True) if copies else layout(problem.trans_a, problem.trans_b, problem.dtype)
    half = HALVES.get(problem.dtype)
    q_kmajor = not half or problem.trans_b
    regs = {(3, 1): 152, (2, 1): 232, (1, 1): 240, (1, 2): 216, (1, 3): 120}[choice.consumers, choice.per_sm]
    # float2 stores of C: only 3xTF32 takes unaligned C or odd batch strides (TF32 refuses them in why_not)
    pairs = problem.aligned and (problem.batch == 1 or problem.stride_c % (8 if half else 4) == 0)
    params = {
        "scalar_t": "float", "unroll": choice.unroll, "PM": choice.pm, "QN": choice.qn, "STAGES": choice.stages,
        "CONSUMERS": choice.consumers, "GROUP": choice.group, "SPLIT": choice.split, "P_IS_A": p_is_a,
        "NI": choice.instr_n, "P_KMAJOR": p_kmajor, "P_REGS": not p_kmajor and not half or choice.inreg,
        "INREG": choice.inreg,
        "MIN_BLOCKS": choice.per_sm, "SETMAXNREG": True, "CONSUMER_REGS": regs, "BATCHED": problem.batch > 1,
        "C_PAIRS": pairs, "CLUSTER": choice.cluster,
    }
    if half:
        params.update({"ELEM": half[0], "Q_KMAJOR": q_kmajor})
    epilogue.add(params, problem.epilogue, "float")
    # 3xTF32 multiplies the K-major parts (P = A, Q = B^T) whatever the layout the operands are stored in
    ops = "nt" if copies else ("t" if problem.trans_a else "n") + ("t" if problem.trans_b else "n")
    name = (f"gemm_{half[1] if half else 'f32'}_{choice.label}_{ops}" + ("" if pairs else "_unaligned")
            + ("_batched" if problem.batch > 1 else "") + epilogue.tag(problem.epilogue))
    spec = pipeline.make_spec(TEMPLATE, "gemm_wgmma", name, params, choice.opts, arch_specific=True)
    grid = choice.cluster * min(units(problem, choice), target.sm_count * choice.per_sm // choice.cluster)
    maps = grid * MAP_BYTES * (2 if copies else 1)
    scalars = (scalar("float32", problem.alpha), scalar("float32", problem.beta))
    cl = (choice.cluster, 1, 1)
    shared = smem_bytes(choice.consumers, choice.qn, choice.stages, choice.split,
                        epilogue_bytes(problem, choice.consumers, choice.qn, copies), choice.inreg)
    if shared > smem_limit(target, choice.per_sm):
        raise ValueError(f"GEMM wgmma {choice.label} with an epilogue needs {shared} bytes of shared memory, more than "
                         f"{target.arch} gives a block: take the choice the heuristic makes for the fused problem")
    # a user epilogue's operands follow a, b, c (its arguments come last); the workspace follows them
    operands = ("a", "b", "c", *epilogue.operand_names(problem.epilogue))
    extra, ws = epilogue.args(problem.epilogue, 3), len(operands)
    if not copies:
        args = (ptr(0), ptr(1), ptr(2), ptr(ws), i32(problem.m), i32(problem.n), i32(problem.k), i32(problem.lda),
                i32(problem.ldb), i32(problem.ldc), *scalars)
        if problem.batch > 1:
            args += (i64(problem.stride_a), i64(problem.stride_b), i64(problem.stride_c), i32(problem.batch))
        launch = KernelLaunch(spec, (grid,), (choice.threads,), (*args, *extra), shared=shared, cluster=cl,
                              units=UNITS[problem.dtype if half else choice.split])
        return Plan((launch,), operands, workspace=maps, choice=choice.label)
    lay = gemm_split.SplitLayout.of(problem, maps)
    args = (ptr(ws, lay.p_hi), ptr(ws, lay.q_hi), ptr(2), ptr(ws), i32(problem.m), i32(problem.n), i32(problem.k),
            i32(lay.ld), i32(lay.ld), i32(problem.ldc), *scalars)
    if problem.batch > 1:
        args += (i64(lay.stride_p), i64(lay.stride_q), i64(problem.stride_c), i32(problem.batch))
    args += (i64(lay.lo_p), i64(lay.lo_q), *extra)
    prep = gemm_split.launches(problem, lay, choice.unroll, choice.opts, ws)
    launch = KernelLaunch(spec, (grid,), (choice.threads,), args, shared=shared, cluster=cl, units=UNITS[True])
    return Plan((*prep, launch), operands, workspace=lay.end, choice=choice.label)
