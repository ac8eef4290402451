"""ElementwiseFloat / ElementwiseDouble / ElementwiseHalf / ElementwiseBFloat16: a user's elementwise program,
compiled at run time.

    op = cuopjit.ElementwiseFloat("out = relu(x * scale + shift + r)")
    op.forward(x=x, scale=s, shift=b, r=r, out=y)        # returns y (a tuple for several outputs)
    two = cuopjit.ElementwiseDouble("a = x * w; b = relu(a + 1)")
    two.forward(x=x, w=0.5, a=ya, b=yb)                  # w: a Python number, a kernel parameter

The program is cuopjit.expr's language (`name = expression` statements separated by `;` or newlines;
later statements may read earlier outputs). Every operand is passed by name: inputs are Tensors of the
operator's dtype or Python numbers (a number is passed per call: a new value does not recompile), outputs
are Tensors. Inputs broadcast NumPy-style to the outputs, which all have one shape (the shape the inputs
broadcast to, or larger: NumPy's rule for `out=`). An output may be a full-size input (in place); any
other overlap between an output and an operand is undefined. Programs that differ in spelling only
('out=relu(x)', 'out = relu( x )') share their kernels.

Layouts (cuopjit/layout.py): the outputs and every full-size input share one memory layout (contiguous,
channels_last or transposed; a mismatch raises naming both), and the kernel walks them in memory order, so
each layout runs at the same speed. Smaller inputs broadcast by their logical shape, whatever their layout:
a per-channel scale over a channels_last [N, C, H, W] output is [C, 1, 1] or [1, C, 1, 1] (as in NumPy and
torch; a [C] operand lines up with W), read as one vector per 16-byte access.

ElementwiseHalf / ElementwiseBFloat16 take float16 / bfloat16 tensors, evaluate the program in float32 (a Python
number becomes a float32 parameter) and round each output once on store: `out = x * 1000` of a float16 65504 is
inf, as in torch.
"""
from __future__ import annotations

import math
import struct
from numbers import Real
from typing import Any, Union

import numpy as np

from ...expr import Program
from ...expr.tree import BinOp, Call, Neg, walk
from ...layout import LAYOUTS
from ...tensor import Tensor
from ..base import Operator, typed
from ..layouts import same_layout
from . import broadcast, expression
from .kernels import DTYPES

_NUMBER = 0   # a memo key's entry for a Python number (a live tensor's plan_key is a positive int)
_F32, _U32 = struct.Struct("<f").pack, struct.Struct("<I").unpack
_F64, _U64 = struct.Struct("<d").pack, struct.Struct("<Q").unpack
_TAKEN = ("stream",)   # forward's own keyword


def number_word(value: Any, double: bool) -> int:
    """The bits of a Python number as the kernel reads it (for float32 rounded, +-inf beyond its range);
    TypeError for anything that is not a real number or is beyond double's range."""
    if value.__class__ not in (float, int) and not isinstance(value, Real):
        raise TypeError(f"{type(value).__name__} is not a real number")
    try:
        return _U64(_F64(value))[0] if double else _U32(_F32(value))[0]
    except (OverflowError, struct.error):
        if double:
            raise TypeError("the number is outside double's range") from None
    try:
        with np.errstate(over="ignore"):
            return int(np.float32(float(value)).view(np.uint32))
    except OverflowError:
        raise TypeError("the number is outside double's range") from None


class Elementwise(Operator):
    """A user-written elementwise program (see the module docstring); `forward(**operands)`."""

    family = expression.family()   # the class's: DEFAULT_PROGRAM's problems (the CLI's 'elementwise')

    def __init__(self, program: Union[str, Program]):
        super().__init__()
        prog = expression.as_program(program)
        for name in prog.inputs + prog.outputs:
            if name in _TAKEN:
                raise ValueError(f"{type(self).__name__}: '{name}' cannot name an operand (forward takes "
                                 f"{name}= for the CUDA stream); rename it")
        self.program = prog
        self.family = expression.family(prog)
        self.inputs, self.outputs = prog.inputs, prog.outputs
        self._names = prog.inputs + prog.outputs
        self._double = self.dtype == np.float64
        self._ops = sum(isinstance(node, (BinOp, Neg, Call)) for _, tree in prog.statements for node in walk(tree))

    @property
    def expression(self) -> str:
        """The canonical program: what plans and cache keys see."""
        return self.program.canonical

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.program.canonical!r})"

    def bind(self, *args: Any, **operands: Any) -> tuple:
        if args or len(operands) != len(self._names):
            raise TypeError("operands are passed by name")
        key, pointers, words = [], [], []
        for name in self._names:
            v = operands[name]
            if isinstance(v, Tensor):
                key.append(v.plan_key)
                pointers.append(v.ptr)
            else:
                key.append(_NUMBER)
                words.append(number_word(v, self._double))
        outs = self.outputs
        result = operands[outs[0]] if len(outs) == 1 else tuple(operands[o] for o in outs)
        return tuple(key), (*pointers, *words), result

    def problem(self, *args: Any, **operands: Any) -> expression.ExprProblem | None:
        op = type(self).__name__
        example = ", ".join(f"{n}=..." for n in self._names)
        if args:
            raise TypeError(f"{op}: pass operands by name, forward({example}); got {len(args)} positional")
        for name in operands:
            if name not in self._names:
                raise TypeError(f"{op}: {name!r} is not an operand of {self.expression!r}; its inputs: "
                                f"{', '.join(self.inputs)}; outputs: {', '.join(self.outputs)}")
        for name in self._names:
            if name not in operands:
                role = "output" if name in self.outputs else "input"
                raise TypeError(f"{op}: {role} {name!r} is missing; call forward({example})")
        shapes, aligned, strides = [], [], []
        for name in self.inputs:
            v = operands[name]
            if isinstance(v, Tensor):
                v = self.check_operand(name, v, layouts=LAYOUTS)
                shapes.append(tuple(v.shape))
                aligned.append(v.ptr % 16 == 0)
                strides.append(v.strides)
                continue
            try:
                number_word(v, self._double)
            except TypeError as exc:
                raise TypeError(f"{op}: {name} must be a cuopjit Tensor or a Python number, got "
                                f"{type(v).__name__} ({exc}); wrap arrays with cuopjit.tensor(...)") from None
            shapes.append(None)
            aligned.append(True)
            strides.append(None)
        for name in self.outputs:
            self.check_operand(name, operands[name], layouts=LAYOUTS)
        outs = [(name, tuple(operands[name].shape)) for name in self.outputs]
        out_shape = broadcast.output_shape(op, [(n, s) for n, s in zip(self.inputs, shapes) if s is not None], outs)
        if math.prod(out_shape) == 0:
            return None
        full = [(name, operands[name]) for name, s in zip(self.inputs, shapes)
                if s is not None and math.prod(s) == math.prod(out_shape)]
        layout = same_layout(op, full + [(name, operands[name]) for name in self.outputs])
        return expression.make_problem(self.program, self.dtype.name, shapes, out_shape, len(self.outputs),
                                       aligned, all(operands[n].ptr % 16 == 0 for n in self.outputs), strides,
                                       layout)

    def work(self, *args: Any, **operands: Any) -> tuple[float, float]:
        """(flops: the program's operations per output element, bytes: each tensor operand once)."""
        n = operands[self.outputs[0]].size
        nbytes = sum(operands[name].nbytes for name in self._names if isinstance(operands[name], Tensor))
        return float(n * self._ops), float(nbytes)


ElementwiseFloat, ElementwiseDouble, ElementwiseHalf, ElementwiseBFloat16 = typed(
    Elementwise, "Elementwise", "elementwise program", DTYPES)


