"""The arguments of one forward from a shape, for `--shape` of `cuopjit show/explain/tune/prewarm`: a recipe per family.

`build(op, dtype, shape, make)` returns (operator, args, kwargs). `make(shape)` gives a tensor: with
a GPU, random data on it (explain times the forward); without one, a placeholder: a tensor of no
memory at an aligned fake address, which is all planning reads (shapes, dtype, device, alignment).
`parse_shape` reads the one grammar every command takes (`4096x1024`, `4096,1024`, spaces allowed);
`shape_help()` is the per-family table `--help` prints. `fuse` gives a product's forward a user epilogue with
operands of given kinds, `elementwise` builds an elementwise program's forward (`--epilogue`, `--elementwise`).
"""
from __future__ import annotations

import itertools
import math
import re
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from .expr import FULL, PER_COLUMN, PER_ROW, SCALAR
from .ops import FAMILIES, ElementwiseDouble, ElementwiseFloat, operator_class
from .creation import random
from .tensor import Tensor

Make = Callable[[tuple[int, ...]], Tensor]
_FAKE = 1 << 40   # an aligned address nothing reads: planning looks at alignment only
_SEPARATORS = re.compile(r"[x×,\s]+")
_placeholders = itertools.count(1)


def placeholder(shape: Iterable[int], dtype: Any = np.float32, device: int = 0) -> Tensor:
    """A tensor of no memory, for planning only (never launch on it), at a 256-byte aligned fake address of
    its own (4 GiB apart from every other placeholder's)."""
    shape = tuple(int(d) for d in shape)
    return Tensor._view(_FAKE + (next(_placeholders) << 32), shape, np.dtype(dtype), device, None)


def fake_maker(dtype: np.dtype) -> Make:
    """Placeholders of `dtype` (for planning without a GPU)."""
    return lambda shape: placeholder(shape, dtype)


def gpu_maker(dtype: np.dtype, seed: int = 0) -> Make:
    """Tensors of normal random values on the current GPU."""
    counter = [seed]

    def make(shape: tuple[int, ...]) -> Tensor:
        counter[0] += 1
        return random(shape, np.dtype(dtype), seed=counter[0])
    return make


def _gemm(cls, s, make):
    m, n, k = s
    op = cls()
    op.set_weight(make((k, n)))
    return op, (make((m, k)), make((m, n))), {}


def _gemv(cls, s, make):
    m, n = s
    op = cls()
    op.set_weight(make((m, n)))
    return op, (make((n,)), make((m,))), {}


def _matmul(cls, s, make):
    m, n, k = s
    return cls(), (make((m, k)), make((k, n)), make((m, n))), {}


def _batchmatmul(cls, s, make):
    b, m, n, k = s
    return cls(), (make((b, m, k)), make((b, k, n)), make((b, m, n))), {}


def _symm(cls, s, make):
    m, n = s
    op = cls()
    op.set_weight(make((m, m)))
    return op, (make((m, n)), make((m, n))), {}


def _trsm(cls, s, make):
    m, n = s
    op = cls()
    op.set_matrix_a(make((m, m)))
    b = make((m, n))
    return op, (b, b), {}


def _conv2d(cls, s, make):
    n, c, h, w, k, r, q = s
    op = cls(c, k, r, q, pad_h=r // 2, pad_w=q // 2)
    op.set_weight(make(op.weight_shape))
    return op, (make((n, c, h, w)), make(op.output_shape((n, c, h, w)))), {}


def _pair(cls, s, make):
    return cls(), (make(s), make(s)), {}


def _layernorm(cls, s, make):
    op = cls()
    op.set_gamma(make(s[-1:]))
    op.set_beta(make(s[-1:]))
    return op, (make(s), make(s)), {}


def _batchnorm(cls, s, make):
    op = cls()
    for name in ("gamma", "beta", "running_mean", "running_var"):
        getattr(op, "set_" + name)(make((s[1],)))
    return op, (make(s), make(s)), {}


def _window(cls, s, make):
    op = cls()
    return op, (make(s), make(op.output_shape(s))), {}


def _global(cls, s, make):
    return cls(), (make(s), make(s[:2])), {}


def _flatten(cls, s, make):
    return cls(), (make(s), make((s[0], math.prod(s[1:])))), {}


def _view(cls, s, make):
    half = tuple(max(1, d // 2) for d in s)
    return cls(), (make(s), make(half)), {"offset": tuple(d - h for d, h in zip(s, half))}


def _dot(cls, s, make):
    return cls(), (make(s), make(s), make((1,))), {}


class Recipe(NamedTuple):
    """What --shape means for a family: its sizes (`dims`, "" for any shape), in words, its default, the builder."""
    meaning: str
    default: tuple[int, ...]
    builder: Callable
    dims: str = ""


_X = "any shape of x"
SHAPES: dict[str, Recipe] = {
    "gemm": Recipe("C[M,N] = A[M,K] @ B[K,N] (B: the weight)", (2048, 2048, 2048), _gemm, "M,N,K"),
    "gemv": Recipe("y[M] = A[M,N] @ x[N] (A: the weight)", (8192, 8192), _gemv, "M,N"),
    "matmul": Recipe("C[M,N] = A[M,K] @ B[K,N]", (2048, 2048, 2048), _matmul, "M,N,K"),
    "batchmatmul": Recipe("C[B,M,N] = A[B,M,K] @ B[B,K,N]", (100, 256, 256, 256), _batchmatmul, "B,M,N,K"),
    "symm": Recipe("C[M,N] = A[M,M] @ B[M,N], A symmetric (its upper triangle; the weight)", (4096, 4096),
                   _symm, "M,N"),
    "trsm": Recipe("solve A[M,M] X = B[M,N] in place, A lower triangular, non-unit diagonal", (4096, 4096),
                   _trsm, "M,N"),
    "conv2d": Recipe("x[N,C,H,W] conv W[K,C,R,S], stride 1, padding R//2,S//2 (same size for odd R,S), no "
                     "dilation or groups", (32, 64, 56, 56, 64, 3, 3), _conv2d, "N,C,H,W,K,R,S"),
    "scal": Recipe(_X, (1 << 24,), lambda cls, s, make: (cls(0.5), (make(s),), {})),
    "axpy": Recipe(_X + " (y alike)", (1 << 24,), lambda cls, s, make: (cls(0.5), (make(s), make(s)), {})),
    "copy": Recipe(_X + " (y alike)", (1 << 24,), _pair),
    "dot": Recipe(_X + " (y alike)", (1 << 24,), _dot),
    "relu": Recipe(_X + " (y alike)", (1 << 24,), _pair),
    "maxpool2d": Recipe("x[N,C,H,W], 2x2 window", (32, 64, 56, 56), _window, "N,C,H,W"),
    "avgpool2d": Recipe("x[N,C,H,W], 2x2 window", (32, 64, 56, 56), _window, "N,C,H,W"),
    "globalmaxpool2d": Recipe("x[N,C,H,W]", (32, 64, 56, 56), _global, "N,C,H,W"),
    "globalavgpool2d": Recipe("x[N,C,H,W]", (32, 64, 56, 56), _global, "N,C,H,W"),
    "flatten": Recipe("x's shape (flattened from dim 1)", (32, 64, 56, 56), _flatten),
    "view": Recipe("x's shape (the view: its second half along each dim)", (256, 256, 256), _view),
    "softmax": Recipe("x's shape (over the last axis)", (4096, 1024), _pair),
    "layernorm": Recipe("x's shape (over the last axis, with gamma and beta)", (4096, 1024), _layernorm),
    "batchnorm": Recipe("x[N,C] or x[N,C,H,W] (inference)", (32, 64, 56, 56), _batchnorm),
}


def shape_help(ops: Iterable[str] | None = None) -> str:
    """One line per family: what --shape means for it and its default (for --help epilogs)."""
    ops = list(ops or SHAPES)
    width = max(len(op) for op in ops) + 2
    lines = ["--shape per family (sizes separated by x or commas, e.g. 4096x4096x4096 or 4096,4096,4096):"]
    for op in ops:
        r = SHAPES[op]
        sizes = f"{r.dims}: " if r.dims else ""
        lines.append(f"  {op:<{width}}{sizes}{r.meaning}; default {'x'.join(map(str, r.default))}")
    return "\n".join(lines)


def parse_shape(text: str) -> tuple[int, ...]:
    """'4096,1024', '4096x1024' or '4096 x 1024' -> (4096, 1024); ValueError says how to write one."""
    try:
        shape = tuple(int(p) for p in _SEPARATORS.split(text.strip().lower()))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ValueError(f"--shape {text!r} is not understood: write sizes >= 1 separated by x or commas, "
                         "e.g. 4096x1024 or 4096,1024")
    return shape


def parse_shapes(values: Iterable[str]) -> list[tuple[int, ...]]:
    """Each --shape value (repeatable) as a shape; one value may list x-written shapes with commas
    ('4096x4096x4096,1000x1000x1000')."""
    out = []
    for text in values:
        parts = text.split(",")
        listed = len(parts) > 1 and all("x" in p.lower() for p in parts)
        out += [parse_shape(p) for p in parts] if listed else [parse_shape(text)]
    return out


def check_shape(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` if it has the sizes family `op`'s --shape takes; ValueError names them."""
    if op not in SHAPES:
        raise ValueError(f"{op} has no --shape recipe: leave out --shape (its first representative problem is used)"
                         if op in FAMILIES else f"unknown op {op!r}: choose from {', '.join(FAMILIES)}")
    dims = SHAPES[op].dims
    if dims and len(shape) != dims.count(",") + 1:
        raise ValueError(f"{op}: --shape takes {dims}, got {','.join(map(str, shape))}")
    return tuple(shape)


def build(op: str, dtype: str, shape: tuple[int, ...] | None, make: Make) -> tuple[Any, tuple, dict]:
    """(operator, args, kwargs) of a forward of family `op` on `shape` (default: the family's)."""
    shape = check_shape(op, SHAPES[op].default if op in SHAPES and shape is None else shape)
    return SHAPES[op].builder(operator_class(op, np.dtype(dtype).name), shape, make)


# Where a product family's forward takes its output (the epilogue's operands are laid against it).
_OUTPUT = {"gemm": 1, "matmul": 2, "batchmatmul": 2, "conv2d": 1}
EPILOGUE_FAMILIES = tuple(_OUTPUT)


def operand_shape(op: str, kind: str, out: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape of an epilogue operand of `kind` against family `op`'s output `out` (None: a Python number):
    per column [N] ([K] for conv2d's channels), per row [..., M, 1] ([N, 1, OH, OW]), full the output's."""
    if kind == SCALAR:
        return None
    if kind == FULL:
        return out
    channel = 1 if op == "conv2d" else len(out) - 1
    if kind == PER_COLUMN:
        return (out[channel],)
    if kind == PER_ROW:
        return tuple(1 if i == channel else d for i, d in enumerate(out))
    raise ValueError(f"unknown operand kind {kind!r}: choose from scalar, per_column, per_row, full")


def fuse(op: str, operator: Any, args: tuple, expression: str, kinds: dict[str, str], make: Make) -> None:
    """Set `expression` as `operator`'s epilogue (built by `build(op, ...)`), each operand bound to a tensor of its
    kind's shape against the output of `args` (a scalar to the number 1.0)."""
    if op not in _OUTPUT:
        raise ValueError(f"{op} takes no epilogue: --epilogue is for {', '.join(EPILOGUE_FAMILIES)} "
                         "(--elementwise for elementwise programs)")
    out = tuple(args[_OUTPUT[op]].shape)
    bound = {}
    for name, kind in kinds.items():
        shape = operand_shape(op, kind, out)
        bound[name] = 1.0 if shape is None else make(shape)
    operator.set_epilogue(expression, **bound)


def elementwise(program: str, dtype: str, shapes: dict[str, tuple[int, ...] | None], out_shape: tuple[int, ...] | None,
                make: Make) -> tuple[Any, tuple, dict]:
    """(operator, (), operands) of an elementwise program's forward: inputs of `shapes` (None: the number 1.0; an
    input not named: full-size), outputs of `out_shape` (default: the named inputs' broadcast, else 2^24 elements)."""
    cls = ElementwiseFloat if np.dtype(dtype) == np.float32 else ElementwiseDouble
    operator = cls(program)
    named = [s for s in shapes.values() if s is not None]
    out = tuple(out_shape or (np.broadcast_shapes(*named) if named else (1 << 24,)))
    kwargs = {name: (make(out) if name not in shapes else 1.0 if shapes[name] is None else make(shapes[name]))
              for name in operator.inputs}
    kwargs.update({name: make(out) for name in operator.outputs})
    return operator, (), kwargs
