"""Plan-deciding operator settings (alpha, beta, eps, momentum, training): one property factory, and the
alpha / beta / weight matrix that the BLAS products (GEMM, GEMV, SYMM) share.

Such a setting is passed to the kernels as an argument, so it is part of every plan key: setting
it re-keys the operator's later forwards (`Operator._settings_changed`); the operator lists it in
its `_plan_settings()`.
"""
from __future__ import annotations

from typing import Any, Callable


def plan_setting(name: str, convert: Callable[[Any], Any] = float,
                 check: Callable[[Any, Any], None] | None = None) -> property:
    """A property stored as `_<name>`: each assignment is converted, checked (check(op, value) raises), then
    re-keys the operator's plans."""
    attr = "_" + name

    def get(self: Any) -> Any:
        return getattr(self, attr)

    def set_(self: Any, value: Any) -> None:
        value = convert(value)
        if check is not None:
            check(self, value)
        setattr(self, attr, value)
        self._settings_changed()
    return property(get, set_, doc=f"{name} (decides the plan: setting it re-keys later forwards)")


def non_negative_eps(op: Any, value: float) -> None:
    """eps >= 0 (NaN refused)."""
    if not value >= 0.0:
        raise ValueError(f"{type(op).__name__}: eps={value!r} is not allowed: it must be >= 0")


def unit_interval_momentum(op: Any, value: float) -> None:
    """momentum in [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{type(op).__name__}: momentum={value!r} is not allowed: it must be in [0, 1]")


class ScaledProduct:
    """alpha and beta (plan settings) and the one weight matrix of out = alpha * (product) + beta * out.
    `_weight_key()` is what of the weight decides a plan: its shape, device and 16-byte alignment."""

    alpha = plan_setting("alpha")
    beta = plan_setting("beta")

    def _init_scales(self, alpha: float, beta: float) -> None:
        """Set alpha, beta and no weight yet (before the operator's first `_settings_changed`)."""
        self._alpha, self._beta = float(alpha), float(beta)
        self._weight = None

    def _weight_key(self) -> tuple | None:
        w = self._weight
        return None if w is None else (w.shape, w.device, w.ptr & 15)

