"""Run the 16-bit row kernels once each, for compute-sanitizer (memcheck / racecheck): float16 softmax (short rows,
a cluster, the stream kernel with cp.async and with a register-copied stash, the strided kernel) and bfloat16
layernorm (short rows, the stream kernel, the resident kernel, split rows), each checked against float64.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_half_rows.py
"""
import ml_dtypes
import numpy as np

import cuopjit

rng = np.random.default_rng(0)
BF16 = np.dtype(ml_dtypes.bfloat16)


def softmax64(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


sm = cuopjit.SoftmaxHalf()
for shape, axis in (((64, 1000), -1), ((8, 32768), -1), ((133, 20000), -1), ((133, 10001), -1), ((4, 100, 24), 1)):
    x = rng.standard_normal(shape).astype(np.float16)
    y = cuopjit.empty(shape, "float16")
    sm.forward(cuopjit.tensor(x), y, axis=axis)
    err = np.abs(y.to_numpy().astype(np.float64) - softmax64(x.astype(np.float64), axis)).max()
    assert err < 2e-3, ("softmax", shape, err, sm.plan(cuopjit.tensor(x), y, axis=axis).choice)

ln = cuopjit.LayerNormBFloat16()
for shape in ((64, 1000), (133, 20000), (2, 1 << 18)):
    x = rng.standard_normal(shape).astype(BF16)
    g, b = rng.standard_normal(shape[-1:]).astype(BF16), rng.standard_normal(shape[-1:]).astype(BF16)
    ln.set_gamma(cuopjit.tensor(g))
    ln.set_beta(cuopjit.tensor(b))
    for fields in ({}, {"enable_shared_memory_opt": False}):
        jit = cuopjit.JITLayerNormBFloat16(ln)
        cfg = cuopjit.JITConfig()
        for k, v in fields.items():
            setattr(cfg, k, v)
        jit.set_jit_config(cfg)
        y = cuopjit.empty(shape, BF16)
        jit.forward(cuopjit.tensor(x), y)
        x64 = x.astype(np.float64)
        ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * g.astype(
            np.float64) + b.astype(np.float64)
        err = np.abs(y.to_numpy().astype(np.float64) - ref).max()
        assert err < 0.1, ("layernorm", shape, fields, err, jit.get_performance_profile().kernel_name)
cuopjit.synchronize()
print("sanitize_half_rows: ok")
