"""The Gaussian mechanism and reproducible per-release noise (docs/algorithms.md, section 0)."""
from __future__ import annotations

import numpy as np

# Domain-separation tags for SeedSequence spawn keys, so that data, noise and
# anything else drawn from one user seed never share a stream.
NOISE_STREAM = 1
DATA_STREAM = 2
SPLIT_STREAM = 3  # how the Python API splits a caller's rows over simulated clients


def classic_gaussian_sigma(sensitivity, eps: float, delta: float):
    """sigma = Delta sqrt(2 ln(1.25/delta)) / eps: the per-release (eps, delta) rule.

    The classic analysis (Dwork & Roth, Thm A.1) holds for eps <= 1; the paper
    uses it per round.  ``sensitivity`` may be an array (one per client).
    """
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return np.asarray(sensitivity, dtype=float) * np.sqrt(2.0 * np.log(1.25 / delta)) / eps


def zcdp_of_release(sensitivity, sigma):
    """rho = Delta^2 / (2 sigma^2): the zCDP of one Gaussian release."""
    return np.asarray(sensitivity, dtype=float) ** 2 / (2.0 * np.asarray(sigma, dtype=float) ** 2)


def zcdp_to_dp(rho: float, delta: float) -> float:
    """Bun & Steinke (2016), Prop. 1.3: rho-zCDP gives (rho + 2 sqrt(rho ln(1/delta)), delta)-DP."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return float(rho + 2.0 * np.sqrt(rho * np.log(1.0 / delta)))


NOISE_SOURCES = ("seeded", "os_entropy")


def release_rng(seed: int, client: int, round_: int, source: str = "seeded") -> np.random.Generator:
    """The generator of client ``client``'s noise in round ``round_``; the one place that decides.

    ``source="seeded"`` (default): derived from the run seed only, so that any
    engine (in-process, Flower simulation, deployment) draws the same noise for
    the same release, and a client needs no state across rounds.
    ``source="os_entropy"``: PCG64 seeded with 128 bits from the operating
    system's CSPRNG (``secrets``), for real deployments where the run seed may
    be known to others; not reproducible (``seed``, ``client``, ``round_`` unused).
    """
    if source == "seeded":
        return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(NOISE_STREAM, client, round_)))
    if source == "os_entropy":
        import secrets

        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(secrets.randbits(128))))
    raise ValueError(f"noise source must be one of {NOISE_SOURCES}, got {source!r}")


def add_gaussian_noise(value: np.ndarray, sigma: float, rng: np.random.Generator,
                       scales: np.ndarray | None = None) -> np.ndarray:
    """value + N(0, sigma^2 I) for one release; with ``scales`` s, value + N(0, sigma^2 diag(s)^2).

    The shaped release is the post-processing (multiplication by diag(s)) of the isotropic
    release of value / s, so it has the privacy of a Gaussian mechanism with sigma and the
    l2-sensitivity of value / s (the Mahalanobis sensitivity; see
    :func:`fdp_flower.core.clipping.clip_rows_ellipsoid`).  The same standard normal draws are used
    with and without ``scales``.  ``sigma`` must be finite and > 0: privacy-off runs do not call
    this at all, so a zero or NaN sigma here is a calibration bug and is refused.
    """
    sigma = float(sigma)
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"noise standard deviation must be finite and > 0, got {sigma}")
    value = np.asarray(value, dtype=float)
    draw = rng.standard_normal(value.shape)
    if scales is not None:
        scales = np.asarray(scales, dtype=float)
        if scales.shape != value.shape[-1:] or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            raise ValueError(f"noise scales must be {value.shape[-1]} positive finite numbers")
        draw = draw * scales
    return value + sigma * draw


def run_noise(seed: int, source: str = "seeded"):
    """The noise source of a run whose releases the server could compute itself (simulated or public
    data): each draw's generator is :func:`release_rng` of the release's (client, round).  Takes the
    draw's ledger events (:data:`fdp_flower.algorithms.protocol.NoiseSource`; every event of one draw
    names the same client and round)."""
    if source not in NOISE_SOURCES:
        raise ValueError(f"noise source must be one of {NOISE_SOURCES}, got {source!r}")

    def noise(events) -> np.random.Generator:
        first = events[0]
        return release_rng(seed, first.client, first.round, source)

    return noise
