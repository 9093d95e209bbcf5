"""``model.summary()``: a statsmodels-style table of a fitted functional model (docs/api.md).

The header says what was fitted and what it cost: tau, n, the sites and their m_i, the penalty,
the rounds and the released estimator, the basis and whether it was itself private, the clip, and
the privacy spent (eps at delta by PLD, the neighbouring relation, the split between the fit and the
inference releases).  The table gives the intercept and beta(t) at chosen points with standard errors
(split into the sampling and the privacy part) and intervals when the model has inference releases
(docs/inference.md); without them it gives the estimates only and says how to get intervals.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdp_flower.inference.bands import GRAM_SNR_WARN
from fdp_flower.outputs.models import NEIGHBOURING_TEXT

WIDTH = 86


@dataclass(frozen=True)
class ModelSummary:
    """The printed summary (``text``) and its coefficient table (``table``, a pandas DataFrame)."""

    text: str
    table: object

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def _basis_line(model) -> str:
    b = model.scenario.basis
    k = model.basis.n_components
    g = model.basis.grid.size
    if b.kind == "fixed":
        return f"{b.family}, K = {k} on {g} grid points (fixed, data-independent: no privacy cost)"
    if b.kind == "federated_dp":
        if not b.private:
            return f"federated FPCA, K = {k} on {g} grid points (NOT private: summaries released without noise)"
        return (f"federated DP-FPCA, K = {k} on {g} grid points (private: one covariance release per site at "
                f"eps = {b.eps:g}, in the ledger)")
    if b.kind == "pooled":
        return f"pooled FPCA, K = {k} on {g} grid points (NOT private: computed from every curve without noise)"
    return f"provided by the caller, K = {k} on {g} grid points (treated as public: not charged)"


def _estimator_line(model) -> str:
    a = model.scenario.algorithm
    rounds = len(model.history)
    kind = a.estimator.kind
    if kind == "tail_average":
        from fdp_flower.algorithms.fdp_admm.plan import tail_start

        s = tail_start(model.scenario)
        text = f"tail average of rounds {s}-{rounds}" if rounds >= s else f"last iterate (round {rounds})"
    elif kind == "average":
        text = f"average of rounds 1-{rounds}"
    else:
        text = f"last iterate (round {rounds})"
    return f"{text}; {rounds} of {a.rounds} rounds ({model.stop_reason})"


def _privacy_lines(model) -> list[str]:
    p = model.privacy
    if not p.private:
        return ["not private (no noise was added: no differential-privacy guarantee)"]
    relation = NEIGHBOURING_TEXT.get(p.neighbouring, p.neighbouring)
    lines = [f"eps = {p.eps:.4g} at delta = {p.delta:g} (PLD accountant; site {p.worst_client}, the one that spent most, "
             f"{p.releases} releases); {relation} neighbours: one record of one site"]
    record = model.inference
    if record is not None and record.releases:
        from fdp_flower.inference.releases import INFERENCE_MECHANISMS
        from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, composed_mu

        # the fit's releases of the same site: Gaussians compose exactly into one (its exact eps, no PLD grid)
        fit = [r.noise_multiplier for r in model.ledger.releases
               if r.client == p.worst_client and r.mechanism not in INFERENCE_MECHANISMS]
        fit_eps = analytic_gaussian_epsilon(composed_mu(fit), p.delta)
        lines.append(f"total budget {record.eps_total:g}: the fit alone eps = {fit_eps:.4g}, then 3 inference releases "
                     f"per site (noise multipliers {', '.join(f'{z:.3g}' for z in record.multipliers)})")
    elif p.mode == "per_round":
        lines.append(f"eps = {p.eps_budget:g} per round (the rounds compose to the total above)")
    elif p.eps_budget is not None:
        lines.append(f"total budget eps = {p.eps_budget:g}")
    return lines


def _fmt(v: float) -> str:
    return f"{v:10.4g}"


def model_summary(model, *, points=None, level: float = 0.95) -> ModelSummary:
    """The summary of ``model`` (a FunctionalModel) at ``points`` of t (default: 5 equispaced grid points)."""
    import pandas as pd

    grid = model.grid
    if points is None:
        points = np.linspace(grid[0], grid[-1], 5)
    points = np.atleast_1d(np.asarray(points, dtype=float))
    if points.ndim != 1 or np.any(points < grid[0] - 1e-12) or np.any(points > grid[-1] + 1e-12):
        raise ValueError(f"points: expected values of t in the grid's range [{grid[0]:g}, {grid[-1]:g}]")
    sc = model.scenario
    band, why_not = None, None
    if model.inference is not None:
        try:
            band = model.confidence_band(level)
        except ValueError as exc:  # InferenceError: the releases cannot support a band
            why_not = str(exc)
    names = ["intercept"] + [f"beta({t:.4g})" for t in points]
    if band is not None:
        at = band.at(points)
        interp = lambda v: np.interp(points, grid, v)  # noqa: E731
        table = pd.DataFrame({
            "coef": [band.intercept, *at["estimate"]],
            "std err": [band.intercept_sd, *at["sd"]],
            "sampling": [band.intercept_sd_sampling, *interp(band.sd_sampling)],
            "privacy": [band.intercept_sd_privacy, *interp(band.sd_privacy)],
            "lower": [band.intercept_interval[0], *at["pointwise_lower"]],
            "upper": [band.intercept_interval[1], *at["pointwise_upper"]],
        }, index=names)
    else:
        table = pd.DataFrame({"coef": [model.intercept, *np.interp(points, grid, model.beta_values)]}, index=names)
    sizes = model.sample_sizes
    pen = sc.model.penalty
    title = "FDP-ADMM functional quantile regression" + (" (differentially private)" if model.privacy.private
                                                         else " (F-ADMM, not private)")
    rows = [
        ("Quantile (tau)", f"{model.tau:g}"),
        ("Observations (n)", f"{sum(sizes)}" if sizes else "?"),
        ("Sites (M)", f"{len(sizes)}, m_i from {min(sizes)} to {max(sizes)}" if sizes else "?"),
        ("Penalty", f"{pen.kind}, lam = {pen.lam:g} (intercept not penalized)" if pen.kind != "none" else "none"),
        ("Estimator", _estimator_line(model)),
        ("Basis", _basis_line(model)),
        ("Clip", f"c1 = {sc.model.clip_c1:g} ({sc.model.clip_shape})"
                 + (f", intercept column c0 = {sc.model.intercept_share * sc.model.clip_c1:g}" if sc.model.intercept
                    else ", no intercept")),
    ]
    privacy = _privacy_lines(model)
    rows.append(("Privacy", privacy[0]))
    rows += [("", line) for line in privacy[1:]]
    if band is not None:
        s = band.sandwich
        d = s.density
        rows.append(("Inference", f"location-shift ('iid') sandwich, density at the quantile {d.density:.4g} "
                                  f"(window +-{d.half_width:.3g})"))
        rows.append(("", f"privacy noise through the server's recursion; start transient ||A|| = "
                         f"{band.coefficients.transient_norm:.3g} removed (debiased estimate)"))
        rows.append(("", f"smoothing bias of the noisy linearization points: {band.coefficients.smoothing}"))
        if s.gram_snr < GRAM_SNR_WARN:
            rows.append(("WARNING", f"the released Gram matrix's smallest eigenvalue is only {s.gram_snr:.3g} noise sds: "
                                    "intervals are approximate"))
    import textwrap

    lines = [title.center(WIDTH), "=" * WIDTH]
    for k, v in rows:
        wrapped = textwrap.wrap(v, WIDTH - 18) or [""]
        lines += [f"{k:<18}{wrapped[0]}"] + [f"{'':<18}{rest}" for rest in wrapped[1:]]
    lines.append("=" * WIDTH)
    if band is not None:
        pct = f"{100 * level:g}%"
        head = f"{'':<14}{'coef':>10}{'std err':>10}{'sampling':>10}{'privacy':>10}{'[' + pct:>13}{'interval]':>13}"
        lines += [head, "-" * WIDTH]
        for name, r in table.iterrows():
            lines.append(f"{name:<14}{_fmt(r['coef'])}{_fmt(r['std err'])}{_fmt(r['sampling'])}{_fmt(r['privacy'])}"
                         f"{r['lower']:13.4g}{r['upper']:13.4g}")
        lines.append("-" * WIDTH)
        lines.append(f"std err^2 = sampling^2 + privacy^2.  Simultaneous {pct} band for beta(t) on the "
                     f"{grid.size}-point grid:")
        lines.append(f"estimate -+ {band.critical_simultaneous:.3g} std err (pointwise: "
                     f"-+ {band.critical_pointwise:.3g}); model.confidence_band() has both.")
    else:
        lines += [f"{'':<14}{'coef':>10}", "-" * WIDTH]
        lines += [f"{name:<14}{_fmt(r['coef'])}" for name, r in table.iterrows()]
        lines.append("-" * WIDTH)
        if why_not is not None:
            import textwrap

            lines += textwrap.wrap(f"No standard errors: {why_not}.", WIDTH)
        else:
            lines.append("No standard errors: the model has no inference releases (fdp_flower.FDPQuantileRegressor, or")
            lines.append("fdp_flower.infer(model, curves, y, eps_total=...), adds them; docs/inference.md).")
    lines.append("=" * WIDTH)
    return ModelSummary("\n".join(lines), table)
