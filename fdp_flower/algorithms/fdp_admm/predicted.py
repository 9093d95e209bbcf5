"""The predicted privacy cost of an FDP-ADMM scenario, before training (issue 29).

:func:`fdp_flower.privacy.predicted_cost.predicted_privacy_cost` evaluates the floor (F.1) from public
quantities; this module reads them from a scenario: the sizes m_i, the total (or per-round) eps and
delta, tau, K, the clip, and the share of the budget that reaches the fit's releases -- from the run's
own noise plan, so a private federated FPCA basis (total mode) or the per-round rule's L releases are
counted as the run spends them: budget_share = (sum_l z_l^-2) / mu(eps, delta)^2.

With the sphere clip the floor depends on the score variances lambda_k of the clipped rows.  When the
basis does not publish them (fixed bases; a federated basis before its phase) the prediction uses
lambda_k = c1^2 / K, the isotropic rows on the sphere: since sum_k lambda_k <= c1^2 for rows with
||a|| <= c1, Cauchy-Schwarz gives sum_k lambda_k^-2 / sum_k lambda_k^-1 >= K / c1^2, so this is a lower
bound of the floor (``kind`` says which).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fdp_flower.privacy.predicted_cost import PredictedCost, predicted_privacy_cost, privacy_cost_warning

__all__ = ["newton_would_help", "predicted_cost_lines", "predicted_cost_of", "predicted_cost_section"]


def predicted_cost_of(scenario, sizes, *, eigenvalues=None, n_components: int | None = None
                      ) -> tuple[PredictedCost, str] | None:
    """(prediction, kind) of an FDP-ADMM ``scenario`` with sites of ``sizes`` records, or None when privacy
    is off, the loss is not the check loss or K is unknown before the data (``basis.explained_variance``
    without ``n_components``).  ``kind``: "floor" or "lower bound of the floor" (sphere clip without the
    basis's score variances)."""
    from fdp_flower.algorithms.fdp_admm.plan import NoisePlan
    from fdp_flower.privacy.calibration import target_mu

    p = scenario.privacy
    if not p.enabled or getattr(scenario.algorithm, "kind", None) != "fdp_admm":
        return None
    tau = getattr(scenario.model.loss, "tau", None)
    if tau is None:
        return None
    k = n_components if n_components is not None else getattr(scenario.basis, "n_components", None)
    if k is None and eigenvalues is not None:
        k = len(eigenvalues)
    if k is None:
        return None
    k = int(k)
    plan = NoisePlan(scenario, k + int(scenario.model.intercept), leading_score_variance=1.0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        mu_fit_sq = float(np.sum(np.asarray(plan.noise_multipliers, float) ** -2.0))
        share = mu_fit_sq / target_mu(p.eps, p.delta) ** 2
    if not (math.isfinite(share) and share > 0):  # an eps so large that no noise is left to predict from
        return None
    model = scenario.model
    if model.clip_shape == "ellipsoid":
        cost = predicted_privacy_cost(sizes, eps=p.eps, delta=p.delta, tau=float(tau), n_components=k,
                                      clip_radius=model.clip_c1, budget_share=share)
        return cost, "floor"
    lam = None if eigenvalues is None else np.asarray(eigenvalues, float)
    kind = "floor"
    if lam is None or lam.shape != (k,) or not np.all(lam > 0):
        lam, kind = np.full(k, model.clip_c1**2 / k), "lower bound of the floor"
    cost = predicted_privacy_cost(sizes, eps=p.eps, delta=p.delta, tau=float(tau), n_components=k,
                                  clip_shape="sphere", clip_radius=model.clip_c1, score_variances=lam,
                                  budget_share=share)
    return cost, kind


def newton_would_help(scenario) -> bool:
    """Whether a private ``scenario`` runs the ADMM rule where the Newton rule could run instead on a basis without
    score variances (one total budget, trust "site"): there the Newton rule's 30 rounds end closer to the exact
    estimator wherever the prediction is high (benchmarks: 500 and 1000 records per site on two designs; at 2000
    per site the two are tied at the paper design's tails)."""
    from fdp_flower.algorithms.fdp_admm.config import publishes_score_variances

    algorithm, privacy = scenario.algorithm, scenario.privacy
    return (getattr(algorithm, "rule", "admm") == "admm" and privacy.enabled and privacy.mode == "total"
            and getattr(privacy, "trust", "site") == "site" and not publishes_score_variances(scenario.basis))


def predicted_cost_section(scenario, sizes, *, eigenvalues=None, n_components: int | None = None
                           ) -> dict[str, Any] | None:
    """The ``predicted_privacy_cost`` entry of summary.json (None when :func:`predicted_cost_of` is)."""
    got = predicted_cost_of(scenario, sizes, eigenvalues=eigenvalues, n_components=n_components)
    if got is None:
        return None
    cost, kind = got
    warning = privacy_cost_warning(cost)
    if warning is not None and kind != "floor":  # the isotropic bound is proportional to K
        fewer = int(cost.n_components / cost.cost)
        if fewer >= 1:
            warning += f", or n_components <= {fewer} (now {cost.n_components})"
    if warning is not None and newton_would_help(scenario):
        warning += (", or the Newton rule (rule='newton', algorithm.rule: newton): 30 rounds, measured closer to "
                    "the exact estimator than the ADMM rule on a fixed basis at up to 1000 records per site")
    return {"cost": cost.cost, "kind": kind, "tau": cost.tau, "n_components": cost.n_components,
            "clip_shape": cost.clip_shape, "clip_radius": cost.clip_radius, "budget_share": cost.budget_share,
            "smallest_site": int(np.min(cost.sizes)), "warning": warning}


def predicted_cost_lines(section: dict[str, Any] | None) -> list[str]:
    """What ``fdp-flower run``, ``fdp-flower privacy`` and ``fit(progress=True)`` print: one line, and the
    warning (naming the fix) when the predicted cost exceeds 1."""
    if section is None:
        return []
    bound = "" if section["kind"] == "floor" else " (a lower bound: the basis publishes no score variances)"
    line = (f"predicted privacy cost {section['cost']:.3g}{bound}: E int (beta_private - beta_exact)^2 over the "
            f"statistical error of the coefficient function for a fit that does not shrink (tau = {section['tau']:g}, "
            f"K = {section['n_components']}, smallest site {section['smallest_site']} records)")
    return [line] + ([f"warning: {section['warning']}"] if section.get("warning") else [])
