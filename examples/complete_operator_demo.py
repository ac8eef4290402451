"""Every operator once, checked against NumPy: GEMM, BLAS-1, ReLU, Softmax, LayerNorm, BatchNorm,
pooling, Flatten and View, plus a JIT wrapper's profile.

    python examples/complete_operator_demo.py        (needs an NVIDIA GPU)
"""
import numpy as np

import cuopjit


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    print(f"{name:<22} relative error {err:.1e}")
    assert err < 1e-4, name


def main() -> None:
    rng = np.random.default_rng()
    a_np = rng.standard_normal((513, 257)).astype(np.float32)
    b_np = rng.standard_normal((257, 129)).astype(np.float32)
    a, b, c = cuopjit.tensor(a_np), cuopjit.tensor(b_np), cuopjit.empty([513, 129])
    gemm = cuopjit.GemmFloat()
    gemm.set_weight(b)
    gemm.forward(a, c)
    check("GEMM", c.to_numpy(), a_np @ b_np)

    x_np = rng.standard_normal(1000).astype(np.float32)
    y_np = rng.standard_normal(1000).astype(np.float32)
    x, y = cuopjit.tensor(x_np), cuopjit.tensor(y_np)
    cuopjit.AxpyFloat(1.5).forward(x, y)
    check("AXPY", y.to_numpy(), 1.5 * x_np + y_np)
    check("DOT", np.array([cuopjit.DotFloat().forward(x, x)]), np.array([x_np @ x_np]))
    cuopjit.ScalFloat(2.0).forward(x)
    check("SCAL", x.to_numpy(), 2.0 * x_np)

    m_np = rng.standard_normal((64, 1000)).astype(np.float32)
    m, out = cuopjit.tensor(m_np), cuopjit.empty([64, 1000])
    cuopjit.ReluFloat().forward(m, out)
    check("ReLU", out.to_numpy(), np.maximum(m_np, 0))
    cuopjit.SoftmaxFloat().forward(m, out, axis=-1)
    e = np.exp(m_np - m_np.max(axis=-1, keepdims=True))
    check("Softmax", out.to_numpy(), e / e.sum(axis=-1, keepdims=True))
    ln = cuopjit.LayerNormFloat()
    ln.set_gamma(cuopjit.ones([1000]))
    ln.set_beta(cuopjit.zeros([1000]))
    ln.forward(m, out)
    check("LayerNorm", out.to_numpy(),
          (m_np - m_np.mean(-1, keepdims=True)) / np.sqrt(m_np.var(-1, keepdims=True) + 1e-5))

    img_np = rng.standard_normal((8, 16, 28, 28)).astype(np.float32)
    img = cuopjit.tensor(img_np)
    bn, bn_out = cuopjit.BatchNormFloat(), cuopjit.empty(list(img_np.shape))
    for setter, value in (("set_gamma", cuopjit.ones([16])), ("set_beta", cuopjit.zeros([16])),
                          ("set_running_mean", cuopjit.zeros([16])), ("set_running_var", cuopjit.ones([16]))):
        getattr(bn, setter)(value)
    bn.forward(img, bn_out)
    check("BatchNorm (inference)", bn_out.to_numpy(), img_np / np.sqrt(1 + 1e-5))
    pooled = cuopjit.empty([8, 16, 14, 14])
    cuopjit.MaxPool2DFloat().forward(img, pooled, kernel_h=2, kernel_w=2)
    check("MaxPool2D", pooled.to_numpy(), img_np.reshape(8, 16, 14, 2, 14, 2).max(axis=(3, 5)))
    gap = cuopjit.empty([8, 16])
    cuopjit.GlobalAveragePool2DFloat().forward(img, gap)
    check("GlobalAveragePool2D", gap.to_numpy(), img_np.mean(axis=(2, 3)))
    flat = cuopjit.empty([8, 16 * 28 * 28])
    cuopjit.FlattenFloat().forward(img, flat, start_dim=1)
    check("Flatten", flat.to_numpy(), img_np.reshape(8, -1))
    view = cuopjit.empty([2, 16, 5, 5])
    cuopjit.ViewFloat().forward(img, view, [3, 0, 10, 20], [2, 16, 5, 5])
    check("View", view.to_numpy(), img_np[3:5, :, 10:15, 20:25])

    jit = cuopjit.JITSoftmaxFloat(cuopjit.SoftmaxFloat())
    cfg = cuopjit.JITConfig()
    cfg.block_size = 128
    jit.set_jit_config(cfg)
    jit.forward(m, out)
    print("JIT softmax:", jit.get_performance_profile())


if __name__ == "__main__":
    main()
