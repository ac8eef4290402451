"""Exercise the TF32 wgmma Conv2D's residual staged in shared memory by TMA (conv2d_wgmma_residual.cuh.jinja) once
per shape of its use, for compute-sanitizer (memcheck / racecheck): NCHW with more tiles than blocks (the staged
tile's barriers over several tiles; y stored over it by TMA), a channel tile cut by the output, channels_last
whole-row boxes and cut 8x8 boxes, two staged operands, and an unaligned residual (global loads in the same kernel). Every result is checked against NumPy.

    compute-sanitizer --tool racecheck --error-exitcode 9 python3 tools/sanitize_conv_residual.py
"""
import numpy as np

import cuopjit
from cuopjit.tensor import Tensor

rng = np.random.default_rng(0)


def conv(n, c, hw, o, kh, nhwc=False, two=False, unaligned=False, tile=0):
    pad = kh // 2
    layout = "channels_last" if nhwc else "contiguous"
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    wt = rng.standard_normal((o, c, kh, kh)).astype(np.float32)
    op = cuopjit.Convolution2DFloat(c, o, kh, kh, pad_h=pad, pad_w=pad)
    op.set_weight(cuopjit.tensor(wt))
    scale = rng.standard_normal(o).astype(np.float32)
    op.set_epilogue("relu(acc * scale + r1) + 0.5 * r2" if two else "relu(acc * scale + r1)",
                    scale=cuopjit.tensor(scale))
    shape = (n, o, hw, hw)
    r = {nm: rng.standard_normal(shape).astype(np.float32) for nm in (("r1", "r2") if two else ("r1",))}
    if unaligned:     # 4 bytes past a 16-byte boundary
        whole = cuopjit.empty((r["r1"].size + 1,)).copy_from(np.concatenate([[0], r["r1"].ravel()]).astype(np.float32))
        given = {"r1": Tensor._view(whole.ptr + 4, shape, np.dtype(np.float32), whole.device, whole)}
    else:
        given = {nm: cuopjit.empty(shape, layout=layout).copy_from(v) for nm, v in r.items()}
    y = cuopjit.empty(shape, layout=layout).fill(np.nan)
    run = cuopjit.JITConvolution2DFloat(op)
    cfg = cuopjit.JITConfig()
    cfg.enable_tensor_core = True
    cfg.tile_size = tile
    run.set_jit_config(cfg)
    run.forward(cuopjit.empty(x.shape, layout=layout).copy_from(x), y, **given)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    acc = np.zeros(shape)
    for i in range(kh):
        for j in range(kh):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + hw, j:j + hw], wt[:, :, i, j])
    want = np.maximum(acc * scale.reshape(-1, 1, 1) + r["r1"], 0) + (0.5 * r["r2"] if two else 0)
    got = y.to_numpy()
    err = np.abs(got - want).max() / np.abs(want).max()
    name = run.get_performance_profile().kernel_name
    assert "_rt" in name and err < 5e-3, f"{name}: relative error {err:.2e}"


conv(12, 32, 16, 40, 3, tile=64)           # NCHW: 192 tiles of 64 x 8x8 on at most 132 blocks; 40 of 64 channels
conv(2, 64, 12, 72, 3, two=True)           # two staged operands
conv(34, 64, 7, 68, 3, nhwc=True)          # channels_last, whole 7x7 images
conv(6, 32, 20, 64, 3, nhwc=True, tile=64) # channels_last 8x8 boxes cut at 20 columns, y stored by TMA
conv(2, 32, 12, 40, 3, unaligned=True)     # the residual from global memory
conv(6, 64, 28, 256, 1, nhwc=True)         # 1x1 channels_last: the convolution, not the GEMM, 4 stages beside it
conv(3, 128, 14, 200, 1, nhwc=True)        # the same, a channel tile cut by the output, 588 pixels over whole rows
cuopjit.synchronize()
print("sanitize_conv_residual: ok")
