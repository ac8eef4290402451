"""Settable operator parameters shared by the normalisation operators (LayerNorm, BatchNorm): eps."""
from __future__ import annotations


class EpsMixin:
    """The validated `eps` property. eps is a kernel argument, so it decides the plan: setting it calls
    the operator's `_update_state()`, which records eps (and its other plan-deciding settings) with
    `Operator._set_state`."""

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
        self._update_state()

    def _update_state(self) -> None:
        """Record every setting that decides the plan (eps included) with `self._set_state(...)`."""
        raise NotImplementedError
