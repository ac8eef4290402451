"""Run the 16-bit GEMV kernels once each for compute-sanitizer (memcheck / racecheck), checked against float64:
gemv_n (16-byte vectors; scalar loads of an unaligned length; 1024-thread row groups of few long rows) and gemv_t
(one launch; split rows with float32 partials and gemv_reduce, beta reading y), float16 and bfloat16; then the
kernels whose plans changed with them: the channels_last global pool in one launch (narrowed column chunks; its
fixed-order tree over 128 row lanes in shared memory) and, beside it, the channels_last BatchNorm apply.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_gemv_half.py
"""
import ml_dtypes
import numpy as np

import cuopjit

from sanitizer_data import close, half
CL = cuopjit.CHANNELS_LAST


for dtype, tol in (("float16", 4e-3), (np.dtype(ml_dtypes.bfloat16), 2e-2)):
    name = "Half" if dtype == "float16" else "BFloat16"
    gemv = getattr(cuopjit, "Gemv" + name)
    for m, n, beta in ((257, 1024, 0.0), (129, 1001, 0.0), (7, 20000, 0.0), (4096, 512, 0.5), (96, 3000, 0.0)):
        a = half((m, n), dtype)
        for trans in (False, True):
            x = half(m if trans else n, dtype)
            y0 = half(n if trans else m, dtype)
            y = cuopjit.tensor(y0)
            op = gemv(trans, 1.0, beta)
            op.set_weight(cuopjit.tensor(a))
            op.forward(cuopjit.tensor(x), y)
            a64 = a.astype(np.float64)
            ref = (a64.T if trans else a64) @ x.astype(np.float64) + beta * y0.astype(np.float64)
            close(y.to_numpy(), ref, tol, f"gemv {name} {m}x{n} trans={trans}")
    for shape in ((3, 64, 28, 28), (2, 2048, 7, 7)):
        a = half(shape, dtype, 2.0)
        x = cuopjit.empty(a.shape, a.dtype, layout=CL).copy_from(a)
        g = cuopjit.empty(shape[:2], dtype)
        getattr(cuopjit, "GlobalAveragePool2D" + name)().forward(x, g)
        close(g.to_numpy(), a.astype(np.float64).mean(axis=(2, 3)), tol, f"global avg {shape}")
    a = half((8, 64, 28, 28), dtype, 2.0, 0.5)
    x = cuopjit.empty(a.shape, a.dtype, layout=CL).copy_from(a)
    y = cuopjit.empty(a.shape, a.dtype, layout=CL)
    getattr(cuopjit, "BatchNorm" + name)().train(False).forward(x, y)
    close(y.to_numpy(), a.astype(np.float64) / np.sqrt(1 + 1e-5), 4 * tol, "batchnorm nhwc")
cuopjit.synchronize()
print("sanitize_gemv_half: ok")
