"""`set_epilogue` on the product operators (GEMM, MatMul, BatchMatMul, Convolution2D): the operator side of
cuopjit/ops/epilogue.py.

    gemm.set_epilogue("gelu(acc + bias)", bias=b)                     # b bound once
    conv.set_epilogue("relu(acc * scale + shift + residual)", scale=s, shift=t)
    conv.forward(x, y, pad_h=1, pad_w=1, residual=r)                   # r passed per call, by name
    gemm.set_epilogue("acc + alpha2 * c", alpha2=0.5)                  # a Python number: a kernel parameter
    gemm.set_epilogue(None)                                            # the default again

`acc` is the product after alpha, `c` the output's previous value (read only where the expression reads
it; beta is not applied under an epilogue: write `beta * c`). An operand is bound once (`set_epilogue`'s
keywords) or passed to each forward by name (a per-call value wins over a bound one); it is a Tensor (or
CUDA array) of the operator's dtype, or a Python number, passed per call as its bits (a new value neither
re-plans nor recompiles). Its kind comes from its shape against the output's (cuopjit.expr.infer_kind,
NumPy broadcasting; a convolution's channels are its column axis, and a 1-D [K] is per channel too):
a number is "scalar", one value per column "per_column", per row "per_row", the output's shape "full". Tensor
operands must not overlap the output (read its old value as `c`).

While an epilogue is set, the instance's `bind` is the class's bind plus the operands (`_bound_bind`: with every
operand bound and none passed, one call and two tuples more than the class's; else `_fused_bind`): a forward
without an epilogue runs the class's bind untouched.
"""
from __future__ import annotations

from numbers import Real
from typing import Any, ClassVar, Mapping, Sequence

from ..expr import PER_COLUMN, PER_ROW, SCALAR, Expression, ExpressionError, infer_kind, parse_epilogue
from ..tensor import Tensor
from . import epilogue
from .elementwise.custom import number_word

_TAKEN = ("stream",)   # forward's own keyword on every operator


class Fusable:
    """Mixin of the operators that take an epilogue. A class names forward's own arguments in `forward_names`
    (no operand may take one); `problem` calls `epilogue_key(out_shape, operands)`."""

    forward_names: ClassVar[tuple[str, ...]] = ()
    channels: ClassVar[bool] = False     # NCHW output: the channel axis (1) is the column axis
    _fused: Expression | None = None
    _bound: Mapping[str, Any] = {}
    _slots: tuple = ()

    @property
    def epilogue(self) -> str | None:
        """The epilogue's canonical text (what plans and cache keys see), or None for the default."""
        return None if self._fused is None else self._fused.canonical

    def set_epilogue(self, expression: str | Expression | None, **bound: Any) -> None:
        """Store `expression` (cuopjit.expr's language over acc, c and operands) in place of the default epilogue,
        with the operands given here bound once; None restores the default. Raises one line for text outside
        the language, an operand name forward takes itself, a bound name the expression does not read, or a
        bound value of another dtype or device."""
        op = type(self).__name__
        if expression is None:
            if bound:
                raise TypeError(f"{op}: set_epilogue(None) restores the default epilogue and binds nothing; got "
                                f"{', '.join(bound)}")
            self._fused, self._bound = None, {}
            self._epilogue_changed()
            return
        expr = expression if isinstance(expression, Expression) else parse_epilogue(expression)
        taken = [n for n in expr.operands if n in self.forward_names + _TAKEN]
        if taken:
            raise ExpressionError(f"{op}: operand {taken[0]!r} has the name of one of forward's own arguments "
                                  f"({', '.join(self.forward_names + _TAKEN)}); rename it")
        values = {}
        for name, value in bound.items():
            self._check_name(expr, name)
            values[name] = value if _is_number(value) else self.check_operand(name, value)
            if _is_number(value):
                self._word(name, value)
        self._fused, self._bound = expr, values
        self._epilogue_changed()

    def _epilogue_changed(self) -> None:
        """Re-key later forwards; a forward's bind takes the operands while an epilogue is set."""
        expr = self._fused
        self._slots = () if expr is None else tuple((name, self._fixed(name)) for name in expr.operands)
        self._settings_changed()
        if expr is None:
            self.__dict__.pop("bind", None)
        else:
            self.bind = self._bound_bind()

    def _bound_bind(self):
        """The bind forward calls while an epilogue is set: a call that passes none of its operands (every one
        bound) gets the class's bind plus the keys and words made here, once; any other goes to _fused_bind."""
        names = frozenset(name for name, _ in self._slots)
        fixed = [f for _, f in self._slots if f is not None]
        keys, words = (self._fused.canonical, *(f[0] for f in fixed)), tuple(f[1] for f in fixed)
        cls_bind, general = type(self).bind, self._fused_bind
        if len(fixed) < len(self._slots):
            return general

        def bind(*args: Any, **kwargs: Any) -> tuple:
            if kwargs and not names.isdisjoint(kwargs):
                return general(*args, **kwargs)
            key, pointers, result = cls_bind(self, *args, **kwargs)
            return (key, *keys), pointers + words, result
        return bind

    def _fixed(self, name: str) -> tuple | None:
        """(key part, pointer slot) of a bound operand, None for one passed per call."""
        v = self._bound.get(name)
        if v is None:
            return None
        return (0, self._word(name, v)) if _is_number(v) else (v.plan_key, v.ptr)

    def _word(self, name: str, value: Any) -> int:
        try:
            return number_word(value, self.dtype.itemsize == 8)
        except TypeError as exc:
            raise TypeError(f"{type(self).__name__}: epilogue operand {name} must be a cuopjit Tensor or a Python "
                            f"number, got {type(value).__name__} ({exc})") from None

    def _fused_bind(self, *args: Any, **kwargs: Any) -> tuple:
        """The class's bind, then the operands: a per-call one's plan key (0 for a number) and pointer (or bits)."""
        keys, slots = [self._fused.canonical], []
        for name, fixed in self._slots:
            v = kwargs.pop(name, None) if kwargs else None
            if v is None:
                if fixed is None:
                    raise LookupError(name)    # forward's slow path: problem() names the missing operand
                keys.append(fixed[0])
                slots.append(fixed[1])
            elif isinstance(v, Tensor):
                keys.append(v.plan_key)
                slots.append(v.ptr)
            else:
                keys.append(0)
                slots.append(number_word(v, self.dtype.itemsize == 8))
        key, pointers, result = type(self).bind(self, *args, **kwargs)
        return (key, *keys), (*pointers, *slots), result

    def _check_name(self, expr: Expression, name: str) -> None:
        if name not in expr.operands:
            used = ", ".join(expr.operands) or "none"
            raise ExpressionError(f"{type(self).__name__}: {name!r} is not an operand of the epilogue "
                                  f"{expr.canonical!r}; its operands: {used}")

    def epilogue_key(self, out_shape: Sequence[int], given: Mapping[str, Any], vectors: bool = True) -> str:
        """The key of the epilogue for an output of `out_shape` with the per-call operands `given` ("" without
        one), every operand checked. `vectors` False: per-row / per-column operands are refused."""
        op, expr = type(self).__name__, self._fused
        if expr is None:
            if given:
                raise TypeError(f"{op}: {next(iter(given))!r} is not an argument of forward: no epilogue is set "
                                "(set_epilogue(expression, ...) names the operands)")
            return ""
        for name in given:
            self._check_name(expr, name)
        kinds = {}
        for name in expr.operands:
            v = given[name] if name in given else self._bound.get(name)
            if v is None:
                raise ExpressionError(f"{op}: the epilogue {expr.canonical!r} needs operand {name!r}: bind it with "
                                      f"set_epilogue(..., {name}=...) or pass {name}=... to forward")
            if _is_number(v):
                self._word(name, v)
                kinds[name] = SCALAR
                continue
            kinds[name] = self._kind(name, self.check_operand(name, v).shape, tuple(out_shape))
            if not vectors and kinds[name] in (PER_ROW, PER_COLUMN):
                raise ExpressionError(f"{op}: epilogue operand {name!r} is {kinds[name].replace('_', '-')}, which "
                                      "needs 2-D (or more) a and b (a 1-D one drops an axis of the output); pass it "
                                      "output-shaped")
        return epilogue.make_key(expr, kinds)

    def _kind(self, name: str, shape: tuple, out_shape: tuple) -> str:
        try:
            if self.channels and len(shape) == 1 and shape[0] == out_shape[1]:
                return PER_COLUMN    # a 1-D [K] is per channel (a bias's usual shape), not NumPy's last axis
            return infer_kind(name, shape, out_shape, 1 if self.channels else -1)
        except ExpressionError as exc:
            raise ExpressionError(f"{type(self).__name__}: {exc}") from None

    def epilogue_bytes(self, given: Mapping[str, Any]) -> int:
        """Bytes the epilogue's tensor operands add to a forward (work figures)."""
        if self._fused is None:
            return 0
        values = [given.get(n, self._bound.get(n)) for n in self._fused.operands]
        return sum(v.nbytes for v in values if isinstance(v, Tensor))


def _is_number(v: Any) -> bool:
    return isinstance(v, Real) and not isinstance(v, Tensor)
