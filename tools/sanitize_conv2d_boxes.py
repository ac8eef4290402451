"""Run each kind of Convolution2D kernel tests/test_conv2d_boxes.py adds once on small layers, for compute-sanitizer
(memcheck, racecheck): the wgmma kernel's exact boxes (several images with a partial last group, whole rows with a
partial last box, QN past the box's pixels) and grouped boxes on a channels_last y in TF32 and 3xTF32 (lo parts in
shared memory and from a copy), an NCHW x through its copy, a user epilogue, and the 8 x 8 SIMT thread tile on two
layout pairings. Every result is checked against float64 NumPy inside canaries, so a silent wrong answer fails too."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np  # noqa: E402

import cuopjit  # noqa: E402
from cuopjit.ops.conv2d import implicit  # noqa: E402
from cuopjit.ops.conv2d.problem import ConvChoice  # noqa: E402
from cuopjit.target import of_device  # noqa: E402
import test_conv2d_boxes as boxes_tests  # noqa: E402
from test_conv2d import MODES  # noqa: E402
from test_conv2d_layouts import _guarded, _tensor  # noqa: E402

rng = np.random.default_rng(0)
target = of_device(cuopjit.get_device())
runs = 0
for mode in ("tf32", "3xtf32"):
    _, _, per_tap, floor = MODES[mode]
    for layer, x_nhwc in ((boxes_tests.BOX_LAYERS[0], True), (boxes_tests.BOX_LAYERS[1], True),
                          (boxes_tests.BOX_LAYERS[3], True), (boxes_tests.BOX_LAYERS[0], False)):
        conv, x, ref = boxes_tests._data(rng, layer, x_nhwc)
        plans = boxes_tests._box_plans(conv.problem(x, _guarded(ref.shape, np.float32, True)), mode == "3xtf32",
                                       target)
        for _, choice in plans[:1] + plans[2:] if x_nhwc else plans[-1:]:   # NCHW x: the lo copy with 3xTF32
            boxes_tests._run_plan(conv, choice, x, _guarded(ref.shape, np.float32, True), per_tap, floor, ref)
            runs += 1
    layer = boxes_tests.BOX_LAYERS[0]
    conv, x, ref = boxes_tests._data(rng, layer, True, epilogue=True)
    s, r = rng.standard_normal(layer[4]).astype(np.float32), rng.standard_normal(ref.shape).astype(np.float32)
    conv.set_epilogue("relu(acc * s + r)", s=cuopjit.tensor(s))
    rt = _tensor(r, True)
    _, choice = boxes_tests._box_plans(conv.problem(x, _guarded(ref.shape, np.float32, True), r=rt),
                                       mode == "3xtf32", target)[2]
    boxes_tests._run_plan(conv, choice, x, _guarded(ref.shape, np.float32, True), per_tap, floor,
                          np.maximum(ref * s[None, :, None, None] + r, 0), r=rt)
    runs += 1
_, _, per_tap, floor = MODES["f32"]
for x_nhwc, y_nhwc in ((True, True), (False, False)):
    conv, x, ref = boxes_tests._data(rng, boxes_tests.SIMT_LAYERS[0], x_nhwc)
    boxes_tests._run_plan(conv, ConvChoice(implicit.R8, implicit.R8.threads), x,
                          _guarded(ref.shape, np.float32, y_nhwc), per_tap, floor, ref)
    runs += 1
cuopjit.synchronize()
print(f"sanitize_conv2d_boxes: ok ({runs} plans)")
