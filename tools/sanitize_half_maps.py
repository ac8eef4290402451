"""Run one kernel of each 16-bit memory-bound kind once, for compute-sanitizer (memcheck / racecheck), each checked
against float64: the maps (relu, scal, axpy; copy's bit moves, vector and scalar), dot's partial and final sums, an
elementwise program (per-channel vectors over NHWC, broadcasts over NCHW, a strided input), window and global pools
over NCHW and channels_last (the split global pool's float partials and their combine), batch norm (per-plane
inference and folded training, flat training with its finalize, NHWC inference and training with the narrowed
stats tree of 1024 threads), View and the layout copies.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_half_maps.py
"""
import ml_dtypes
import numpy as np

import cuopjit

import sanitizer_data as support
CL = cuopjit.CHANNELS_LAST


def half(shape, dtype, scale=2.0, offset=0.0):
    return support.half(shape, dtype, scale, offset)


def close(got, want, tol, what):
    support.close(got, want, tol, what, relative=False)


def cl(a):
    return cuopjit.empty(a.shape, a.dtype, layout=CL).copy_from(a)


for dtype, tol in (("float16", 2e-2), (np.dtype(ml_dtypes.bfloat16), 0.15)):
    name = "Half" if dtype == "float16" else "BFloat16"
    op = {k: getattr(cuopjit, k + name) for k in ("Relu", "Scal", "Axpy", "Copy", "Dot", "Elementwise", "MaxPool2D",
                                                   "AveragePool2D", "GlobalAveragePool2D", "GlobalMaxPool2D",
                                                   "BatchNorm", "View")}
    for n in (4099, 1 << 16):                                    # scalar tail; vectors
        a, b = half(n, dtype), half(n, dtype)
        x, y = cuopjit.tensor(a), cuopjit.tensor(b)
        out = cuopjit.empty([n], dtype)
        op["Relu"]().forward(x, out)
        close(out.to_numpy(), np.maximum(a.astype(np.float64), 0), 0, "relu")
        op["Axpy"](0.5).forward(x, y)
        close(y.to_numpy(), 0.5 * a.astype(np.float64) + b, tol, "axpy")
        op["Copy"]().forward(x, out)
        assert np.array_equal(out.to_numpy().view(np.uint16), a.view(np.uint16)), "copy"
        op["Scal"](2.0).forward(out)
        close(out.to_numpy(), 2 * a.astype(np.float64), tol, "scal")
        want = a.astype(np.float64) @ b.astype(np.float64)
        close(op["Dot"]().forward(x, cuopjit.tensor(b)), want, 1.0 + 0.02 * abs(want), "dot")
    xs, r = half((2, 16, 5, 7), dtype), half((2, 16, 5, 7), dtype)
    s, t = half((16, 1, 1), dtype, 1.0), half((16, 1, 1), dtype, 1.0)
    ref = np.maximum(xs.astype(np.float64) * s + t + r, 0)
    tail = op["Elementwise"]("out = relu(x * scale + shift + r)")
    for lay in (cuopjit.CONTIGUOUS, CL):
        conv = cl if lay == CL else cuopjit.tensor
        y = cuopjit.empty(xs.shape, dtype, layout=lay)
        tail.forward(x=conv(xs), scale=cuopjit.tensor(s), shift=cuopjit.tensor(t), r=conv(r), out=y)
        close(y.to_numpy(), ref, 4 * tol, f"tail {lay}")
    tt, z = half((3, 16, 7), dtype), half((3, 1, 7), dtype)        # z varies along axes 0 and 2: strided
    y = cuopjit.empty([3, 16, 7], dtype)
    op["Elementwise"]("out = x + z").forward(x=cuopjit.tensor(tt), z=cuopjit.tensor(z), out=y)
    close(y.to_numpy(), tt.astype(np.float64) + z, tol, "strided")
    for shape in ((2, 16, 14, 14), (1, 3, 7, 9)):
        a = half(shape, dtype)
        a64 = a.astype(np.float64)
        for lay in (cuopjit.CONTIGUOUS, CL):
            conv = cl if lay == CL else cuopjit.tensor
            y = cuopjit.empty((shape[0], shape[1], (shape[2] - 1) // 2 + 1, (shape[3] - 1) // 2 + 1), dtype,
                              layout=lay)
            op["MaxPool2D"](3, 3, 2, 2, 1, 1).forward(conv(a), y)
            assert np.all(np.isfinite(y.to_numpy().astype(np.float32))), "max pool"
            op["AveragePool2D"](2, 2).forward(conv(a), cuopjit.empty((shape[0], shape[1], shape[2] // 2,
                                                                      shape[3] // 2), dtype, layout=lay))
            g = cuopjit.empty(shape[:2], dtype)
            op["GlobalAveragePool2D"]().forward(conv(a), g)
            close(g.to_numpy(), a64.mean(axis=(2, 3)), tol, f"global avg {lay}")
            op["GlobalMaxPool2D"]().forward(conv(a), g)
            close(g.to_numpy(), a64.max(axis=(2, 3)), 0, f"global max {lay}")
    for shape, lay, threads in (((4, 16, 14, 14), cuopjit.CONTIGUOUS, 0), ((64, 24), cuopjit.CONTIGUOUS, 0),
                                ((4, 16, 14, 14), CL, 0), ((2, 64, 7, 7), CL, 1024)):
        a = half(shape, dtype, 2.0, 0.5)
        a64 = a.astype(np.float64)
        axes = (0,) + tuple(range(2, a.ndim))
        for training in (False, True):
            bn = op["BatchNorm"]().train(training)
            jit = cuopjit.JITWrapper(bn)
            if threads:
                cfg = cuopjit.JITConfig()
                cfg.block_size = threads
                jit.set_jit_config(cfg)
            y = cuopjit.empty(shape, dtype, layout=lay)
            jit.forward(cl(a) if lay == CL else cuopjit.tensor(a), y)
            mean, var = (a64.mean(axis=axes), a64.var(axis=axes)) if training else (0.0, 1.0)
            sh = (1, -1) + (1,) * (a.ndim - 2)
            ref = (a64 - np.reshape(mean, sh) if training else a64) / np.sqrt(np.reshape(var, sh) + 1e-5)
            close(y.to_numpy(), ref, 4 * tol, f"batchnorm {shape} {lay} training={training}")
    a = half((3, 8, 6, 10), dtype)
    v = cuopjit.empty([2, 8, 3, 8], dtype)
    op["View"]().forward(cuopjit.tensor(a), v, [1, 0, 2, 1], [2, 8, 3, 8])
    assert np.array_equal(v.to_numpy().view(np.uint16), a[1:, :, 2:5, 1:9].view(np.uint16)), "view"
    back = cuopjit.contiguous(cuopjit.channels_last(cuopjit.tensor(a)))
    assert np.array_equal(back.to_numpy().view(np.uint16), a.view(np.uint16)), "relayout"
cuopjit.synchronize()
print("sanitize_half_maps: ok")
