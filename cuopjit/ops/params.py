"""Settable operator parameters shared by the normalisation operators (LayerNorm, BatchNorm): eps."""
from __future__ import annotations


class EpsMixin:
    """The validated `eps` property. eps is a kernel argument, so it decides the plan: an operator using
    this lists `self._eps` in its `_plan_settings()`, and setting eps re-keys later forwards."""

    _eps: float

    @property
    def eps(self) -> float:
        return self._eps

    @eps.setter
    def eps(self, value: float) -> None:
        value = float(value)
        if not value >= 0.0:
            raise ValueError(f"{type(self).__name__}: eps={value!r} is not allowed: it must be >= 0")
        self._eps = value
        self._settings_changed()
