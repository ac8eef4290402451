"""Run the 16-bit GEMM kernels once each for compute-sanitizer (memcheck / racecheck), checked against float64: the
wgmma f16 / bf16 kernel in every transpose pair (K-major and MN-major operands through the transpose bits; tile
edges in M, N and K; two consumers and one with two blocks per SM; alpha / beta reading C; beta 0 through each warp's
shared-memory window), three consumer warpgroups (192-row tiles), batched with a broadcast weight, the user epilogue
staged through shared memory, the one-stage fallback kernel on odd strides, and the sm_80 kernel (mma.sync
m16n8k16, ldmatrix, cp.async; planned for sm_80, built for this GPU) in every transpose pair.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_gemm_half.py
"""
import ml_dtypes
import numpy as np

import cuopjit
from cuopjit.config import DEFAULT
from cuopjit.ops.gemm import plans, wgmma, wgmma_plan
from cuopjit.run import executor
from cuopjit.target import named

from sanitizer_data import close, half


for dtype, tol in (("float16", 4e-3), (np.dtype(ml_dtypes.bfloat16), 2e-2)):
    name = "Half" if dtype == "float16" else "BFloat16"
    gemm = getattr(cuopjit, "Gemm" + name)
    for m, n, k, beta in ((200, 264, 328, 0.5), (1000, 520, 136, 0.0), (33, 47, 29, 0.0)):
        for ta in (False, True):
            for tb in (False, True):
                a, b, c0 = half((k, m) if ta else (m, k), dtype), half((n, k) if tb else (k, n), dtype), half((m, n), dtype)
                op = gemm(ta, tb, 1.0, beta)
                op.set_weight(cuopjit.tensor(b))
                c = cuopjit.tensor(c0)
                op.forward(cuopjit.tensor(a), c)
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                ref = (a64.T if ta else a64) @ (b64.T if tb else b64) + beta * c0.astype(np.float64)
                close(c.to_numpy(), ref, tol * 4, f"gemm {name} {m}x{n}x{k} {ta} {tb}")
    a, b = half((6, 136, 200), dtype), half((1, 200, 72), dtype)
    c = cuopjit.empty((6, 136, 72), dtype)
    getattr(cuopjit, "BatchMatMul" + name)().forward(cuopjit.tensor(a), cuopjit.tensor(b), c)
    close(c.to_numpy(), a.astype(np.float64) @ b.astype(np.float64), tol * 4, "batched")
    a, w, bias = half((200, 96), dtype), half((136, 96), dtype), half(136, dtype)
    op = gemm(False, True)
    op.set_weight(cuopjit.tensor(w))
    op.set_epilogue("relu(acc + bias)", bias=cuopjit.tensor(bias))
    c = cuopjit.empty((200, 136), dtype)
    op.forward(cuopjit.tensor(a), c)
    ref = np.maximum(a.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64), 0)
    close(c.to_numpy(), ref, tol * 4, "epilogue")
    for ta, tb in ((False, True), (True, False)):         # three consumer warpgroups (192-row tiles), planned directly
        a, b = half((200, 400) if ta else (400, 200), dtype), half((392, 200) if tb else (200, 392), dtype)
        c = cuopjit.empty((400, 392), dtype)
        problem = plans.packed(str(np.dtype(dtype)), 400, 392, 200, ta, tb)
        for cons, qn in ((3, 192), (3, 128)):
            choice = wgmma.build(cons, qn, named("sm_90"), False, problem=problem, bk=64)
            ta_, tb_ = cuopjit.tensor(a), cuopjit.tensor(b)
            executor.load(wgmma_plan.plan(problem, choice, named("sm_90")), 0, DEFAULT)((ta_.ptr, tb_.ptr, c.ptr), 0)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            close(c.to_numpy(), (a64.T if ta else a64) @ (b64.T if tb else b64), tol * 4, f"{choice.label} {ta} {tb}")
    for m, n, k in ((200, 264, 328), (64, 64, 32)):
        for ta in (False, True):
            for tb in (False, True):
                a, b = half((k, m) if ta else (m, k), dtype), half((n, k) if tb else (k, n), dtype)
                c = cuopjit.empty((m, n), dtype)
                plan = plans.FAMILY.default_plan(plans.packed(str(np.dtype(dtype)), m, n, k, ta, tb),
                                                 cuopjit.JITConfig().snapshot(), named("sm_80"))
                assert "mma16" in plan.launches[0].spec.name
                ta_, tb_ = cuopjit.tensor(a), cuopjit.tensor(b)     # alive until the copy back below
                executor.load(plan, 0, DEFAULT)((ta_.ptr, tb_.ptr, c.ptr), 0)
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                close(c.to_numpy(), (a64.T if ta else a64) @ (b64.T if tb else b64), tol * 4, f"mma16 {m} {ta} {tb}")
cuopjit.synchronize()
print("sanitize_gemm_half: ok")
