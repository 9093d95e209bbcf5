"""Penalties P(w) and their subgradients P'(w) (docs/algorithms.md, section 0; P'(0) = 0)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Penalty:
    """A separable penalty.  ``kind`` in l1, l2, elastic_net, scad, mcp, none.

    Parameters
    ----------
    kind : str
        Penalty family.
    lam1, lam2 : float
        Weights of the elastic net P = lam2 ||w||^2 + lam1 ||w||_1
        (default: 1.0 and 1.0).
    a : float
        SCAD shape (default: 3.7).
    gamma : float
        MCP shape (default: 3.0).
    unpenalized : int
        Number of leading coordinates left out of P, e.g. 1 for an intercept in w_0:
        P(w) = P(w_u, ..., w_{K-1}) and P'(w)_j = 0 for j < u (default: 0).
    """

    kind: str = "l1"
    lam1: float = 1.0
    lam2: float = 1.0
    a: float = 3.7
    gamma: float = 3.0
    unpenalized: int = 0

    def __post_init__(self):
        if self.kind not in PENALTY_KINDS:
            raise ValueError(f"unknown penalty {self.kind!r}; choose one of {', '.join(PENALTY_KINDS)}")
        if self.lam1 < 0 or self.lam2 < 0:
            raise ValueError("elastic-net weights lam1, lam2 must be >= 0")
        if self.a <= 2:
            raise ValueError(f"SCAD needs a > 2, got {self.a}")
        if self.gamma <= 1:
            raise ValueError(f"MCP needs gamma > 1, got {self.gamma}")
        if self.unpenalized < 0:
            raise ValueError(f"unpenalized must be >= 0, got {self.unpenalized}")

    def mask(self, dim: int) -> np.ndarray:
        """(dim,) weights of the coordinates in P: 0 for the ``unpenalized`` leading ones, else 1."""
        out = np.ones(dim)
        out[: self.unpenalized] = 0.0
        return out

    def value(self, w: np.ndarray) -> np.ndarray:
        """P(w), summed over the last axis (the ``unpenalized`` leading coordinates left out)."""
        w = np.asarray(w, dtype=float)[..., self.unpenalized:]
        aw = np.abs(w)
        if self.kind == "l1":
            return aw.sum(-1)
        if self.kind == "l2":
            return 0.5 * (w * w).sum(-1)
        if self.kind == "elastic_net":
            return self.lam2 * (w * w).sum(-1) + self.lam1 * aw.sum(-1)
        if self.kind == "scad":
            a = self.a
            v = np.where(
                aw <= 1.0,
                aw,
                np.where(aw <= a, (2 * a * aw - aw**2 - 1) / (2 * (a - 1)), (a + 1) / 2),
            )
            return v.sum(-1)
        if self.kind == "mcp":
            g = self.gamma
            v = np.where(aw <= g, aw - aw**2 / (2 * g), g / 2)
            return v.sum(-1)
        return np.zeros(w.shape[:-1])

    def subgradient(self, w: np.ndarray) -> np.ndarray:
        """P'(w) elementwise, with P'(0) = 0 and 0 on the ``unpenalized`` leading coordinates."""
        w = np.asarray(w, dtype=float)
        if self.unpenalized:
            out = self._subgradient(w)
            out[..., : self.unpenalized] = 0.0
            return out
        return self._subgradient(w)

    def _subgradient(self, w: np.ndarray) -> np.ndarray:
        s = np.sign(w)
        aw = np.abs(w)
        if self.kind == "l1":
            return s
        if self.kind == "l2":
            return w.copy()
        if self.kind == "elastic_net":
            return 2 * self.lam2 * w + self.lam1 * s
        if self.kind == "scad":
            a = self.a
            return s * np.where(aw <= 1.0, 1.0, np.maximum(a - aw, 0.0) / (a - 1))
        if self.kind == "mcp":
            return s * np.maximum(1.0 - aw / self.gamma, 0.0)
        return np.zeros_like(w)

    def subgradient_bound(self, dim: int, weight_bound: float = np.inf) -> float:
        """A bound c2 on ||P'(w)|| (l1: sqrt(K)); for l2-type penalties needs ||w|| bound."""
        dim = max(int(dim) - self.unpenalized, 0)
        if self.kind in ("l1", "scad", "mcp"):
            return float(np.sqrt(dim))
        if self.kind == "l2":
            return float(weight_bound)
        if self.kind == "elastic_net":
            return float(2 * self.lam2 * weight_bound + self.lam1 * np.sqrt(dim))
        return 0.0


PENALTY_KINDS = ("l1", "l2", "elastic_net", "scad", "mcp", "none")
