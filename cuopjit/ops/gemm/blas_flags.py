"""BLAS mode arguments (side, uplo, trans, diag) as cuBLAS numbers them, or as words; side-mode operand checks.

The seed passes ints in cuBLAS's order: side 0 = left, 1 = right; uplo 0 = lower, 1 = upper;
trans 0 = no transpose, 1 (or 2, conjugate, the same for real matrices) = transpose; diag 0 =
non-unit, 1 = unit. Words are accepted too, in any case: "left"/"L", "lower"/"L", "N"/"T",
"non_unit"/"N"/"unit"/"U", and the cuBLAS enum names ("CUBLAS_FILL_MODE_UPPER", ...).
"""
from __future__ import annotations

from typing import Any

_WORDS = {
    "side": ({"0", "l", "left", "cublas_side_left"}, {"1", "r", "right", "cublas_side_right"}),
    "uplo": ({"0", "l", "lower", "cublas_fill_mode_lower"}, {"1", "u", "upper", "cublas_fill_mode_upper"}),
    "trans": ({"0", "n", "no_trans", "notrans", "cublas_op_n"},
              {"1", "2", "t", "c", "trans", "transpose", "cublas_op_t", "cublas_op_c"}),
    "diag": ({"0", "n", "non_unit", "nonunit", "cublas_diag_non_unit"}, {"1", "u", "unit", "cublas_diag_unit"}),
}
_SPELL = {"side": ("0/'left'", "1/'right'"), "uplo": ("0/'lower'", "1/'upper'"),
          "trans": ("0/'N'", "1/'T'"), "diag": ("0/'non_unit'", "1/'unit'")}


def flag(op: str, name: str, value: Any) -> bool:
    """The mode `name` of operator `op` as a bool (True: right / upper / transposed / unit); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    key = str(value).strip().lower() if isinstance(value, (int, str)) else None
    zero, one = _WORDS[name]
    if key in zero:
        return False
    if key in one:
        return True
    a, b = _SPELL[name]
    raise ValueError(f"{op}: {name}={value!r} is not understood: use {a} or {b} (cuBLAS numbering)")


def square_operand(op: Any, name: str, label: str, t: Any) -> Any:
    """`t` checked as `op`'s square matrix operand (SYMM's weight, TRSM's A)."""
    t = op.check_operand(name, t, ndim=2)
    if t.shape[0] != t.shape[1]:
        raise ValueError(f"{type(op).__name__}: {label} must be square, got shape {list(t.shape)}")
    return t


def side_operands(op: Any, a: Any, a_name: str, missing: str, b: Any, out: Any, out_name: str,
                  right: bool, products: tuple[str, str]) -> tuple[int, int, int]:
    """(m, n, d) of a side-mode call: square A (d x d) with B and `out` (m x n) on the left or the right.

    `missing` says how to set A; `products` names the (left, right) product for the shape error."""
    name = type(op).__name__
    if a is None:
        raise ValueError(f"{name}: {missing}")
    op.check_operand(a_name, a, ndim=2)
    op.check_operand("b", b, ndim=2)
    op.check_operand(out_name, out, ndim=2, shape=b.shape)
    m, n = b.shape
    d = a.shape[0]
    if (n if right else m) != d:
        what = f"{products[1]} needs b with {d} columns" if right else f"{products[0]} needs b with {d} rows"
        raise ValueError(f"{name}: side={op.side}: A is {d} x {d} and b has shape {list(b.shape)}: {what}")
    return m, n, d


class SideUplo:
    """`side` and `uplo` as words, for an operator that holds them as `_right` and `_upper`."""
    _right: bool
    _upper: bool

    @property
    def side(self) -> str:
        return "right" if self._right else "left"

    @property
    def uplo(self) -> str:
        return "upper" if self._upper else "lower"
