"""Run the wgmma GEMM's register epilogue (store_regs: float32 C along Q) once per case for compute-sanitizer
(memcheck / racecheck), checked against float64: per-column / per-row / scalar operands on TF32 with odd M and N
ending inside a column block, a bias one element off 16-byte alignment, 3xTF32 on unaligned C (odd N: a last pair
with one column inside, scalar stores), a batched launch; then a residual and c loaded into registers: 8-byte
pairs (TF32, odd M), element by element (a residual 4 bytes off alignment; 3xTF32 with odd N), a batched launch.

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


def on_tensor_cores(jit, precision="tf32"):
    """`jit` set to run TF32 (enable_tensor_core) or 3xTF32."""
    cfg = cuopjit.JITConfig()
    if precision == "tf32":
        cfg.enable_tensor_core = True
    else:
        cfg.precision = "3xtf32"
    jit.set_jit_config(cfg)
    return jit


for precision, (m, n, k), off in (("tf32", (197, 204, 72), True), ("tf32", (256, 520, 64), False),
                                  ("3xtf32", (520, 403, 129), False)):
    a, w, bias, rows = data(m, k), data(n, k), data(n), data(m, 1)
    base = cuopjit.tensor(np.concatenate([np.zeros(1, np.float32), bias]) if off else bias)
    b = Tensor._view(base.ptr + 4, (n,), np.dtype(np.float32), base.device, base) if off else base
    op = cuopjit.GemmFloat(trans_b=True)
    op.set_weight(cuopjit.tensor(w))
    op.set_epilogue(EXPR, bias=b, rows=cuopjit.tensor(rows))
    jit = on_tensor_cores(cuopjit.JITGemmFloat(op), precision)
    c = cuopjit.empty((m, n))
    jit.forward(cuopjit.tensor(a), c, s=0.5, t=2.0)
    env = {"acc": a.astype(np.float64) @ w.T.astype(np.float64), "bias": bias.astype(np.float64),
           "rows": rows.astype(np.float64), "s": 0.5, "t": 2.0}
    close(c.to_numpy(), evaluate(parse_epilogue(EXPR), env, np.float64), 2e-2, f"{precision} {m}x{n}x{k}")
    print("sanitize:", precision, m, n, k, jit.get_performance_profile().kernel_name, flush=True)
a, w, bias, rows = data(3, 130, 64), data(3, 72, 64), data(72), data(3, 130, 1)
op = cuopjit.BatchMatMulFloat(trans_b=True)
op.set_epilogue(EXPR, bias=cuopjit.tensor(bias), rows=cuopjit.tensor(rows))
jit = on_tensor_cores(cuopjit.JITBatchMatMulFloat(op))
c = cuopjit.empty((3, 130, 72))
jit.forward(cuopjit.tensor(a), cuopjit.tensor(w), c, s=0.5, t=2.0)
env = {"acc": a.astype(np.float64) @ np.swapaxes(w, 1, 2).astype(np.float64), "bias": bias.astype(np.float64),
       "rows": rows.astype(np.float64), "s": 0.5, "t": 2.0}
close(c.to_numpy(), evaluate(parse_epilogue(EXPR), env, np.float64), 2e-2, "batched")
print("sanitize: batched", jit.get_performance_profile().kernel_name, flush=True)

RES = "gelu(acc + bias) + residual + 0.5 * c + t * relu(rows)"


def residual(shape, off):
    """(host values, device tensor) of an output-shaped operand, `off`: 4 bytes past an 8-byte boundary."""
    host = data(*shape)
    base = cuopjit.tensor(np.concatenate([np.zeros(1, np.float32), host.ravel()]) if off else host)
    return host, (Tensor._view(base.ptr + 4, shape, np.dtype(np.float32), base.device, base) if off else base)


for precision, (m, n, k), off in (("tf32", (197, 204, 72), False), ("tf32", (130, 520, 64), True),
                                  ("3xtf32", (520, 403, 129), False)):
    a, w, bias, rows, old = data(m, k), data(n, k), data(n), data(m, 1), data(m, n)
    r, rt = residual((m, n), off)
    op = cuopjit.GemmFloat(trans_b=True)
    op.set_weight(cuopjit.tensor(w))
    op.set_epilogue(RES, bias=cuopjit.tensor(bias), rows=cuopjit.tensor(rows))
    jit = on_tensor_cores(cuopjit.JITGemmFloat(op), precision)
    c = cuopjit.tensor(old)
    jit.forward(cuopjit.tensor(a), c, residual=rt, t=2.0)
    env = {"acc": a.astype(np.float64) @ w.T.astype(np.float64), "bias": bias.astype(np.float64),
           "rows": rows.astype(np.float64), "residual": r.astype(np.float64), "c": old.astype(np.float64), "t": 2.0}
    close(c.to_numpy(), evaluate(parse_epilogue(RES), env, np.float64), 2e-2, f"residual {precision} {m}x{n}x{k}")
    print("sanitize: residual", precision, m, n, k, jit.get_performance_profile().kernel_name, flush=True)
a, w, bias, rows, old = data(3, 130, 64), data(3, 72, 64), data(72), data(3, 130, 1), data(3, 130, 72)
r, rt = residual((3, 130, 72), False)
op = cuopjit.BatchMatMulFloat(trans_b=True)
op.set_epilogue(RES, bias=cuopjit.tensor(bias), rows=cuopjit.tensor(rows))
jit = on_tensor_cores(cuopjit.JITBatchMatMulFloat(op))
c = cuopjit.tensor(old)
jit.forward(cuopjit.tensor(a), cuopjit.tensor(w), c, residual=rt, t=2.0)
env = {"acc": a.astype(np.float64) @ np.swapaxes(w, 1, 2).astype(np.float64), "bias": bias.astype(np.float64),
       "rows": rows.astype(np.float64), "residual": r.astype(np.float64), "c": old.astype(np.float64), "t": 2.0}
close(c.to_numpy(), evaluate(parse_epilogue(RES), env, np.float64), 2e-2, "residual batched")
print("sanitize: residual batched", jit.get_performance_profile().kernel_name, flush=True)
