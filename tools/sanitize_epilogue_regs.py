"""Run the wgmma GEMM's register epilogue (store_regs: float32 C along Q, per-column / per-row / scalar operands)
once per case for compute-sanitizer (memcheck / racecheck), checked against float64: TF32 with odd M and N
ending inside a column block, a bias one element off 16-byte alignment, 3xTF32 on unaligned C (odd N: a last pair
with one column inside, scalar stores), a batched launch.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_epilogue_regs.py
"""
import numpy as np

import cuopjit
from cuopjit.expr import evaluate, parse_epilogue
from cuopjit.tensor import Tensor

from sanitizer_data import close, rng

EXPR = "gelu(acc * s + bias) + t * rows"


def data(*shape):
    return rng.standard_normal(shape).astype(np.float32)


for precision, (m, n, k), off in (("tf32", (197, 204, 72), True), ("tf32", (256, 520, 64), False),
                                  ("3xtf32", (520, 403, 129), False)):
    a, w, bias, rows = data(m, k), data(n, k), data(n), data(m, 1)
    base = cuopjit.tensor(np.concatenate([np.zeros(1, np.float32), bias]) if off else bias)
    b = Tensor._view(base.ptr + 4, (n,), np.dtype(np.float32), base.device, base) if off else base
    op = cuopjit.GemmFloat(trans_b=True)
    op.set_weight(cuopjit.tensor(w))
    op.set_epilogue(EXPR, bias=b, rows=cuopjit.tensor(rows))
    jit = cuopjit.JITGemmFloat(op)
    cfg = cuopjit.JITConfig()
    if precision == "tf32":
        cfg.enable_tensor_core = True
    else:
        cfg.precision = "3xtf32"
    jit.set_jit_config(cfg)
    c = cuopjit.empty((m, n))
    jit.forward(cuopjit.tensor(a), c, s=0.5, t=2.0)
    env = {"acc": a.astype(np.float64) @ w.T.astype(np.float64), "bias": bias.astype(np.float64),
           "rows": rows.astype(np.float64), "s": 0.5, "t": 2.0}
    close(c.to_numpy(), evaluate(parse_epilogue(EXPR), env, np.float64), 2e-2, f"{precision} {m}x{n}x{k}")
    print("sanitize:", precision, m, n, k, jit.get_performance_profile().kernel_name, flush=True)
a, w, bias, rows = data(3, 130, 64), data(3, 72, 64), data(72), data(3, 130, 1)
op = cuopjit.BatchMatMulFloat(trans_b=True)
op.set_epilogue(EXPR, bias=cuopjit.tensor(bias), rows=cuopjit.tensor(rows))
jit = cuopjit.JITBatchMatMulFloat(op)
cfg = cuopjit.JITConfig()
cfg.enable_tensor_core = True
jit.set_jit_config(cfg)
c = cuopjit.empty((3, 130, 72))
jit.forward(cuopjit.tensor(a), cuopjit.tensor(w), c, s=0.5, t=2.0)
env = {"acc": a.astype(np.float64) @ np.swapaxes(w, 1, 2).astype(np.float64), "bias": bias.astype(np.float64),
       "rows": rows.astype(np.float64), "s": 0.5, "t": 2.0}
close(c.to_numpy(), evaluate(parse_epilogue(EXPR), env, np.float64), 2e-2, "batched")
print("sanitize: batched", jit.get_performance_profile().kernel_name, flush=True)
