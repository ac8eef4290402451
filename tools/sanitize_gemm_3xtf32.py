"""Run the 3xTF32 wgmma GEMM split in the kernel (P in registers, Q's hi / lo made in shared memory by the
producer's warps 1-3) once per build for compute-sanitizer (memcheck / racecheck), checked against float64 with
the componentwise bound of tests/test_gemm_wgmma.py: every layout it takes (nt, nn, tt), two consumers and one
with two or three blocks per SM, a narrower instruction than the tile, tile edges in M, N and K, alpha / beta reading C,
batched with a broadcast operand, and a user epilogue (bias + ReLU) from the accumulators.

    compute-sanitizer --tool racecheck --error-exitcode 9 python3 tools/sanitize_gemm_3xtf32.py
"""
import dataclasses

import numpy as np

import cuopjit
from cuopjit.config import DEFAULT
from cuopjit.ops.gemm import plans as gk, wgmma as gw
from cuopjit.run import executor

rng = np.random.default_rng(0)
target = cuopjit.target.of_device(0)


def problem(batch, m, n, k, ta, tb, alpha, beta, bcast=None):
    lda, ldb = (m if ta else k), (k if tb else n)
    return gk.GemmProblem("float32", m, n, k, ta, tb, True, alpha, beta, lda, ldb, n, batch=batch,
                          stride_a=0 if bcast == "a" or batch == 1 else m * k,
                          stride_b=0 if bcast == "b" or batch == 1 else k * n, stride_c=m * n if batch > 1 else 0)


def check(p, choice):
    sa, sb = ((p.k, p.m) if p.trans_a else (p.m, p.k)), ((p.n, p.k) if p.trans_b else (p.k, p.n))
    a = rng.standard_normal((p.batch if p.stride_a else 1, *sa)).astype(np.float32)
    b = rng.standard_normal((p.batch if p.stride_b else 1, *sb)).astype(np.float32)
    c0 = rng.standard_normal((p.batch, p.m, p.n)).astype(np.float32)
    c = cuopjit.tensor(c0 if p.beta else np.full_like(c0, np.nan))
    plan = gk.plan(p, choice, target)
    assert len(plan.launches) == 1 and "_3xtf32r_" in plan.launches[0].spec.name, plan.launches[0].spec.name
    at, bt = cuopjit.tensor(a), cuopjit.tensor(b)
    executor.load(plan, 0, DEFAULT)((at.ptr, bt.ptr, c.ptr), 0)
    out = c.to_numpy().astype(np.float64)
    for z in range(p.batch):
        x, y = a[z if p.stride_a else 0].astype(np.float64), b[z if p.stride_b else 0].astype(np.float64)
        x, y = (x.T if p.trans_a else x), (y.T if p.trans_b else y)
        ref = p.alpha * x @ y + p.beta * c0[z]
        bound = (p.k + 16) * np.finfo(np.float32).eps * (abs(p.alpha) * np.abs(x) @ np.abs(y) + abs(p.beta) * np.abs(c0[z]))
        err = np.abs(out[z] - ref)
        assert np.all(err <= bound), (plan.launches[0].spec.name, p.m, p.n, p.k, float(np.max(err - bound)))


for ta, tb in ((False, True), (False, False), (True, True)):
    for consumers, qn, ni, per_sm in ((2, 128, 0, 1), (1, 128, 0, 2), (1, 64, 32, 2), (2, 64, 0, 1), (1, 64, 0, 3)):
        choice = dataclasses.replace(gw.build(consumers, qn, target, True, inreg=True), ni=ni, per_sm=per_sm,
                                     stages=gw.stages_for(consumers, qn, True, target, per_sm, inreg=True))
        m = 132 if ta else 131
        check(problem(1, m, 200, 100, ta, tb, -0.5, 1.5), choice)
        check(problem(3, m, 68, 36, ta, tb, 1.0, 0.0, "b"), choice)
# a user epilogue from the accumulators (bias + ReLU) on the heuristic's build
a, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((200, 96), (136, 96), (136,)))
op = cuopjit.GemmFloat(False, True)
op.set_weight(cuopjit.tensor(w))
op.set_epilogue("relu(acc + bias)", bias=cuopjit.tensor(bias))
jit = cuopjit.JITGemmFloat(op)
cfg = cuopjit.JITConfig()
cfg.kernel_type, cfg.precision = "tensor_core", "3xtf32"
jit.set_jit_config(cfg)
c = cuopjit.empty((200, 136), "float32")
jit.forward(cuopjit.tensor(a), c)
assert "_3xtf32r_" in jit.get_performance_profile().kernel_name, jit.get_performance_profile().kernel_name
ref = np.maximum(a.astype(np.float64) @ w.astype(np.float64).T + bias, 0)
assert np.abs(c.to_numpy() - ref).max() < 1e-4 * np.abs(ref).max()
cuopjit.synchronize()
print("sanitize_gemm_3xtf32: ok")
