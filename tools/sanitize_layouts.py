"""Run each channels_last / layout-copy kernel once on small odd shapes, for compute-sanitizer (memcheck, racecheck):
the transposes (wide, narrow and square tiles), BatchNorm NHWC (apply, stats + finalize + apply), the NHWC window
pools and global pools (one split and several), ReLU and an elementwise program on channels_last, Flatten of
channels_last. Every result is checked against NumPy, so a silent wrong answer fails too."""
import numpy as np

import cuopjit

rng = np.random.default_rng(0)
CL = "channels_last"


def cl(a):
    return cuopjit.empty(a.shape, a.dtype, layout=CL).copy_from(a)


for dtype in (np.float32, np.float64):
    for shape in ((2, 3, 7, 13), (1, 33, 5, 7), (2, 64, 9, 5)):
        a = rng.standard_normal(shape).astype(dtype)
        t = cuopjit.tensor(a)
        assert np.array_equal(cuopjit.channels_last(t).to_numpy(), a), "to channels_last"
        assert np.array_equal(cuopjit.contiguous(cl(a)).to_numpy(), a), "to contiguous"
        m = rng.standard_normal(shape[-2:]).astype(dtype)
        assert np.array_equal(cuopjit.contiguous(cuopjit.tensor(np.ascontiguousarray(m.T)).mT).to_numpy(), m)
        c = shape[1]
        for training in (False, True):
            bn = (cuopjit.BatchNormFloat if dtype == np.float32 else cuopjit.BatchNormDouble)().train(training)
            y = cuopjit.empty(shape, dtype, layout=CL)
            bn.forward(cl(a), y)
            mean, var = a.astype(np.float64).mean((0, 2, 3)), a.astype(np.float64).var((0, 2, 3))
            ref = (a - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + 1e-5) if training else \
                a / np.sqrt(1 + 1e-5)
            assert np.allclose(y.to_numpy(), ref, atol=1e-4), f"batchnorm training={training}"
        mp = (cuopjit.MaxPool2DFloat if dtype == np.float32 else cuopjit.MaxPool2DDouble)(3, 3, 2, 2, 1, 1)
        y = cuopjit.empty(mp.output_shape(shape), dtype, layout=CL)
        mp.forward(cl(a), y)
        assert np.all(np.isfinite(y.to_numpy())), "maxpool"
        for hw in ((5, 7), (56, 56)):
            g = rng.standard_normal(shape[:2] + hw).astype(dtype)
            gp = (cuopjit.GlobalAveragePool2DFloat if dtype == np.float32 else cuopjit.GlobalAveragePool2DDouble)()
            y = cuopjit.empty(shape[:2], dtype)
            gp.forward(cl(g), y)
            assert np.allclose(y.to_numpy(), g.astype(np.float64).mean((2, 3)), atol=1e-5), "global pool"
        relu = (cuopjit.ReluFloat if dtype == np.float32 else cuopjit.ReluDouble)()
        x = cl(a)
        relu.forward(x)
        assert np.array_equal(x.to_numpy(), np.maximum(a, 0)), "relu"
        prog = (cuopjit.ElementwiseFloat if dtype == np.float32 else cuopjit.ElementwiseDouble)("o = x * s + 1")
        s = rng.standard_normal((c, 1, 1)).astype(dtype)
        o = cuopjit.empty(shape, dtype, layout=CL)
        prog.forward(x=cl(a), s=cuopjit.tensor(s), o=o)
        assert np.allclose(o.to_numpy(), a * s + 1, atol=1e-5), "elementwise"
        f = cuopjit.empty((shape[0], int(np.prod(shape[1:]))), dtype)
        (cuopjit.FlattenFloat if dtype == np.float32 else cuopjit.FlattenDouble)().forward(cl(a), f)
        assert np.array_equal(f.to_numpy(), a.reshape(shape[0], -1)), "flatten"
cuopjit.synchronize()
print("sanitize_layouts: ok")
