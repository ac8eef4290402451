"""Window pools: MaxPool2D and AveragePool2D over NCHW or channels_last (the family `pool2d`, ops "max" and
"avg"; channels_last plans in nhwc.py).

The JITConfig fields' effects and the shape rules are in `common`'s docstring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...build import pipeline
from ...config import ConfigSnapshot
from ...run.plan import Family, KernelLaunch, Plan, i32, i64, ptr
from ...target import Target
from ...layout import CHANNELS_LAST, CONTIGUOUS
from ...tensor import Tensor
from ..base import Operator, cdiv, dtype_tag, scalar_t, vector_width, typed
from ..layouts import same_layout
from ..elementwise.kernels import DTYPES, half_params
from . import nhwc
from .common import DEFAULT_THREADS, OPT_VECTORS, TEMPLATE, check_tile_size, units
from ..choice import kernel_choice


class Window(NamedTuple):
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int


# --- window pools --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowProblem:
    """Pool `planes` (N * C) planes of h x w into oh x ow under `window`; x and y 16-byte alignment.
    channels_last `layout`: `planes` is N and `channels` C (pixels of C channels)."""
    op: str
    dtype: str
    planes: int
    h: int
    w: int
    oh: int
    ow: int
    window: Window
    aligned_in: bool
    aligned_out: bool
    layout: str = CONTIGUOUS
    channels: int = 1


WindowChoice = kernel_choice(
    "WindowChoice", "threads opt vec_in vec_out",
    lambda c: f"o{c.opt}_{'v' if c.vec_in else 's'}{'v' if c.vec_out else 's'}_b{c.threads}",
    "Threads per block, adjacent outputs per thread, 16-byte loads / stores.")


def outputs_per_thread(dtype: np.dtype, OW: int) -> int:
    """Adjacent outputs per thread: one 16-byte store's worth, or 1 for rows narrower than that."""
    vec = vector_width(dtype)
    return OPT_VECTORS * vec if OW >= OPT_VECTORS * vec else (vec if OW >= vec else 1)


def window_choices(problem: WindowProblem, cfg: ConfigSnapshot, target: Target) -> list[Any]:
    """The one kernel shape `cfg` names; 16-byte accesses only where pointers, W, OW and the span line up
    (channels_last: where C and the pointers do)."""
    check_tile_size(cfg)
    if problem.layout == CHANNELS_LAST:
        return nhwc.choices(problem, cfg, target, problem.aligned_in and problem.aligned_out, window=True)
    dtype, win = np.dtype(problem.dtype), problem.window
    vec = vector_width(dtype)
    simple = cfg.kernel_type == "simple"
    opt = 1 if simple else (cfg.tile_size or outputs_per_thread(dtype, problem.ow))
    coalesce = cfg.enable_memory_coalescing and not simple
    padded = win.pw == 0 or (dtype.itemsize == 2 and win.pw <= vec)   # 16-bit rows: VEC_PAD (pool.cu.jinja)
    vec_in = bool(coalesce and problem.aligned_in and problem.w % vec == 0 and padded
                  and (opt * win.sw) % vec == 0)
    vec_out = bool(coalesce and problem.aligned_out and problem.ow % vec == 0 and opt % vec == 0)
    return [WindowChoice(cfg.block_size or DEFAULT_THREADS, opt, vec_in, vec_out, opts=pipeline.compile_opts(cfg))]


def window_plan(problem: WindowProblem, choice: Any, target: Target) -> Plan:
    """One launch over every output group: x = operand 0, y = operand 1."""
    if isinstance(choice, nhwc.NhwcChoice):
        return nhwc.window_plan(problem, choice, target)
    dtype, win, threads = np.dtype(problem.dtype), problem.window, choice.threads
    groups = cdiv(problem.ow, choice.opt)
    total = problem.planes * problem.oh * groups
    grid = min(cdiv(total, threads), 2 ** 31 - 1)
    wide = total + grid * threads >= 2 ** 31 or problem.planes * problem.h * problem.w >= 2 ** 31
    params = {"scalar_t": scalar_t(dtype), "unroll": True, "op": problem.op, "kernel": "pool2d",
              "THREADS": threads, "VEC": vector_width(dtype), "KH": win.kh, "KW": win.kw, "SH": win.sh,
              "SW": win.sw, "PH": win.ph, "PW": win.pw, "OPT": choice.opt, "VEC_IN": choice.vec_in,
              "VEC_OUT": choice.vec_out, "WIDE": wide, **half_params(dtype)}
    if choice.vec_in and win.pw > 0:
        params["VEC_PAD"] = True
    name = (f"{problem.op}pool2d_{dtype_tag(dtype)}_k{win.kh}x{win.kw}_s{win.sh}x{win.sw}_p{win.ph}x{win.pw}"
            f"_{choice.label}" + ("_wide" if wide else ""))
    spec = pipeline.make_spec(TEMPLATE, "pool2d", name, params, choice.opts)
    args = (ptr(0), ptr(1), i64(total), i32(problem.h), i32(problem.w), i32(problem.oh), i32(problem.ow),
            i32(groups))
    return Plan((KernelLaunch(spec, (grid,), (threads,), args, units=units(problem.dtype)),), ("x", "y"),
                choice=choice.label)


def window_problems(op: str) -> list[WindowProblem]:
    """The spec's 2x2 pool on 32x64x56x56, a padded 3x3 stride-1 pool, and an odd unaligned one; channels_last:
    ResNet's 3x3/2 padded pool on 32x256x56x56 and an odd 2x2 one (C = 5)."""
    cases = ((Window(2, 2, 2, 2, 0, 0), 32 * 64, 56, 56, 28, 28, True),
             (Window(3, 3, 1, 1, 1, 1), 32 * 64, 56, 56, 56, 56, True),
             (Window(2, 2, 2, 2, 0, 0), 7, 33, 33, 16, 16, False))
    nhwc_cases = ((Window(3, 3, 2, 2, 1, 1), 32, 256, 56, 56, 28, 28, True),
                  (Window(2, 2, 2, 2, 0, 0), 2, 5, 13, 7, 6, 3, False))
    return ([WindowProblem(op, dt, planes, h, w, oh, ow, win, aligned, aligned) for dt in DTYPES
             for win, planes, h, w, oh, ow, aligned in cases]
            + [WindowProblem(op, dt, n, h, w, oh, ow, win, aligned, aligned, CHANNELS_LAST, c)
               for dt in DTYPES for win, n, c, h, w, oh, ow, aligned in nhwc_cases])


def window_family(op: str) -> Family:
    """The window-pool family for op "max" or "avg"."""
    return Family(f"{op}pool2d", window_choices, window_plan, lambda: window_problems(op))


class Pool2D(Operator):
    """Window pooling over NCHW or channels_last (x and y alike): `forward(x, y, **window)` returns y (see the
    module docstring)."""

    op = "max"
    family = window_family("max")

    def __init__(self, kernel_h: int = 2, kernel_w: int = 2, stride_h: int | None = None,
                 stride_w: int | None = None, pad_h: int = 0, pad_w: int = 0):
        super().__init__()
        self._defaults = {"kernel_h": kernel_h, "kernel_w": kernel_w, "stride_h": stride_h,
                          "stride_w": stride_w, "pad_h": pad_h, "pad_w": pad_w}
        self._window(**self._defaults)  # validate now

    def _window(self, kernel_h=None, kernel_w=None, stride_h=None, stride_w=None, pad_h=None, pad_w=None) -> Window:
        d = self._defaults
        kh = int(kernel_h if kernel_h is not None else d["kernel_h"])
        kw = int(kernel_w if kernel_w is not None else d["kernel_w"])
        sh = stride_h if stride_h is not None else (d["stride_h"] if kernel_h is None else None)
        sw = stride_w if stride_w is not None else (d["stride_w"] if kernel_w is None else None)
        win = Window(kh, kw, int(sh if sh is not None else kh), int(sw if sw is not None else kw),
                     int(pad_h if pad_h is not None else d["pad_h"]), int(pad_w if pad_w is not None else d["pad_w"]))
        name = type(self).__name__
        if min(win.kh, win.kw, win.sh, win.sw) < 1:
            raise ValueError(f"{name}: kernel ({win.kh}x{win.kw}) and stride ({win.sh}x{win.sw}) must be >= 1")
        if win.ph < 0 or win.pw < 0 or 2 * win.ph > win.kh or 2 * win.pw > win.kw:
            raise ValueError(f"{name}: padding ({win.ph}x{win.pw}) must be between 0 and half the kernel "
                             f"({win.kh}x{win.kw})")
        return win

    def output_shape(self, shape, **kwargs: Any) -> tuple[int, int, int, int]:
        """N x C x OH x OW for an input of `shape` under this pool's window (and any overrides)."""
        win = self._window(**kwargs)
        n, c, h, w = shape
        return (n, c, (h + 2 * win.ph - win.kh) // win.sh + 1, (w + 2 * win.pw - win.kw) // win.sw + 1)

    def bind(self, x: Tensor, y: Tensor, **kwargs: Any) -> tuple:
        key = (x.plan_key, y.plan_key, tuple(sorted(kwargs.items())))
        return key, (x.ptr, y.ptr), y

    def problem(self, x: Tensor, y: Tensor, **kwargs: Any) -> WindowProblem | None:
        """kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w override the constructor's for this call."""
        name = type(self).__name__
        unknown = set(kwargs) - set(self._defaults)
        if unknown:
            raise TypeError(f"{name}.forward got unexpected keyword arguments {sorted(unknown)}: allowed are "
                            f"{', '.join(self._defaults)}")
        win = self._window(**kwargs)
        x = self.check_operand("x", x, ndim=4, layouts=(CONTIGUOUS, CHANNELS_LAST))
        y = self.check_operand("y", y, layouts=(CONTIGUOUS, CHANNELS_LAST))
        n, c, h, w = x.shape
        oh, ow = (h + 2 * win.ph - win.kh) // win.sh + 1, (w + 2 * win.pw - win.kw) // win.sw + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{name}: x of shape {list(x.shape)} is smaller than the {win.kh}x{win.kw} window "
                             f"(padding {win.ph}x{win.pw})")
        if tuple(y.shape) != (n, c, oh, ow):
            raise ValueError(f"{name}: y has shape {list(y.shape)}, expected {[n, c, oh, ow]} (x of shape "
                             f"{list(x.shape)}, kernel {win.kh}x{win.kw}, stride {win.sh}x{win.sw}, "
                             f"padding {win.ph}x{win.pw})")
        layout = same_layout(name, [("x", x), ("y", y)])
        if y.size == 0:
            return None
        if layout == CHANNELS_LAST:
            return WindowProblem(self.op, self.dtype.name, n, h, w, oh, ow, win, (x.ptr & 15) == 0, (y.ptr & 15) == 0,
                                 layout, c)
        return WindowProblem(self.op, self.dtype.name, n * c, h, w, oh, ow, win, (x.ptr & 15) == 0,
                             (y.ptr & 15) == 0)

    def work(self, x: Tensor, y: Tensor, **kwargs: Any) -> tuple[float, float]:
        win = self._window(**kwargs)
        return float(y.size * win.kh * win.kw), float((x.size + y.size) * self.dtype.itemsize)


class AveragePool2D(Pool2D):
    """Window average pooling, padding counted in the divisor."""
    op = "avg"
    family = window_family("avg")


MaxPool2DFloat, MaxPool2DDouble, MaxPool2DHalf, MaxPool2DBFloat16 = typed(
    Pool2D, "MaxPool2D", "max pooling", DTYPES)
AveragePool2DFloat, AveragePool2DDouble, AveragePool2DHalf, AveragePool2DBFloat16 = typed(
    AveragePool2D, "AveragePool2D", "average pooling, padding counted", DTYPES)


