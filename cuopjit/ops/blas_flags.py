"""BLAS mode arguments (side, uplo, trans, diag) as cuBLAS numbers them, or as words.

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
