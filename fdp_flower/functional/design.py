"""The simulation design of Zhou & Xiang (2022), Section 5, and the MISE metric.

beta(t) = sum_{k<=50} w_k phi_k(t), w_1 = 0.3, w_k = 4 (-1)^{k+1} k^{-2};
phi_1 = 1, phi_k = sqrt 2 cos((k-1) pi t); X_i = sum_k A_ik phi_k with
A_ik ~ N(0, k^{-2}); y_i = int beta X_i + e_i - F^{-1}(tau), e ~ t(3), so the
tau-quantile of y given X is int beta X.

Samples are generated in blocks of ``BLOCK`` rows, each block from its own
seed stream, so any contiguous slice (a client's partition) can be generated
alone and the data do not depend on how they are split.

Two further designs (:data:`DESIGNS`, scenario field ``data.design``) test that settings chosen on
the paper's design carry over: ``brownian`` (Brownian-motion curves, a smooth bump-like beta,
Gaussian errors of sd 0.5) and ``heavy_tailed`` (curves with Laplace scores and slowly decaying
variances on a Fourier basis, a two-bump beta, Cauchy errors of scale 0.3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fdp_flower.functional.fpca import quadrature_weights
from fdp_flower.privacy.mechanisms import DATA_STREAM

N_TERMS = 50
BLOCK = 1000


def true_coefficients(n_terms: int = N_TERMS) -> np.ndarray:
    k = np.arange(1, n_terms + 1)
    w = 4.0 * (-1.0) ** (k + 1) / k**2
    w[0] = 0.3
    return w


def cosine_functions(grid: np.ndarray, n_terms: int = N_TERMS) -> np.ndarray:
    """(n_terms, G): phi_1 = 1, phi_k = sqrt 2 cos((k-1) pi t)."""
    k = np.arange(n_terms)[:, None]
    phi = np.sqrt(2.0) * np.cos(k * np.pi * np.asarray(grid)[None, :])
    phi[0] = 1.0
    return phi


def default_grid(n_points: int = 100) -> np.ndarray:
    return np.linspace(0.0, 1.0, n_points)


def true_beta(grid: np.ndarray) -> np.ndarray:
    return true_coefficients() @ cosine_functions(grid)


@dataclass(frozen=True)
class CurveData:
    """Curves on a common grid and their scalar responses."""

    curves: np.ndarray  # (m, G)
    response: np.ndarray  # (m,)
    grid: np.ndarray  # (G,)

    def __post_init__(self):
        if self.curves.ndim != 2 or self.curves.shape[1] != self.grid.size:
            raise ValueError(f"curves must have shape (m, {self.grid.size}), got {self.curves.shape}")
        if self.response.shape != (self.curves.shape[0],):
            raise ValueError(
                f"response must have shape ({self.curves.shape[0]},), got {self.response.shape}")

    @property
    def n_samples(self) -> int:
        return int(self.response.size)


def partition_bounds(n: int, num_partitions: int) -> np.ndarray:
    """Start offsets (num_partitions + 1,) of an even contiguous split of n samples."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    if n < num_partitions:
        raise ValueError(f"cannot split {n} samples over {num_partitions} clients")
    sizes = np.full(num_partitions, n // num_partitions)
    sizes[: n % num_partitions] += 1
    return np.r_[0, np.cumsum(sizes)]


def _invert_cdf(cdf, pdf, tau: float) -> float:
    """The x with cdf(x) = tau for a continuous, strictly increasing cdf: Newton's method kept
    inside a bisection bracket, to machine precision (no SciPy: a client that simulates its slice
    in a new process per message would pay SciPy's import every time)."""
    if not 0 < tau < 1:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    lo, hi = -1.0, 1.0
    while cdf(lo) > tau:
        lo *= 2.0
    while cdf(hi) < tau:
        hi *= 2.0
    x = 0.5 * (lo + hi)
    for _ in range(200):
        gap = cdf(x) - tau
        if gap == 0.0:
            return x
        if gap > 0:
            hi = x
        else:
            lo = x
        density = pdf(x)
        step = x - gap / density if density > 0 else 0.5 * (lo + hi)
        nxt = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(nxt - x) <= 1e-15 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return x


def _t3_cdf(x: float) -> float:
    """Student t with 3 degrees of freedom: 1/2 + (atan(x / sqrt 3) + (x / sqrt 3) / (1 + x^2 / 3)) / pi."""
    u = x / math.sqrt(3.0)
    return 0.5 + (math.atan(u) + u / (1.0 + u * u)) / math.pi


def _t3_pdf(x: float) -> float:
    return 2.0 / (math.pi * math.sqrt(3.0)) / (1.0 + x * x / 3.0) ** 2


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _normal_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def error_law_quantile(law: str, tau: float) -> float:
    """F^{-1}(tau) of a standard error law: ``t3`` (Student t, 3 d.f.), ``normal`` or ``cauchy``."""
    if law == "t3":
        return _invert_cdf(_t3_cdf, _t3_pdf, tau)
    if law == "normal":
        return _invert_cdf(_normal_cdf, _normal_pdf, tau)
    if law == "cauchy":
        if not 0 < tau < 1:
            raise ValueError(f"tau must be in (0, 1), got {tau}")
        if tau == 0.5:
            return 0.0
        return -1.0 / math.tan(math.pi * tau) if tau < 0.5 else 1.0 / math.tan(math.pi * (1.0 - tau))
    raise ValueError(f"unknown error law {law!r}; choose one of t3, normal, cauchy")


def quantile_shift(tau: float) -> float:
    """F^{-1}(tau) of the t(3) errors: y = int beta X + e - F^{-1}(tau) has tau-quantile int beta X."""
    return error_law_quantile("t3", tau)


def brownian_functions(grid: np.ndarray, n_terms: int = N_TERMS) -> np.ndarray:
    """(n_terms, G): the Karhunen-Loeve functions of Brownian motion, sqrt 2 sin((k - 1/2) pi t)."""
    k = np.arange(1, n_terms + 1)[:, None] - 0.5
    return np.sqrt(2.0) * np.sin(k * np.pi * np.asarray(grid)[None, :])


def fourier_functions(grid: np.ndarray, n_terms: int = N_TERMS) -> np.ndarray:
    """(n_terms, G): 1, sqrt 2 sin(2 pi t), sqrt 2 cos(2 pi t), sqrt 2 sin(4 pi t), ..."""
    t = np.asarray(grid)[None, :]
    k = np.arange(1, n_terms)[:, None]
    freq = (k + 1) // 2
    waves = np.where(k % 2 == 1, np.sin(2 * np.pi * freq * t), np.cos(2 * np.pi * freq * t))
    return np.vstack([np.ones_like(t), np.sqrt(2.0) * waves])


@dataclass(frozen=True)
class SimulatedDesign:
    """X = sum_k A_k phi_k with independent scores of sd ``score_sd[k]`` and ``score_law`` shape,
    beta = sum_k w_k phi_k, y = int beta X + e - F^{-1}(tau) with e ~ ``error_law`` (symmetric,
    so F^{-1}(0.5) = 0 and y(tau) = y(0.5) - F^{-1}(tau))."""

    name: str
    functions: object  # (grid, n_terms) -> (n_terms, G), orthonormal on [0, 1]
    coefficients: np.ndarray  # (N_TERMS,)
    score_sd: np.ndarray  # (N_TERMS,)
    score_law: str  # "normal" or "laplace" (unit variance)
    error_law: str  # "t3", "normal" or "cauchy"
    error_scale: float

    def error_quantile(self, tau: float) -> float:
        return float(self.error_scale * error_law_quantile(self.error_law, tau))

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores (size, N_TERMS), errors (size,)) of one block."""
        if self.score_law == "normal":
            a = rng.standard_normal((size, self.score_sd.size))
        else:
            a = rng.laplace(0.0, 1.0 / np.sqrt(2.0), (size, self.score_sd.size))
        a = a * self.score_sd
        e = {"t3": lambda: rng.standard_t(3, size), "normal": lambda: rng.standard_normal(size),
             "cauchy": lambda: rng.standard_cauchy(size)}[self.error_law]()
        return a, self.error_scale * e


_K = np.arange(1, N_TERMS + 1)
#: the simulated designs of ``data.design`` (paper: Zhou & Xiang 2022, Section 5)
DESIGNS = {
    "paper": SimulatedDesign("paper", cosine_functions, true_coefficients(), 1.0 / _K, "normal", "t3", 1.0),
    # Brownian motion on [0, 1]: score sd 1 / ((k - 1/2) pi); beta with coefficients 2 (-1)^k exp(-(k - 1) / 3)
    "brownian": SimulatedDesign("brownian", brownian_functions, 2.0 * (-1.0) ** _K * np.exp(-(_K - 1) / 3.0),
                                1.0 / ((_K - 0.5) * np.pi), "normal", "normal", 0.5),
    # Laplace scores, sd k^(-3/4) on the Fourier basis; beta coefficients 1.5 k^(-1.2) cos(k), Cauchy errors
    "heavy_tailed": SimulatedDesign("heavy_tailed", fourier_functions, 1.5 * _K ** -1.2 * np.cos(_K),
                                    _K ** -0.75, "laplace", "cauchy", 0.3),
}


def get_design(name: str) -> SimulatedDesign:
    try:
        return DESIGNS[name]
    except KeyError:
        raise ValueError(f"unknown design {name!r}; choose one of {', '.join(DESIGNS)}") from None


def design_beta(name: str, grid: np.ndarray) -> np.ndarray:
    """The true coefficient function of design ``name`` on ``grid``."""
    d = get_design(name)
    return d.coefficients @ d.functions(np.asarray(grid, dtype=float), d.coefficients.size)


def simulate_slice(seed: int, start: int, stop: int, *, tau: float, grid: np.ndarray,
                   n_terms: int = N_TERMS, design: str = "paper") -> CurveData:
    """Samples ``start:stop`` of the design with seed ``seed`` (independent of any split)."""
    if not 0 < tau < 1:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    if not 0 <= start <= stop:
        raise ValueError(f"bad sample range {start}:{stop}")
    grid = np.asarray(grid, dtype=float)
    if design != "paper":
        return _simulate_other(get_design(design), seed, start, stop, tau=tau, grid=grid)
    w = true_coefficients(n_terms)
    sd = 1.0 / np.arange(1, n_terms + 1)
    scores, errors = [], []
    for block in range(start // BLOCK, -(-stop // BLOCK)):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(DATA_STREAM, block)))
        a = rng.standard_normal((BLOCK, n_terms)) * sd
        e = rng.standard_t(3, BLOCK)
        lo, hi = max(start - block * BLOCK, 0), min(stop - block * BLOCK, BLOCK)
        scores.append(a[lo:hi])
        errors.append(e[lo:hi])
    a = np.concatenate(scores) if scores else np.zeros((0, n_terms))
    e = np.concatenate(errors) if errors else np.zeros(0)
    curves = a @ cosine_functions(grid, n_terms)
    response = a @ w + e - quantile_shift(tau)
    return CurveData(curves, response, grid)


def _simulate_other(d: SimulatedDesign, seed: int, start: int, stop: int, *, tau: float,
                    grid: np.ndarray) -> CurveData:
    scores, errors = [], []
    for block in range(start // BLOCK, -(-stop // BLOCK)):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(DATA_STREAM, block)))
        a, e = d.draw(rng, BLOCK)
        lo, hi = max(start - block * BLOCK, 0), min(stop - block * BLOCK, BLOCK)
        scores.append(a[lo:hi])
        errors.append(e[lo:hi])
    a = np.concatenate(scores) if scores else np.zeros((0, d.score_sd.size))
    e = np.concatenate(errors) if errors else np.zeros(0)
    curves = a @ d.functions(grid, d.score_sd.size)
    response = a @ d.coefficients + e - d.error_quantile(tau)
    return CurveData(curves, response, grid)


def simulate_partition(seed: int, n: int, num_partitions: int, partition: int, *, tau: float,
                       grid: np.ndarray, design: str = "paper") -> CurveData:
    """Client ``partition``'s share of an n-sample design split evenly over ``num_partitions``."""
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition id {partition} outside [0, {num_partitions})")
    bounds = partition_bounds(n, num_partitions)
    return simulate_slice(seed, int(bounds[partition]), int(bounds[partition + 1]), tau=tau, grid=grid,
                          design=design)


def mise(beta_hat: np.ndarray, beta: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """int (beta_hat - beta)^2 over the grid (:func:`fdp_flower.functional.fpca.quadrature_weights`:
    Simpson's rule, or the trapezoidal rule where Simpson's weights are not all positive); beta_hat (..., G)."""
    return ((np.asarray(beta_hat) - beta) ** 2) @ quadrature_weights(grid)
