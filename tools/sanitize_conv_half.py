"""Run each kind of float16 / bfloat16 Convolution2D kernel once on small layers, for compute-sanitizer (memcheck,
racecheck): the wgmma f16 / bf16 kernel with its 16-byte channels_last stores through the warps' staging buffers
(a partial channel tile, 100 channels: the scalar edge), NCHW x through its copy and NCHW stores, a user epilogue
(scale, shift, residual), the folded stem (fold.py: the padded copy, its k-tiles built in shared memory from each
tile's patch, or read through overlapping TMA rows; 7x7/2 from either layout and with an epilogue, 3x3/2 at odd
sizes, batch 1) and the direct kernel (depthwise). Every result is
checked against float64 NumPy inside canaries (tests/test_conv2d_half.py), so a silent wrong answer fails too."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np  # noqa: E402

import test_conv2d_half as half_tests  # noqa: E402
from cuopjit.ops.conv2d import wgmma as conv_wgmma  # noqa: E402

rng = np.random.default_rng(0)
runs = 0
for dtype in half_tests.HALF:
    for layer, x_nhwc, y_nhwc in ((half_tests.LAYERS[0], True, True), (half_tests.LAYERS[7], True, True),
                                  (half_tests.LAYERS[0], False, False), (half_tests.LAYERS[3], True, True),
                                  (half_tests.LAYERS[4], False, True), (half_tests.LAYERS[3], False, False),
                                  ((1, 3, 33, 35, 32, 3, 2, 1, 1, False, True), True, False)):
        half_tests._run(rng, dtype, layer, x_nhwc, y_nhwc)
        runs += 1
    half_tests.test_epilogue_scale_shift_residual(rng, None, dtype, half_tests.LAYERS[0])
    half_tests.test_epilogue_scale_shift_residual(rng, None, dtype, half_tests.LAYERS[3])
    runs += 4
    view_first = conv_wgmma.fold_choices      # the stem's other mode (fold.py), a tuning candidate, made first
    conv_wgmma.fold_choices = lambda *a: sorted(view_first(*a), key=lambda c: c.fold != "smem")
    for x_nhwc in (True, False):
        half_tests._run(rng, dtype, half_tests.LAYERS[3], x_nhwc, not x_nhwc)
        runs += 1
    half_tests.test_epilogue_scale_shift_residual(rng, None, dtype, half_tests.LAYERS[3])
    runs += 2
    conv_wgmma.fold_choices = view_first
print(f"{runs} half Convolution2D runs checked")
