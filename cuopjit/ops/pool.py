"""2-D pooling over NCHW: MaxPool2D, AveragePool2D, GlobalMaxPool2D, GlobalAveragePool2D (Float/Double).

Window pools take kernel_h/kernel_w, stride_h/stride_w (default: the kernel) and pad_h/pad_w
(default 0, at most half the kernel, as in PyTorch) in the constructor, and any of them again as
forward keyword arguments for one call. The output must be N x C x OH x OW with
OH = (H + 2 pad_h - kernel_h) // stride_h + 1 (PyTorch's floor mode). Average pooling counts the
padding in the divisor (kernel_h * kernel_w: PyTorch's default count_include_pad=True).
Global pools reduce each H x W plane to one value; the output may be N x C or N x C x 1 x 1.
Max pools propagate NaN. Templates: templates/pool.cu.jinja, window geometry compiled in.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..tensor import Tensor
from .base import Operator, dtype_tag, scalar_t
from .elementwise import vector_width

TEMPLATE = "pool.cu.jinja"
DEFAULT_THREADS = 256
GLOBAL_ITEMS = 4
GLOBAL_THREADS = 128
OPT_VECTORS = 1      # 16-byte output vectors per thread in window pools


class Window(NamedTuple):
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int


def pool2d_kernel(dtype: np.dtype, cfg, op: str, win: Window, W: int, OW: int, aligned_in: bool,
                  aligned_out: bool, wide: bool, opt: int | None = None) -> tuple[str, str, dict]:
    """-> (template, readable name, params) of one window-pool kernel (OPT: outputs per thread)."""
    vec = vector_width(dtype)
    coalesce = cfg.enable_memory_coalescing
    if opt is None:
        opt = outputs_per_thread(dtype, OW)
    vec_in = bool(coalesce and aligned_in and W % vec == 0 and win.pw == 0 and (opt * win.sw) % vec == 0)
    vec_out = bool(coalesce and aligned_out and OW % vec == 0 and opt % vec == 0)
    threads = cfg.block_size or DEFAULT_THREADS
    params = {"scalar_t": scalar_t(dtype), "unroll": bool(cfg.enable_loop_unroll), "op": op, "kernel": "pool2d",
              "THREADS": threads, "VEC": vec, "KH": win.kh, "KW": win.kw, "SH": win.sh, "SW": win.sw,
              "PH": win.ph, "PW": win.pw, "OPT": opt, "VEC_IN": vec_in, "VEC_OUT": vec_out, "WIDE": wide}
    name = (f"{op}pool2d_{dtype_tag(dtype)}_k{win.kh}x{win.kw}_s{win.sh}x{win.sw}_p{win.ph}x{win.pw}_o{opt}"
            f"_{'v' if vec_in else 's'}{'v' if vec_out else 's'}_b{threads}" + ("_wide" if wide else ""))
    return TEMPLATE, name, params


def outputs_per_thread(dtype: np.dtype, OW: int) -> int:
    """Adjacent outputs per thread: one 16-byte store's worth, or 1 for rows narrower than that."""
    vec = vector_width(dtype)
    return OPT_VECTORS * vec if OW >= OPT_VECTORS * vec else (vec if OW >= vec else 1)


def global_pool_kernel(dtype: np.dtype, cfg, op: str, hw: int, aligned: bool) -> tuple[str, str, dict]:
    """-> (template, readable name, params) of one global-pool kernel (TPR threads per plane)."""
    vec = vector_width(dtype)
    vg = vec if (cfg.enable_memory_coalescing and aligned and hw % vec == 0) else 1
    per_thread = -(-(hw // vg) // (2 * GLOBAL_ITEMS))   # about two steps of GLOBAL_ITEMS loads per thread
    tpr = 1
    while tpr * 2 <= min(per_thread, 512):
        tpr *= 2
    threads = max(cfg.block_size or GLOBAL_THREADS, tpr)
    params = {"scalar_t": scalar_t(dtype), "unroll": bool(cfg.enable_loop_unroll), "op": op,
              "kernel": "global_pool", "THREADS": threads, "VEC": vec, "TPR": tpr, "ITEMS": GLOBAL_ITEMS,
              "VEC_G": vg}
    return TEMPLATE, f"global{op}pool_{dtype_tag(dtype)}_t{tpr}_v{vg}_b{threads}", params


class Pool2D(Operator):
    """Window pooling over NCHW (see the module docstring for the parameters)."""

    op = "max"
    uses_shared_memory = False

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

    def forward(self, x: Tensor, y: Tensor, **kwargs: Any) -> Tensor:
        """y = pool(x); keyword arguments kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w override
        the constructor's for this call; returns y."""
        try:
            key = (x.shape, y.shape, tuple(sorted(kwargs.items())), x.dtype, y.dtype, x.device, y.device,
                   (x.ptr & 15, y.ptr & 15))
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            unknown = set(kwargs) - set(self._defaults)
            if unknown:
                raise TypeError(f"{type(self).__name__}.forward got unexpected keyword arguments "
                                f"{sorted(unknown)}: allowed are {', '.join(self._defaults)}")
            win = self._window(**kwargs)
            self._check("x", x, ndim=4)
            self._check("y", y)
            n, c, h, w = x.shape
            oh, ow = (h + 2 * win.ph - win.kh) // win.sh + 1, (w + 2 * win.pw - win.kw) // win.sw + 1
            if oh < 1 or ow < 1:
                raise ValueError(f"{type(self).__name__}: x of shape {list(x.shape)} is smaller than the "
                                 f"{win.kh}x{win.kw} window (padding {win.ph}x{win.pw})")
            if tuple(y.shape) != (n, c, oh, ow):
                raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)}, expected {[n, c, oh, ow]} "
                                 f"(x of shape {list(x.shape)}, kernel {win.kh}x{win.kw}, stride {win.sh}x{win.sw}, "
                                 f"padding {win.ph}x{win.pw})")
            if y.size == 0:
                return y
            launch = self._launches[key] = self._make_launch(x, y, win)
        launch(x.ptr, y.ptr)
        return y

    def _make_launch(self, x: Tensor, y: Tensor, win: Window):
        n, c, h, w = x.shape
        _, _, oh, ow = y.shape
        opt = outputs_per_thread(self.dtype, ow)
        groups = -(-ow // opt)
        total = n * c * oh * groups
        threads = self._config.block_size or DEFAULT_THREADS
        grid = min(-(-total // threads), 2**31 - 1)
        wide = total + grid * threads >= 2**31 or n * c * h * w >= 2**31
        template, name, params = pool2d_kernel(self.dtype, self._config, self.op, win, w, ow,
                                               (x.ptr & 15) == 0, (y.ptr & 15) == 0, wide)
        return self._prepare(self._spec(template, "pool2d", name, params), (grid, 1, 1), (threads, 1, 1), 0,
                             [("ptr", x.ptr), ("ptr", y.ptr), ("i64", total), ("i32", h), ("i32", w),
                              ("i32", oh), ("i32", ow), ("i32", groups)])

    def work(self, x: Tensor, y: Tensor, **kwargs: Any) -> tuple[float, float]:
        win = self._window(**kwargs)
        return float(y.size * win.kh * win.kw), float((x.size + y.size) * self.dtype.itemsize)

    def specs(self) -> list:
        """The spec's 2x2 pool on 32x64x56x56, a padded 3x3 stride-1 pool, and an odd unaligned one."""
        out = []
        for win, w, ow, aligned in ((Window(2, 2, 2, 2, 0, 0), 56, 28, True), (Window(3, 3, 1, 1, 1, 1), 56, 56, True),
                                    (Window(2, 2, 2, 2, 0, 0), 33, 16, False)):
            template, name, params = pool2d_kernel(self.dtype, self._config, self.op, win, w, ow, aligned, aligned,
                                                   False)
            out.append(self._spec(template, "pool2d", name, params))
        return out


class GlobalPool2D(Operator):
    """Reduce each H x W plane of an NCHW tensor to one value (output N x C or N x C x 1 x 1)."""

    op = "max"
    uses_shared_memory = False  # only one word per warp for the block reduction

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        """y[n, c] = reduce(x[n, c, :, :]); returns y."""
        try:
            key = (x.shape, y.shape, x.dtype, y.dtype, x.device, y.device, x.ptr & 15)
        except AttributeError:
            key = None
        launch = self._launches.get(key)
        if launch is None:
            self._check("x", x, ndim=4)
            self._check("y", y)
            n, c, h, w = x.shape
            if tuple(y.shape) not in ((n, c), (n, c, 1, 1)):
                raise ValueError(f"{type(self).__name__}: y has shape {list(y.shape)}, expected {[n, c]} or "
                                 f"{[n, c, 1, 1]} (x of shape {list(x.shape)})")
            if y.size == 0:
                return y
            if h * w == 0:
                raise ValueError(f"{type(self).__name__}: x of shape {list(x.shape)} has empty planes: "
                                 "nothing to pool")
            launch = self._launches[key] = self._make_launch(x, y)
        launch(x.ptr, y.ptr)
        return y

    def _make_launch(self, x: Tensor, y: Tensor):
        n, c, h, w = x.shape
        rows, hw = n * c, h * w
        template, name, params = global_pool_kernel(self.dtype, self._config, self.op, hw, (x.ptr & 15) == 0)
        threads, tpr = params["THREADS"], params["TPR"]
        grid = min(-(-rows // (threads // tpr)), 2**31 - 1)
        return self._prepare(self._spec(template, "global_pool", name, params), (grid, 1, 1), (threads, 1, 1), 0,
                             [("ptr", x.ptr), ("ptr", y.ptr), ("i64", rows), ("i64", hw)])

    def work(self, x: Tensor, y: Tensor, *args: Any, **kwargs: Any) -> tuple[float, float]:
        return float(x.size), float((x.size + y.size) * self.dtype.itemsize)

    def specs(self) -> list:
        out = []
        for hw, aligned in ((56 * 56, True), (7 * 7, False), (1, False)):
            template, name, params = global_pool_kernel(self.dtype, self._config, self.op, hw, aligned)
            out.append(self._spec(template, "global_pool", name, params))
        return out


class MaxPool2DFloat(Pool2D):
    """float32 max pooling (cuOP `MaxPool2DFloat`)."""
    dtype = np.dtype(np.float32)


class MaxPool2DDouble(Pool2D):
    """float64 max pooling (cuOP `MaxPool2DDouble`)."""
    dtype = np.dtype(np.float64)


class AveragePool2DFloat(Pool2D):
    """float32 average pooling, padding counted (cuOP `AveragePool2DFloat`)."""
    dtype = np.dtype(np.float32)
    op = "avg"


class AveragePool2DDouble(Pool2D):
    """float64 average pooling, padding counted (cuOP `AveragePool2DDouble`)."""
    dtype = np.dtype(np.float64)
    op = "avg"


class GlobalMaxPool2DFloat(GlobalPool2D):
    """float32 global max pooling (cuOP `GlobalMaxPool2DFloat`)."""
    dtype = np.dtype(np.float32)


class GlobalMaxPool2DDouble(GlobalPool2D):
    """float64 global max pooling (cuOP `GlobalMaxPool2DDouble`)."""
    dtype = np.dtype(np.float64)


class GlobalAveragePool2DFloat(GlobalPool2D):
    """float32 global average pooling (cuOP `GlobalAveragePool2DFloat`)."""
    dtype = np.dtype(np.float32)
    op = "avg"


class GlobalAveragePool2DDouble(GlobalPool2D):
    """float64 global average pooling (cuOP `GlobalAveragePool2DDouble`)."""
    dtype = np.dtype(np.float64)
    op = "avg"
