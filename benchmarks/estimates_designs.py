"""Functional designs of issue 29's study (benchmarks/results/estimates_research.md): curves that are not
the paper's, on grids that are not equispaced, with heteroscedastic or skewed errors and a response far
from 0.

- ``irregular`` (the issue's "new user"): an irregular 60-point grid on [0, 1]; X(t) = 1 + t + an
  Ornstein-Uhlenbeck-type Gaussian process (covariance exp(-|s - t| / 0.3)); beta(t) = 2 sin(2 pi t) + 1;
  y = 10 + int beta X + (0.5 + 0.4 |int X - 1.5|) e, e ~ N(0, 1).  The tau-quantile of y given X is not
  linear in X away from the median (heteroscedastic errors), so the linear quantile model is misspecified
  there, as real data are; what a fit must get right is the share of held-out responses below it.
- ``skewed``: an equispaced 101-point grid on [0, 2]; X(t) = sum_k xi_k sqrt(2/2) sin(k pi t / 2) with
  xi_k ~ N(0, 2 k^-1.5) plus a random level shift, beta(t) = exp(-t) - 0.4; y = -3 + int beta X + 0.8 (G - 2),
  G ~ Gamma(2, 1) (right-skewed errors), scaled by 100 (a response in units of hundreds).

Every draw is seeded (``np.random.SeedSequence(seed, spawn_key=(design code, part))``); the test set is a
separate draw.  Pure numpy; nothing here is part of the package.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DESIGN_CODES = {"irregular": 29_001, "skewed": 29_002}


@dataclass(frozen=True)
class Draw:
    grid: np.ndarray  # (G,)
    curves: np.ndarray  # (n, G)
    response: np.ndarray  # (n,)
    true_quantile: np.ndarray | None  # (n,) the tau-quantile of y given X, when the draw was made for one tau


def irregular_grid() -> np.ndarray:
    """The fixed irregular 60-point grid of the ``irregular`` design (one public draw, seed 2029)."""
    rng = np.random.default_rng(2029)
    inner = np.sort(rng.uniform(0.0, 1.0, 58))
    return np.r_[0.0, inner, 1.0]


def _rng(design: str, seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(DESIGN_CODES[design], part)))


def _quadrature(grid: np.ndarray) -> np.ndarray:
    """Trapezoidal weights (positive on every increasing grid)."""
    d = np.diff(grid)
    w = np.zeros_like(grid)
    w[:-1] += d / 2
    w[1:] += d / 2
    return w


def irregular(seed: int, n: int, *, part: int = 0, location: float = 10.0, scale: float = 1.0) -> Draw:
    grid = irregular_grid()
    rng = _rng("irregular", seed, part)
    cov = np.exp(-np.abs(grid[:, None] - grid[None, :]) / 0.3)
    chol = np.linalg.cholesky(cov + 1e-10 * np.eye(grid.size))
    curves = 1.0 + grid[None, :] + rng.standard_normal((n, grid.size)) @ chol.T
    q = _quadrature(grid)
    beta = 2.0 * np.sin(2 * np.pi * grid) + 1.0
    signal = curves @ (q * beta)
    level = curves @ q
    sd = 0.5 + 0.4 * np.abs(level - 1.5)
    e = rng.standard_normal(n)
    return Draw(grid, curves, location + scale * (signal + sd * e), None)


def irregular_quantile(curves: np.ndarray, tau: float, *, location: float = 10.0, scale: float = 1.0) -> np.ndarray:
    """The true conditional tau-quantile of the ``irregular`` design."""
    from scipy import stats

    grid = irregular_grid()
    q = _quadrature(grid)
    beta = 2.0 * np.sin(2 * np.pi * grid) + 1.0
    sd = 0.5 + 0.4 * np.abs(curves @ q - 1.5)
    return location + scale * (curves @ (q * beta) + sd * stats.norm.ppf(tau))


def skewed(seed: int, n: int, *, part: int = 0, location: float = -3.0, scale: float = 100.0) -> Draw:
    grid = np.linspace(0.0, 2.0, 101)
    rng = _rng("skewed", seed, part)
    k = np.arange(1, 13)
    phi = np.sin(np.outer(k, grid) * np.pi / 2)  # orthonormal on [0, 2] (norm^2 = 1)
    xi = rng.standard_normal((n, k.size)) * np.sqrt(2.0 * k**-1.5)
    curves = xi @ phi + rng.normal(0.0, 0.5, (n, 1))
    q = _quadrature(grid)
    beta = np.exp(-grid) - 0.4
    e = rng.gamma(2.0, 1.0, n) - 2.0
    return Draw(grid, curves, location + scale * (curves @ (q * beta) + 0.8 * e), None)


def draw(design: str, seed: int, n: int, *, part: int = 0, **kw) -> Draw:
    return {"irregular": irregular, "skewed": skewed}[design](seed, n, part=part, **kw)


def coverage(predicted: np.ndarray, response: np.ndarray) -> float:
    """Share of responses at or below the fitted quantile."""
    return float(np.mean(response <= predicted))


def check_loss(residuals: np.ndarray, tau: float) -> float:
    """Mean check loss rho_tau(r) = r (tau - 1{r < 0}) of held-out residuals r = y - fitted quantile."""
    residuals = np.asarray(residuals, dtype=float)
    return float(np.mean(residuals * (tau - (residuals < 0))))


def write_results(out, name: str, text: str, rows: list[dict]) -> None:
    """``<out>/<name>.md`` (the table ``text``) and ``<out>/<name>.json`` (the per-fit ``rows``), creating ``out``."""
    import json
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1))
