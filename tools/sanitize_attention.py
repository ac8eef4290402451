"""Run the attention kernels once each, for compute-sanitizer (memcheck / racecheck): exact float32 and TF32
(aligned and scalar, full and causal, Lq != Lk, odd lengths and head dims), float64, float16 and bfloat16, each
checked against a float64 NumPy reference.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_attention.py
"""
import ml_dtypes
import numpy as np

import cuopjit

rng = np.random.default_rng(0)


def reference(q, k, v, causal):
    s = np.einsum("...id,...jd->...ij", q, k) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("...ij,...jd->...id", p / p.sum(-1, keepdims=True), v)


for dtype, tensor_cores, tol in (("float32", False, 1e-5), ("float32", True, 2e-2), ("float64", False, 1e-12)):
    for (b, lq, lk, d), causal in ((((2, 70, 33, 64), False)), (((1, 33, 130, 40), True)), (((2, 7, 7, 7), True)),
                                   (((1, 65, 65, 128), False))):
        q, k, v = (rng.standard_normal((b, n, d)) for n in (lq, lk, lk))
        out = cuopjit.empty((b, lq, d), dtype)
        op = cuopjit.JITAttentionFloat(cuopjit.AttentionFloat()) if dtype == "float32" else \
            cuopjit.JITAttentionDouble(cuopjit.AttentionDouble())
        cfg = cuopjit.JITConfig()
        cfg.enable_tensor_core = tensor_cores
        op.set_jit_config(cfg)
        op.forward(*(cuopjit.tensor(a.astype(dtype)) for a in (q, k, v)), out, causal=causal)
        err = np.abs(out.to_numpy() - reference(q, k, v, causal)).max()
        assert err < tol, (dtype, tensor_cores, b, lq, lk, d, causal, err, op.get_performance_profile().kernel_name)
for dtype, cls, tol in ((np.float16, cuopjit.AttentionHalf, 1e-2), (ml_dtypes.bfloat16, cuopjit.AttentionBFloat16,
                                                                     1e-1)):
    for (b, lq, lk, d), causal in ((((2, 70, 33, 64), True)), (((1, 33, 130, 7), False)), (((1, 40, 40, 128), True)),
                                   (((2, 150, 200, 64), False)), (((1, 200, 200, 40), True))):
        q, k, v = (rng.standard_normal((b, n, d)).astype(dtype) for n in (lq, lk, lk))
        out = cuopjit.empty((b, lq, d), np.dtype(dtype))
        cls().forward(cuopjit.tensor(q), cuopjit.tensor(k), cuopjit.tensor(v), out, causal=causal)
        ref = reference(*(a.astype(np.float64) for a in (q, k, v)), causal)
        err = np.abs(out.to_numpy().astype(np.float64) - ref).max()
        assert err < tol, (np.dtype(dtype).name, b, lq, lk, d, causal, err)
cuopjit.synchronize()
print("sanitize_attention: ok")
