"""Exercise this session's new product kernels once each, for compute-sanitizer (memcheck / racecheck): TF32 wgmma
GEMM on a transposed weight with the staged epilogue store (bias + GELU + residual), a one-row product (GEMV route),
TF32 split-K slices, BatchMatMul on a transposed view, and Conv2D on channels_last (wgmma reading NHWC through TMA,
the 1x1 GEMM route, the SIMT NHWC kernel, split-K for a small output). Every result is checked against NumPy.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_new.py
"""
import math

import numpy as np

import cuopjit

rng = np.random.default_rng(0)
TF32 = cuopjit.JITConfig()
TF32.enable_tensor_core = True


def close(got, want, what, tol):
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < tol, f"{what}: relative error {err:.2e}"


def gemm(m, n, k, epilogue=False):
    a, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    op = cuopjit.GemmFloat()
    op.set_weight(cuopjit.tensor(w).mT)               # nn.Linear's x @ W.T, W read where it lies
    want = a.astype(np.float64) @ w.T
    if epilogue:
        bias, r = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
        op.set_epilogue("gelu(acc + bias) + r", bias=cuopjit.tensor(bias), r=cuopjit.tensor(r))
        z = want + bias
        want = 0.5 * z * (1 + np.vectorize(math.erf)(z / np.sqrt(2))) + r
    c = cuopjit.empty((m, n)).fill(np.nan)
    run = cuopjit.JITGemmFloat(op)
    run.set_jit_config(TF32)
    run.forward(cuopjit.tensor(a), c)
    close(c.to_numpy(), want, f"gemm {m}x{n}x{k}", 5e-3)


for m, n, k, epi in ((67, 200, 96, True), (1, 300, 129, False), (64, 256, 4096, False)):
    gemm(m, n, k, epi)

q, kk = rng.standard_normal((3, 33, 64)).astype(np.float32), rng.standard_normal((3, 40, 64)).astype(np.float32)
s = cuopjit.empty((3, 33, 40)).fill(np.nan)
bmm = cuopjit.JITBatchMatMulFloat(cuopjit.BatchMatMulFloat())
bmm.set_jit_config(TF32)
bmm.forward(cuopjit.tensor(q), cuopjit.tensor(kk).mT, s)
close(s.to_numpy(), q.astype(np.float64) @ np.swapaxes(kk, 1, 2), "bmm Q @ K.mT", 5e-3)


def conv(n, c, h, w, o, kh, stride, pad, tensor_cores):
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, kh, kh)).astype(np.float32)
    op = cuopjit.Convolution2DFloat(c, o, kh, kh, stride, stride, pad_h=pad, pad_w=pad)
    op.set_weight(cuopjit.tensor(wt))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kh) // stride + 1
    y = cuopjit.empty((n, o, oh, ow), layout="channels_last").fill(np.nan)
    run = cuopjit.JITConvolution2DFloat(op)
    if tensor_cores:
        run.set_jit_config(TF32)
    run.forward(cuopjit.empty(x.shape, layout="channels_last").copy_from(x), y)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kh):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            want += np.einsum("nchw,oc->nohw", patch, wt[:, :, i, j])
    close(y.to_numpy(), want, f"conv {c}->{o} {kh}x{kh}/{stride} tc={tensor_cores}", 5e-3 if tensor_cores else 1e-5)


conv(2, 32, 9, 11, 64, 3, 1, 1, True)       # wgmma, NHWC read by TMA
conv(2, 64, 7, 7, 96, 1, 1, 0, True)        # 1x1 as a GEMM on NHWC
conv(2, 16, 9, 7, 24, 3, 1, 1, False)       # SIMT NHWC
conv(1, 128, 7, 7, 128, 3, 1, 1, False)     # a small output: split-K
cuopjit.synchronize()
print("sanitize_new: ok")
