"""Coverage models of templates/gemm/trsm.cu.jinja (scale, invert, apply), and the TRSM plan's solve order.

The GEMM updates between leaves are the GEMM family's launches (coverage_models_gemm.gemm); `solve_order`
reads a whole TRSM plan and checks that every leaf is solved after every update it depends on, each update
runs once, after the leaf it reads, and every unknown is solved exactly once.
"""
from __future__ import annotations

import numpy as np

from plan_coverage import CoverageError, expect, fills, threads_of, unpack

H = 64            # unknowns per inverted block (trsm_invert's NB)
RM, RV = 4, 4     # trsm_apply's patch per thread


def trsm_scale(sim, kl, p):
    """X = alpha B over `count` elements, grid-stride by 256."""
    a = unpack(sim, kl, ["B", "X", "count", "alpha"])
    expect(sim, threads_of(kl) == 256, f"block of {threads_of(kl)} threads; the kernel strides by 256")
    fills(sim, kl.grid[0], -(-a["count"] // 256))
    i = np.arange(a["count"], dtype=np.int64)
    a["B"].read(i)
    a["X"].write(i, values=0)


def trsm_invert(sim, kl, p):
    """Block b inverts the diagonal block b of NB unknowns: reads its triangle of A, writes W + b NB^2 densely."""
    a = unpack(sim, kl, ["A", "W", "d"])
    nb_, d = p["NB"], a["d"]
    expect(sim, threads_of(kl) == nb_ * 4, f"block of {threads_of(kl)} threads; the kernel takes NB x 4")
    expect(sim, kl.grid[0] * nb_ >= d, f"{kl.grid[0]} inverted blocks of {nb_} do not cover {d} unknowns")
    expect(sim, kl.shared >= (2 * nb_ * (nb_ + 1) + nb_) * sim.itemsize, f"{kl.shared} bytes of shared memory for "
           f"two {nb_} x {nb_ + 1} tiles")
    for b in range(kl.grid[0]):
        lo = b * nb_
        nb = min(nb_, d - lo)
        r, c = np.meshgrid(np.arange(nb), np.arange(nb), indexing="ij")
        tri = (c <= r) if (p["FORWARD"] != p["TRANS_T"]) else (c >= r)
        if p["UNIT"]:
            tri &= r != c
        a["A"].read(((lo + r) * d + lo + c)[tri])
        a["W"].write(b * nb_ * nb_ + np.arange(nb_ * nb_), values=b)


def trsm_apply(sim, kl, p):
    """A leaf of nb <= 64 * HALVES unknowns for VT right-hand sides per block: X = inv(T) X in place."""
    halves = p["HALVES"]
    names = ["W"] + (["A", "lda"] if halves == 2 else []) + ["X", "nb", "vectors", "estride", "vstride"]
    a = unpack(sim, kl, names)
    vt, threads = p["VT"], p["THREADS"]
    expect(sim, threads_of(kl) == threads and (H // RM) * (vt // RV) == threads,
           f"block of {threads_of(kl)} threads for {vt} vectors of a {H}-row block")
    nb, vectors = a["nb"], a["vectors"]
    expect(sim, 0 < nb <= H * halves and (halves == 1 or nb > H), f"a leaf of {nb} unknowns in a {halves}-block kernel")
    size = sim.itemsize
    need = (halves * H * H + halves * H * (vt + 4) + (halves - 1) * H * (H + 4)) * size
    expect(sim, kl.shared >= need, f"{kl.shared} bytes of shared memory, the leaf stages {need}")
    expect(sim, kl.grid[0] * vt >= vectors, f"{kl.grid[0]} blocks of {vt} vectors do not cover {vectors}")
    got = a["W"].read(np.arange(0, halves * H * H, 16 // size), vec=16 // size).reshape(halves, -1)
    if (got != got[:, :1]).any() or (halves == 2 and got[1, 0] != got[0, 0] + 1):
        raise CoverageError(f"{sim.where}: the leaf reads W across inverted blocks {sorted(set(got.ravel()))}")
    if halves == 2:
        f0, s0 = (0, H) if p["FORWARD"] else (H, 0)
        i, k = np.meshgrid(np.arange(H), np.arange(H), indexing="ij")
        inside = (s0 + i < nb) & (f0 + k < nb)
        src = (f0 + k) * a["lda"] + s0 + i if p["TRANS_T"] else (s0 + i) * a["lda"] + f0 + k
        a["A"].read(src[inside])
    v, k = np.meshgrid(np.arange(vectors), np.arange(nb), indexing="ij")
    idx = (v * a["vstride"] + k * a["estride"]).ravel()
    a["X"].read(idx)
    a["X"].write(idx, values=1)


MODELS = {"trsm_scale": trsm_scale, "trsm_invert": trsm_invert, "trsm_apply": trsm_apply}


def solve_order(plan, problem) -> None:
    """Check a TRSM plan's dataflow: leaves (trsm_apply) and GEMM updates in an order that solves op(A) X = B.

    Unknown t depends on every s before it in solve order (forward: s < t; backward: s > t). A leaf [lo, hi)
    may run only when each of its unknowns has received the update of every solved s outside the leaf exactly
    once; an update reads solved unknowns only and writes unknowns not solved yet."""
    d, size = problem.dim, np.dtype(problem.dtype).itemsize
    lead = problem.m if problem.right else problem.n      # elements per unknown's row (left) / 1 (right)
    forward = pending = None
    solved = np.zeros(d, bool)
    got = np.zeros((d, d), np.int32)          # got[t, s]: updates of unknown t by solved unknown s
    for kl in plan.launches:
        k = kl.spec.kernel
        if k == "trsm_invert":
            forward = dict(kl.spec.params)["FORWARD"]
        elif k == "trsm_apply":
            names = ["W"] + (["A", "lda"] if dict(kl.spec.params)["HALVES"] == 2 else []) + \
                ["X", "nb", "vectors", "estride", "vstride"]
            a = dict(zip(names, kl.args))
            lo = a["X"].offset // size // a["estride"].value
            hi = lo + a["nb"].value
            if a["W"].offset != lo // H * H * H * size:
                raise CoverageError(f"leaf [{lo}, {hi}) reads the inverse of block {a['W'].offset // (H * H * size)}")
            leaf = np.arange(lo, hi)
            before = np.arange(d)[:, None] < np.arange(d)[None, :] if forward else \
                np.arange(d)[:, None] > np.arange(d)[None, :]
            for t in leaf:
                deps = np.flatnonzero(before[:, t])
                deps = deps[(deps < lo) | (deps >= hi)]
                if not (solved[deps].all() and (got[t, deps] == 1).all()):
                    missing = deps[~solved[deps] | (got[t, deps] != 1)]
                    raise CoverageError(f"leaf [{lo}, {hi}) solves unknown {t} before the update by unknown "
                                        f"{missing[0]} (updates received: {got[t, missing[0]]})")
            if solved[leaf].any():
                raise CoverageError(f"leaf [{lo}, {hi}) solves unknowns already solved")
            solved[leaf] = True
        elif k in ("gemm", "gemm_wgmma"):
            names = ["A", "B", "C"] + (["ws"] if k == "gemm_wgmma" else []) + ["M", "N", "K"]
            a = dict(zip(names, kl.args))
            if problem.right:        # X[:, todo] -= X[:, done] @ op(A)[done, todo]
                done0 = a["A"].offset // size
            else:                    # X[todo, :] -= op(A)[todo, done] @ X[done, :]
                done0 = a["B"].offset // size // lead
            pending = np.arange(done0, done0 + a["K"].value)
            if a["C"].value == 2:    # written in place (no split-K): the update is this launch
                _update(solved, got, pending, a["C"], a["M"] if not problem.right else a["N"], size, lead,
                        problem.right)
                pending = None
        elif k == "splitk_reduce":
            a = dict(zip(["P", "C", "M", "N"], kl.args))
            _update(solved, got, pending, a["C"], a["M"] if not problem.right else a["N"], size, lead, problem.right)
            pending = None
    if not solved.all():
        raise CoverageError(f"unknowns {np.flatnonzero(~solved)[:5].tolist()}... are never solved")
    if (got > 1).any():
        raise CoverageError("an update is applied twice")


def _update(solved: np.ndarray, got: np.ndarray, done, c_arg, count_arg, size: int, lead: int, right: bool) -> None:
    """Record the update of X[todo] (C at c_arg, `count_arg` unknowns) by the solved unknowns `done`."""
    if done is None:
        raise CoverageError("a split-K reduction without its partial GEMM before it")
    todo0 = c_arg.offset // size if right else c_arg.offset // size // lead
    todo = np.arange(todo0, todo0 + count_arg.value)
    if not solved[done].all() or solved[todo].any():
        raise CoverageError(f"update of unknowns [{todo[0]}, {todo[-1] + 1}) by [{done[0]}, {done[-1] + 1}) "
                            "reads unknowns not solved yet or writes solved ones")
    got[np.ix_(todo, done)] += 1
