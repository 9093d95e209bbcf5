"""Federated DP-FPCA (docs/algorithms.md, section 2, basis ``federated_dp``): pure functions.

Each client expands its curves in a fixed, data-independent pre-basis psi_1..psi_B
(orthonormal in L2 on the grid), clips every coefficient vector c_ij to
||c_ij|| <= c_b, and releases once

- its second-moment matrix C_i = (1/m_i) sum_j c_ij c_ij^T plus a *symmetric*
  Gaussian matrix (i.i.d. N(0, sigma_i^2) on and above the diagonal, mirrored:
  the "Analyze Gauss" release of Dwork, Talwar, Thakurta and Zhang, 2014), and
- its mean mu_i = (1/m_i) sum_j c_ij plus N(0, sigma_i^2 I_B).

Under replace-one, C_i moves by (c c^T - c' c'^T) / m_i, whose Frobenius norm is
at most 2 c_b^2 / m_i, and mu_i by at most 2 c_b / m_i.  The upper triangle of a
symmetric matrix has an l2 norm no larger than the matrix's Frobenius norm, so the
pair (upper(C_i), mu_i) is one Gaussian release of l2-sensitivity

    Delta_i = sqrt((2 c_b^2 / m_i)^2 + (2 c_b / m_i)^2),

with sigma_i = z Delta_i and z calibrated so that this single release is
(eps, delta)-DP (``basis.eps``, ``basis.delta``).  It is one ledger event per client
(mechanism ``fpca_covariance``, round 0: before FDP-ADMM's round 1), and it
composes with the FDP-ADMM releases in the client's ledger.

The server weights the summaries by the public m_i, forms the covariance
C - mu mu^T of the pre-basis coefficients, keeps its K leading eigenvectors v_k and
broadcasts phi_k = sum_b v_kb psi_b and the mean function sum_b mu_b psi_b.  No
raw curve, coefficient vector or score ever leaves a client.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.core.clipping import clip_rows
from fdp_flower.functional.fpca import FunctionalBasis, fixed_basis
from fdp_flower.privacy.calibration import calibrate_noise_multiplier
from fdp_flower.privacy.ledger import GaussianRelease

#: Ledger round of the covariance release: it happens before FDP-ADMM's round 1.
FPCA_ROUND = 0
#: Ledger mechanism name (its replace-one / add-remove factor, 1, is in
#: :data:`fdp_flower.privacy.ledger.NEIGHBOURING_FACTORS`).
FPCA_MECHANISM = "fpca_covariance"


def pre_basis(family: str, size: int, grid: np.ndarray) -> FunctionalBasis:
    """The fixed pre-basis psi_1..psi_B (orthonormal in L2 on ``grid``; no centring)."""
    return fixed_basis(family, size, grid)


def summary_sensitivity(*, clip_cb: float, m) -> np.ndarray:
    """Replace-one l2-sensitivity of the joint release (upper(C_i), mu_i):
    sqrt((2 c_b^2 / m)^2 + (2 c_b / m)^2)."""
    if not (clip_cb > 0 and math.isfinite(clip_cb)):
        raise ValueError(f"clip_cb must be finite and > 0, got {clip_cb}")
    m = np.asarray(m, dtype=float)
    if np.any(m < 1):
        raise ValueError("every client needs at least one sample (m_i >= 1)")
    return np.hypot(2.0 * clip_cb**2 / m, 2.0 * clip_cb / m)


def noise_multiplier(eps: float, delta: float) -> float:
    """z = sigma / Delta of one Gaussian release that is (eps, delta)-DP (PLD calibration)."""
    return float(calibrate_noise_multiplier(eps, delta, [1.0]))


def symmetric_gaussian(dim: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """A (dim, dim) symmetric matrix with i.i.d. N(0, sigma^2) entries on and above the diagonal."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be finite and > 0, got {sigma}")
    upper = np.triu(rng.standard_normal((dim, dim))) * sigma
    return upper + np.triu(upper, 1).T


@dataclass(frozen=True)
class CovarianceSummary:
    """What one client releases in the FPCA phase (all of it noisy when private)."""

    second_moment: np.ndarray  # (B, B) symmetric
    mean: np.ndarray  # (B,)
    num_examples: int
    sensitivity: float
    sigma: float  # 0.0 when privacy is off
    clipped_rows: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"second_moment": self.second_moment, "mean": self.mean}


def client_summary(coefficients: np.ndarray, *, clip_cb: float, sigma: float | None,
                   rng: np.random.Generator | None) -> CovarianceSummary:
    """Clip coefficient vectors to c_b, form (C_i, mu_i) and add the noise.

    ``sigma`` None (privacy off) releases the exact summary and needs no ``rng``.
    """
    coefficients = np.asarray(coefficients, dtype=float)
    if coefficients.ndim != 2 or coefficients.shape[0] < 1:
        raise ValueError(f"coefficients must have shape (m >= 1, B), got {coefficients.shape}")
    clipped, n_clipped = clip_rows(coefficients, clip_cb)
    m, dim = clipped.shape
    second = clipped.T @ clipped / m
    mean = clipped.mean(axis=0)
    sensitivity = float(summary_sensitivity(clip_cb=clip_cb, m=m))
    if sigma is None:
        return CovarianceSummary(second, mean, m, sensitivity, 0.0, n_clipped)
    if rng is None:
        raise ValueError("a private summary needs a random generator")
    second = second + symmetric_gaussian(dim, sigma, rng)
    mean = mean + sigma * rng.standard_normal(dim)
    return CovarianceSummary(second, mean, m, sensitivity, float(sigma), n_clipped)


def check_summary(second_moment: np.ndarray, mean: np.ndarray, dim: int) -> None:
    """Raise ``ValueError`` unless a received summary has the pre-basis' shape and is finite/symmetric."""
    if np.shape(second_moment) != (dim, dim) or np.shape(mean) != (dim,):
        raise ValueError(f"summary must be a ({dim}, {dim}) matrix and a ({dim},) mean, "
                         f"got {np.shape(second_moment)} and {np.shape(mean)}")
    if not (np.all(np.isfinite(second_moment)) and np.all(np.isfinite(mean))):
        raise ValueError("summary contains NaN or infinite values")
    if not np.allclose(second_moment, second_moment.T, rtol=0, atol=1e-12):
        raise ValueError("summary matrix is not symmetric")


def aggregate_basis(second_moments: Sequence[np.ndarray], means: Sequence[np.ndarray], sizes: Sequence[int],
                    pre: FunctionalBasis, n_components: int, *, whiten: bool = False) -> FunctionalBasis:
    """The server step: weight by m_i / n, covariance C - mu mu^T, K leading eigenvectors.

    Signs are fixed so that each eigenvector's largest-magnitude coefficient is
    positive (the basis is then a deterministic function of the summaries).
    ``whiten`` scales phi_k by 1 / sqrt(lambda_k) so that the scores have unit
    variance (a reparametrization of the same span: beta = sum_k w_k phi_k still
    holds with the scaled phi_k; post-processing, no privacy cost); it needs
    lambda_K > 0.
    """
    sizes = np.asarray(sizes, dtype=float)
    if len(second_moments) != len(means) or len(means) != sizes.size or sizes.size == 0:
        raise ValueError("need one second moment, one mean and one size per client")
    dim = pre.n_components
    if not 1 <= n_components <= dim:
        raise ValueError(f"n_components must be in [1, {dim}] (the pre-basis size), got {n_components}")
    for c, mu in zip(second_moments, means):
        check_summary(np.asarray(c), np.asarray(mu), dim)
    weights = sizes / sizes.sum()
    second = np.einsum("i,ijk->jk", weights, np.asarray(second_moments, dtype=float))
    mean = weights @ np.asarray(means, dtype=float)
    cov = second - np.outer(mean, mean)
    cov = (cov + cov.T) / 2.0
    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues, eigenvectors = eigenvalues[order], eigenvectors[:, order]
    lead = eigenvectors[:, :n_components]
    signs = np.sign(lead[np.argmax(np.abs(lead), axis=0), np.arange(n_components)])
    lead = lead * np.where(signs == 0, 1.0, signs)
    positive = np.clip(eigenvalues, 0.0, None)
    total = positive.sum()
    ratio = positive[:n_components] / total if total > 0 else np.zeros(n_components)
    components = lead.T @ pre.components
    if whiten:
        if eigenvalues[n_components - 1] <= 0:
            raise ValueError(f"cannot whiten: eigenvalue {n_components} of the noisy covariance is "
                             f"{eigenvalues[n_components - 1]:.3g} <= 0 (fewer components, or less noise)")
        components = components / np.sqrt(eigenvalues[:n_components])[:, None]
    score_variances = np.ones(n_components) if whiten else positive[:n_components]
    return FunctionalBasis(pre.grid, components, mean @ pre.components, pre.weights, "federated_dp", ratio,
                           eigenvalues=score_variances)


def basis_releases(sizes: Sequence[int], *, clip_cb: float, eps: float, delta: float,
                   clients: Sequence[int] | None = None) -> list[GaussianRelease]:
    """The ledger events of the FPCA phase (one per client), from public quantities only."""
    z = noise_multiplier(eps, delta)
    clients = range(len(sizes)) if clients is None else clients
    out = []
    for client, m in zip(clients, sizes):
        sensitivity = float(summary_sensitivity(clip_cb=clip_cb, m=m))
        out.append(GaussianRelease(int(client), FPCA_ROUND, sensitivity, z * sensitivity,
                                   mechanism=FPCA_MECHANISM))
    return out


def federated_basis(curves_per_client: Sequence[np.ndarray], grid: np.ndarray, *, family: str, size: int,
                    n_components: int, clip_cb: float, eps: float | None, delta: float | None,
                    rngs: Sequence[np.random.Generator] | None) -> tuple[FunctionalBasis, list[CovarianceSummary]]:
    """The whole phase in one process (simulation engines and tests): every client's
    summary, then the server's aggregation.  ``eps`` None: no noise (non-private)."""
    pre = pre_basis(family, size, grid)
    z = None if eps is None else noise_multiplier(eps, delta)
    summaries = []
    for i, curves in enumerate(curves_per_client):
        m = np.shape(curves)[0]
        sigma = None if z is None else z * float(summary_sensitivity(clip_cb=clip_cb, m=m))
        summaries.append(client_summary(pre.scores(curves), clip_cb=clip_cb, sigma=sigma,
                                        rng=None if rngs is None else rngs[i]))
    basis = aggregate_basis([s.second_moment for s in summaries], [s.mean for s in summaries],
                            [s.num_examples for s in summaries], pre, n_components)
    return basis, summaries


# ------------------------------------------------------------------ scenario glue (pure: no Flower)
def phase_noise_sigma(basis_config, m: int) -> float | None:
    """sigma_i of client i's summary for a ``FederatedDPBasis`` config (None if not private)."""
    if not basis_config.private:
        return None
    return noise_multiplier(basis_config.eps, basis_config.delta) * float(
        summary_sensitivity(clip_cb=basis_config.clip_cb, m=m))


def noise_edge(basis_config, sizes: Sequence[float]) -> float:
    """2 sigma sqrt(B): the upper edge of the spectrum of the noise in the pooled covariance summary (a symmetric
    Gaussian matrix of entry sd sigma = sqrt(sum_i (m_i / n)^2 sigma_i^2) in the B-dimensional pre-basis, whose
    eigenvalues fill the semicircle [-2 sigma sqrt(B), 2 sigma sqrt(B)]).  A released eigenvalue below it cannot be
    told from noise: its component is a direction the noise picked, with a true score variance far below the
    released one.  0.0 without privacy or with ``whiten`` (whose released variances are all 1).  Public: the
    sizes, eps, delta, c_b and B only."""
    if basis_config.kind != "federated_dp" or not basis_config.private or basis_config.whiten:
        return 0.0
    sizes = np.asarray(sizes, dtype=float)
    sigmas = np.array([phase_noise_sigma(basis_config, int(m)) for m in sizes])
    pooled = float(np.sqrt(np.sum((sizes / sizes.sum()) ** 2 * sigmas**2)))
    return 2.0 * pooled * math.sqrt(basis_config.pre_basis_size)


def scenario_pre_basis(scenario, grid: np.ndarray) -> FunctionalBasis:
    """The scenario's pre-basis on ``grid``; B functions need at least B grid points (one line otherwise)."""
    b = scenario.basis
    if b.pre_basis_size > grid.size:
        raise ValueError(f"basis.pre_basis_size = {b.pre_basis_size} exceeds the grid's {grid.size} points: the "
                         f"federated DP-FPCA expands every curve in a fixed pre-basis of B functions (default 30) and "
                         f"needs at least B grid points; set basis.pre_basis_size <= {grid.size} (and >= "
                         "basis.n_components) or use a finer grid")
    return pre_basis(b.pre_basis, b.pre_basis_size, grid)


def scenario_client_summary(scenario, client: int, curves: np.ndarray, pre: FunctionalBasis,
                            noise=None) -> CovarianceSummary:
    """Client ``client``'s release for the scenario's ``federated_dp`` basis.

    ``noise`` (optional) maps the release's ledger event (round :data:`FPCA_ROUND`) to its noise
    generator (:meth:`fdp_flower.clients.site.SiteSession.noise_for`); default
    :func:`fdp_flower.privacy.mechanisms.release_rng` at round :data:`FPCA_ROUND` (so every engine draws the same).
    """
    from fdp_flower.privacy.mechanisms import release_rng

    b = scenario.basis
    m = int(np.shape(curves)[0])
    sigma = phase_noise_sigma(b, m)
    scores = pre.scores(curves)  # computed before the noise generator is asked for (and the release charged)
    if sigma is None:
        rng = None
    elif noise is None:
        rng = release_rng(scenario.seed, client, FPCA_ROUND, scenario.privacy.noise_source)
    else:
        rng = noise(GaussianRelease(int(client), FPCA_ROUND, float(summary_sensitivity(clip_cb=b.clip_cb, m=m)),
                                    float(sigma), mechanism=FPCA_MECHANISM))
    return client_summary(scores, clip_cb=b.clip_cb, sigma=sigma, rng=rng)


def scenario_releases(scenario, summaries: Sequence[CovarianceSummary],
                      clients: Sequence[int] | None = None) -> list[GaussianRelease]:
    """Ledger events of the summaries actually released (none when ``private`` is false)."""
    clients = range(len(summaries)) if clients is None else clients
    return [GaussianRelease(int(c), FPCA_ROUND, s.sensitivity, s.sigma, mechanism=FPCA_MECHANISM)
            for c, s in zip(clients, summaries) if s.sigma > 0]


def scenario_basis_in_process(scenario, curves_per_client: Sequence[np.ndarray], grid: np.ndarray):
    """The phase run in one process: (basis, ledger events), identical to the Flower phase's."""
    pre = scenario_pre_basis(scenario, grid)
    summaries = [scenario_client_summary(scenario, i, c, pre) for i, c in enumerate(curves_per_client)]
    basis = aggregate_basis([s.second_moment for s in summaries], [s.mean for s in summaries],
                            [s.num_examples for s in summaries], pre, scenario.basis.n_components,
                            whiten=scenario.basis.whiten)
    return basis, scenario_releases(scenario, summaries)
