"""Values users write: sizes ('4GiB'), comma lists ('sm_80,sm_90'), whole numbers (64 or 64.0)."""
from __future__ import annotations

import contextlib
import math
import numbers
import operator
import re
from typing import Any, Iterable

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 10**3, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
               "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12,
               "tib": 1 << 40}


def parse_size(text: str | int) -> int:
    """'4GiB', '500M', '1024' -> bytes; ValueError names the accepted forms."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"size {text!r} is not understood: write a number of bytes or e.g. 500M, 4GiB, 2GB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def split_list(values: str | Iterable[str] | None) -> list[str]:
    """'a,b' or ['a', 'b,c', 'a'] -> ['a', 'b', 'c']: comma lists and repetition, in order, without duplicates."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            if (part := part.strip()) and part not in out:
                out.append(part)
    return out


def whole_number(name: str, value: Any) -> int:
    """An int for an int-like value or an integral float (64.0 -> 64); ValueError names the field otherwise."""
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError):
            return operator.index(value)
        if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
            return int(value)
    raise ValueError(f"{name}={value!r} is not allowed: it must be a whole number")


def allowed(name: str, value: Any, choices: tuple) -> None:
    """ValueError naming `name`, the value and the choices unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not allowed: choose one of {', '.join(map(repr, choices))}")


def check_bool(name: str, value: Any) -> None:
    """ValueError unless `value` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not allowed: it must be True or False")


def check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    """ValueError unless `value` is an int (not a bool) from `lo` to `hi` (no upper bound when None)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        span = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"
        raise ValueError(f"{name}={value!r} is not allowed: it must be {span}")
