"""Per-sample losses with subgradients and per-sample gradient bounds (docs/algorithms.md, section 0).

Every function works on a batch of clients at once: ``features`` has shape
``(..., m, K)``, ``response`` ``(..., m)`` and ``w`` ``(..., K)``; leading
dimensions broadcast.  An optional ``mask`` of shape ``(..., m)`` (1 for a real
row, 0 for padding) lets clients of unequal size share one array.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np


def _residual(w: np.ndarray, features: np.ndarray, response: np.ndarray) -> np.ndarray:
    return response - np.einsum("...mk,...k->...m", features, w)


def _masked_mean(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if mask is None:
        return values.mean(axis=-1)
    return (values * mask).sum(axis=-1) / mask.sum(axis=-1)


def _masked_mean_rows(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Mean over the sample axis of ``(..., m, K)`` rows."""
    if mask is None:
        return values.mean(axis=-2)
    return (values * mask[..., None]).sum(axis=-2) / mask.sum(axis=-1)[..., None]


class Loss(Protocol):
    """A per-sample loss l(w; a, y)."""

    name: str

    def per_sample(self, w, features, response) -> np.ndarray: ...

    def per_sample_derivative(self, w, features, response) -> np.ndarray:
        """d l / d(a.w) per sample; the subgradient in w is ``derivative * a``."""

    def gradient_bound(self, c1: float, *, paper_constants: bool = False) -> float: ...


class _LossBase:
    name: str = ""

    def mean(self, w, features, response, mask=None) -> np.ndarray:
        """(1/m) sum_j l(w; a_j, y_j)."""
        return _masked_mean(self.per_sample(w, features, response), mask)

    def mean_subgradient(self, w, features, response, mask=None) -> np.ndarray:
        """(1/m) sum_j grad_w l(w; a_j, y_j), shape (..., K)."""
        d = self.per_sample_derivative(w, features, response)
        return _masked_mean_rows(d[..., None] * features, mask)


@dataclass(frozen=True)
class QuantileLoss(_LossBase):
    """Check loss rho_tau(y - a.w), rho_tau(u) = u (tau - 1{u <= 0})."""

    tau: float = 0.5
    name: str = "quantile"

    def __post_init__(self):
        if not 0.0 < self.tau < 1.0:
            raise ValueError(f"quantile level tau must be in (0, 1), got {self.tau}")

    def per_sample(self, w, features, response):
        u = _residual(w, features, response)
        return u * (self.tau - (u <= 0))

    def per_sample_derivative(self, w, features, response):
        u = _residual(w, features, response)
        return -(self.tau - (u <= 0).astype(float))

    def gradient_bound(self, c1, *, paper_constants=False):
        return c1 if paper_constants else c1 * max(self.tau, 1.0 - self.tau)


@dataclass(frozen=True)
class AbsoluteLoss(_LossBase):
    """Least absolute deviation |y - a.w|."""

    name: str = "absolute"

    def per_sample(self, w, features, response):
        return np.abs(_residual(w, features, response))

    def per_sample_derivative(self, w, features, response):
        return -np.sign(_residual(w, features, response))

    def gradient_bound(self, c1, *, paper_constants=False):
        return c1


@dataclass(frozen=True)
class LogisticLoss(_LossBase):
    """log(1 + exp(-y a.w)) with labels y in {-1, +1}."""

    name: str = "logistic"

    def per_sample(self, w, features, response):
        margin = response * np.einsum("...mk,...k->...m", features, w)
        return np.logaddexp(0.0, -margin)

    def per_sample_derivative(self, w, features, response):
        margin = response * np.einsum("...mk,...k->...m", features, w)
        return -response * np.exp(-np.logaddexp(0.0, margin))  # -y / (1 + e^{y a.w})

    def gradient_bound(self, c1, *, paper_constants=False):
        return c1


@dataclass(frozen=True)
class SquaredLoss(_LossBase):
    """(y - a.w)^2 / 2 with the residual clipped to [-R, R] in the gradient (G = c1 R)."""

    residual_bound: float = 1.0
    name: str = "squared"

    def __post_init__(self):
        if not self.residual_bound > 0:
            raise ValueError(f"residual_bound must be > 0, got {self.residual_bound}")

    def per_sample(self, w, features, response):
        return 0.5 * _residual(w, features, response) ** 2

    def per_sample_derivative(self, w, features, response):
        r = _residual(w, features, response)
        return -np.clip(r, -self.residual_bound, self.residual_bound)

    def gradient_bound(self, c1, *, paper_constants=False):
        return c1 * self.residual_bound


LossName = Literal["quantile", "absolute", "logistic", "squared"]


def make_loss(name: str, *, tau: float = 0.5, residual_bound: float = 1.0):
    """Build a loss by name; unknown names raise ``ValueError``."""
    if name == "quantile":
        return QuantileLoss(tau=tau)
    if name == "absolute":
        return AbsoluteLoss()
    if name == "logistic":
        return LogisticLoss()
    if name == "squared":
        return SquaredLoss(residual_bound=residual_bound)
    raise ValueError(f"unknown loss {name!r}; choose quantile, absolute, logistic or squared")
