"""The inference releases of simulated sites, in one process (the Python API; docs/inference.md).

:func:`run_inference` plays every site's two inference steps on its own rows
(:mod:`fdp_flower.inference.releases`) and the server's choices between them (the density window),
charges every release to the model's ledger, and returns the aggregated sandwich pieces.  A
deployment runs the same site functions in its ClientApp; only the transport differs.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.inference.bands import InferenceError, SandwichEstimate, aggregate, choose_window
from fdp_flower.inference.fdp_admm import fit_multipliers, inference_round, noise_shape, row_bound, site_rows_of
from fdp_flower.inference.releases import (
    RELEASE_SHARES,
    SiteInference,
    first_release,
    inference_multipliers,
    inference_releases,
    scale_edges,
    window_release,
)
from fdp_flower.privacy.ledger import GaussianRelease


@dataclass(frozen=True)
class InferenceRecord:
    """What the inference phase released and how it was calibrated (all public).

    sandwich : the aggregated pieces (:class:`fdp_flower.inference.bands.SandwichEstimate`), None when the
        releases could not support one (``failure`` says why; the releases made are still charged)
    releases : the ledger events it added (three per site)
    eps_total, delta : the total (eps, delta) the fit and these releases share (None: not private)
    multipliers : (z_scale, z_gram, z_window), None when not private
    shares : how the inference releases split their mu^2 (scale histogram, Gram, window)
    """

    sandwich: SandwichEstimate
    releases: tuple[GaussianRelease, ...]
    eps_total: float | None
    delta: float
    multipliers: tuple[float, float, float] | None
    shares: tuple[float, float, float]
    failure: str = ""


def check_inferable(model) -> None:
    """Refuse (one line, before any release) a private fit whose estimator the bands do not model: the Newton rule
    (docs/algorithms.md section 1.3) -- the bands' privacy part is the ADMM rule's noise recursion (eq. (9.4)).
    Privacy off, the Newton rule ends at the exact estimator, whose sandwich the band is."""
    from fdp_flower.algorithms.fdp_admm.plan import newton_rule

    if model.privacy.private and newton_rule(model.scenario):
        raise ValueError("inference: the private bands model the ADMM rule's noise recursion; this fit ran the Newton "
                         "rule (fit's default with a total budget), whose releases they do not describe: fit with "
                         "rule='admm' to infer (FDPQuantileRegressor with inference does)")


def run_inference(model, parts: Sequence[tuple[np.ndarray, np.ndarray]], *, eps_total: float | None,
                  shares: Sequence[float] = RELEASE_SHARES) -> InferenceRecord:
    """Every site's inference releases at ``model.w`` and the server's aggregate.

    ``parts``: each site's (curves (m_i, G) on the model's grid, responses (m_i,)), in the model's client
    order.  ``eps_total``: the total eps (at the model's delta) that the fit's releases and these share; the
    three releases are calibrated (PLD) so that the site that spent most in the fit meets it exactly, every
    other site spending less.  A non-private model (``model.privacy.private`` False) releases without noise
    and needs no ``eps_total``.
    """
    check_inferable(model)
    sc = model.scenario
    sizes = tuple(int(m) for m in model.sample_sizes)
    if len(parts) != len(sizes) or any(np.shape(y)[0] != m for (_, y), m in zip(parts, sizes)):
        raise ValueError(f"parts: expected {len(sizes)} sites with {list(sizes)} rows (the fit's split), "
                         f"got {[np.shape(y)[0] for _, y in parts]}")
    delta = float(model.privacy.delta)
    private = bool(model.privacy.private)
    if private:
        if eps_total is None:
            raise ValueError("eps_total: a private model needs the total budget its fit and the inference share")
        worst = int(model.privacy.worst_client)
        z_scale, z_gram, z_window = inference_multipliers(eps_total, delta, fit_multipliers(model.ledger, worst),
                                                          shares=shares)
    else:
        z_scale = z_gram = z_window = None
    round_ = inference_round(sc)
    source = sc.privacy.noise_source if private else "seeded"
    from fdp_flower.privacy.mechanisms import release_rng

    edges = scale_edges()
    rows = [site_rows_of(model, curves, y) for curves, y in parts]
    firsts = [first_release(r, edges=edges, z_scale=z_scale, z_gram=z_gram,
                            rng=release_rng(sc.seed, i, round_, source) if private else None)
              for i, r in enumerate(rows)]
    n = int(sum(sizes))
    bound = row_bound(sc)
    events: list[GaussianRelease] = []
    if private:
        for i, m in enumerate(sizes):
            events += inference_releases(i, round_, m, bound=bound, z_scale=z_scale, z_gram=z_gram,
                                         z_window=z_window)
    first_step = [e for e in events if e.round == round_]
    multipliers = (z_scale, z_gram, z_window) if private else None
    total = float(eps_total) if private else None
    try:
        half_width = choose_window(np.mean([f.scale_histogram for f in firsts], axis=0), edges, n=n,
                                   tau=float(sc.model.loss.tau))
    except InferenceError as exc:  # the second step is not made: only the first is charged
        return InferenceRecord(None, tuple(first_step), total, delta, multipliers, tuple(float(v) for v in shares),
                               str(exc))
    windows = [window_release(r, half_width, z_window=z_window,
                              rng=release_rng(sc.seed, i, round_ + 1, source) if private else None)
               for i, r in enumerate(rows)]
    sites = [SiteInference(f, np.asarray(w), sw) for f, (w, sw) in zip(firsts, windows)]
    try:
        sandwich = aggregate(sites, tau=float(sc.model.loss.tau), half_width=half_width,
                             scales=noise_shape(sc, model.basis))
    except InferenceError as exc:
        return InferenceRecord(None, tuple(events), total, delta, multipliers, tuple(float(v) for v in shares),
                               str(exc))
    return InferenceRecord(sandwich, tuple(events), total, delta, multipliers, tuple(float(v) for v in shares))
