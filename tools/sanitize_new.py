"""Exercise this session's new kernels once each, for compute-sanitizer (memcheck / racecheck)."""
import numpy as np
import cuopjit

rng = np.random.default_rng(0)
# Softmax over a short non-last axis, float32, in the fixed class (axis 9..16, inner >= 68, multiple of 4)
x = rng.standard_normal((12, 4, 68)).astype(np.float32)
y = cuopjit.zeros(list(x.shape))
cuopjit.SoftmaxFloat().forward(cuopjit.tensor(x), y, axis=0)
ref = np.exp(x - x.max(0)) / np.exp(x - x.max(0)).sum(0)
assert np.allclose(y.to_numpy(), ref, atol=1e-6), "softmax"
# A user elementwise kernel with a per-channel broadcast
op = cuopjit.ElementwiseFloat("out = relu(x * scale + shift + r)")
n, c, h, w = 2, 8, 5, 7
xs = rng.standard_normal((n, c, h, w)).astype(np.float32)
s = rng.standard_normal((c, 1, 1)).astype(np.float32)
t = rng.standard_normal((c, 1, 1)).astype(np.float32)
r = rng.standard_normal((n, c, h, w)).astype(np.float32)
out = cuopjit.zeros([n, c, h, w])
op.forward(x=cuopjit.tensor(xs), scale=cuopjit.tensor(s), shift=cuopjit.tensor(t), r=cuopjit.tensor(r), out=out)
assert np.allclose(out.to_numpy(), np.maximum(xs * s + t + r, 0), atol=1e-5), "elementwise"
# A GEMM with an epilogue, where the operator takes one
g = cuopjit.GemmFloat()
a = rng.standard_normal((67, 45)).astype(np.float32)
b = rng.standard_normal((45, 33)).astype(np.float32)
bias = rng.standard_normal(33).astype(np.float32)
g.set_weight(cuopjit.tensor(b))
if hasattr(g, "set_epilogue"):
    g.set_epilogue("relu(acc + bias)", bias=cuopjit.tensor(bias))
    ref = np.maximum(a @ b + bias, 0)
else:
    ref = a @ b
cc = cuopjit.zeros([67, 33])
g.forward(cuopjit.tensor(a), cc)
assert np.allclose(cc.to_numpy(), ref, atol=1e-3), "gemm epilogue"
cuopjit.synchronize()
print("sanitize_new: ok")
