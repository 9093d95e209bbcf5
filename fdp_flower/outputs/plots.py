"""PNG plots of runs and sweeps (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator


def _column(rows: list[dict], key: str) -> list[float]:
    return [float(r.get(key, math.nan)) if r.get(key) is not None else math.nan for r in rows]


def _has(rows: list[dict], key: str) -> bool:
    return any(r.get(key) is not None and not (isinstance(r.get(key), float) and math.isnan(r[key]))
               for r in rows)


@dataclass(frozen=True)
class PrivacyCurve:
    """eps spent by the worst client after each round: zCDP and RDP at every round with a release,
    PLD (the accountant every output reports) at up to a dozen rounds, and the run's total budget."""

    client: int
    delta: float
    rounds: tuple[int, ...]
    eps_zcdp: tuple[float, ...]
    eps_rdp: tuple[float, ...]
    pld_rounds: tuple[int, ...]
    eps_pld: tuple[float, ...]
    budget: float | None = None


def privacy_curve(ledger, delta: float, *, budget: float | None = None, pld_points: int = 8) -> PrivacyCurve | None:
    """The :class:`PrivacyCurve` of a :class:`fdp_flower.privacy.PrivacyLedger` (None without releases).

    Gaussian releases with multipliers z_t = sigma_t / Delta_t compose exactly into one Gaussian of
    multiplier (sum_t z_t^-2)^(-1/2), so each PLD point is the PLD accountant's eps of that one
    Gaussian (as the site ledger computes it): the run's reported eps at the last round, up to the
    accountant's discretization, at a cost of one PLD per point.
    """
    from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon

    worst = ledger.worst_case(delta, with_pld=False)
    if worst is None:
        return None
    full = ledger.epsilon_curve(worst.client, delta, with_pld=False)
    rounds = [s.round for s in full]
    releases = [r for r in ledger.of_client(worst.client) if r.sensitivity > 0]
    idx = np.unique(np.linspace(0, len(rounds) - 1, min(pld_points, len(rounds))).round().astype(int))
    pld_rounds = [rounds[i] for i in idx]
    eps_pld = []
    for t in pld_rounds:
        precision = sum(r.noise_multiplier ** -2.0 for r in releases if r.round <= t)
        eps_pld.append(pld_epsilon([GaussianRelease(worst.client, t, 1.0, precision ** -0.5)], delta)
                       if precision > 0 else 0.0)
    return PrivacyCurve(worst.client, float(delta), tuple(rounds), tuple(s.eps_zcdp for s in full),
                        tuple(s.eps_rdp for s in full), tuple(pld_rounds), tuple(float(e) for e in eps_pld), budget)


@dataclass(frozen=True)
class CoefficientFunction:
    """The released coefficient function on its grid, with the true one (simulations) and/or the
    exact non-private estimator of the same penalized problem (the reference solver), when known."""

    grid: np.ndarray
    estimate: np.ndarray
    estimator: str = "released"
    truth: np.ndarray | None = None
    reference: np.ndarray | None = None


def _integer_rounds(ax) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _privacy_panel(ax, curve: PrivacyCurve | None, unit: str = "client") -> None:
    if curve is None:
        ax.set_title("privacy spent (privacy off)")
        ax.text(0.5, 0.5, "privacy off: no noisy release", ha="center", va="center", transform=ax.transAxes)
        return
    ax.plot(curve.rounds, curve.eps_zcdp, label="zCDP (Bun-Steinke)")
    ax.plot(curve.rounds, curve.eps_rdp, label="RDP")
    ax.plot(curve.pld_rounds, curve.eps_pld, "o-", ms=3, label="PLD (reported)")
    if curve.budget is not None:
        ax.axhline(curve.budget, color="k", ls="--", lw=1, label=f"total budget {curve.budget:g}")
    ax.set_title(f"privacy spent by the worst {unit} ({curve.client}), composed")
    ax.set_ylabel(f"eps at delta = {curve.delta:g}")
    ax.legend(fontsize=7)


def _coefficient_panel(ax, coef: CoefficientFunction | None) -> None:
    ax.set_title("coefficient function beta(t)")
    ax.set_xlabel("t")
    if coef is None:
        ax.text(0.5, 0.5, "no basis saved", ha="center", va="center", transform=ax.transAxes)
        return
    if coef.truth is not None:
        ax.plot(coef.grid, coef.truth, color="k", lw=1.5, label="true beta")
    if coef.reference is not None:
        ax.plot(coef.grid, coef.reference, color="tab:green", ls="--", lw=1.2,
                label="exact non-private estimate (same basis)")
    ax.plot(coef.grid, coef.estimate, color="tab:red", lw=1.2, label=f"beta_hat ({coef.estimator})")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.legend(fontsize=7)


def run_history_figure(history: list[dict], title: str = "", *, privacy: PrivacyCurve | None = None,
                       coefficient: CoefficientFunction | None = None):
    """The convergence figure of one FDP-ADMM run (a matplotlib ``Figure``): MISE, objective,
    empirical loss, privacy spent (zCDP, RDP and PLD, with the total budget) against the round, and
    the released beta_hat against the true beta and/or the exact estimator."""
    rounds = _column(history, "round")
    fig = plt.figure(figsize=(13, 7.5))
    grid = fig.add_gridspec(2, 6)
    ax_mise, ax_obj, ax_loss = (fig.add_subplot(grid[0, 2 * i:2 * i + 2]) for i in range(3))
    ax_priv, ax_beta = fig.add_subplot(grid[1, 0:3]), fig.add_subplot(grid[1, 3:6])
    ax_mise.set_title("MISE")
    if any(_has(history, key) for key in ("mise", "mise_avg")):
        for key, label in (("mise", "MISE of w^l"), ("mise_avg", "MISE of wbar^l")):
            if _has(history, key):
                ax_mise.plot(rounds, _column(history, key), label=label)
        ax_mise.set_yscale("log")
        ax_mise.legend(fontsize=7)
    else:
        ax_mise.text(0.5, 0.5, "true beta unknown: no MISE", ha="center", va="center", transform=ax_mise.transAxes)
    for key, label in (("objective", "objective at w^l"), ("augmented_objective", "augmented objective")):
        if _has(history, key):
            ax_obj.plot(rounds, _column(history, key), label=label)
    handles = ax_obj.get_legend_handles_labels()[0]
    if _has(history, "objective_gap"):
        twin = ax_obj.twinx()
        handles += twin.plot(rounds, _column(history, "objective_gap"), color="grey", ls=":",
                             label="relative gap (right axis)")
        twin.set_yscale("log")
        twin.set_ylabel("relative gap to the exact optimum")
    ax_obj.set_title("objective")
    if handles:
        ax_obj.legend(handles=handles, loc="upper right", fontsize=7)
    if _has(history, "empirical_loss"):
        ax_loss.plot(rounds, _column(history, "empirical_loss"))
    ax_loss.set_title("empirical loss at the released primals")
    _privacy_panel(ax_priv, privacy)
    _coefficient_panel(ax_beta, coefficient)
    for a in (ax_mise, ax_obj, ax_loss, ax_priv):
        a.set_xlabel("round")
        _integer_rounds(a)
    for a in (ax_mise, ax_obj, ax_loss, ax_priv, ax_beta):
        a.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run_history(history: list[dict], path: str | Path, title: str = "", *,
                     privacy: PrivacyCurve | None = None, coefficient: CoefficientFunction | None = None) -> Path:
    """Save :func:`run_history_figure` as a PNG."""
    return _save(run_history_figure(history, title, privacy=privacy, coefficient=coefficient), path)


#: panels of the tabular families: (title, [(history key, label)], log scale)
_TABULAR_PANELS = {
    "p2p": [
        ("normalized error ||x_i - x*|| / ||x*|| (mean over nodes)",
         [("released_normalized_error", "released xt_i"), ("primal_normalized_error", "private x_i (evaluation only)")],
         True),
        ("accuracy of the released xt_i (mean over nodes)",
         [("released_train_accuracy", "train"), ("released_test_accuracy", "test")], False),
        ("average loss (mean over nodes)",
         [("released_average_loss", "released xt_i"), ("primal_average_loss", "private x_i (evaluation only)")],
         True),
    ],
    "gradient_admm": [
        ("relative gap to the exact optimum", [("relative_gap", "F(x_t) - F*, relative")], True),
        ("accuracy", [("train_accuracy", "train"), ("test_accuracy", "test")], False),
        ("objective", [("objective", "F(x_t)")], False),
    ],
}


def tabular_history_figure(history: list[dict], family: str, title: str = "", *,
                           privacy: PrivacyCurve | None = None):
    """The convergence figure of a peer-to-peer or gradient-perturbation run: its first two metric
    panels that have data, and the privacy spent, against the round."""
    panels = [p for p in _TABULAR_PANELS[family] if any(_has(history, key) for key, _ in p[1])][:2]
    rounds = _column(history, "round")
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4.6 * (len(panels) + 1), 4.0), squeeze=False)
    for ax, (panel_title, keys, log_scale) in zip(axes[0], panels):
        for key, label in keys:
            if _has(history, key):
                ax.plot(rounds, _column(history, key), label=label)
        if log_scale:
            ax.set_yscale("log")
        ax.set_title(panel_title, fontsize=9)
        ax.legend(fontsize=7)
    _privacy_panel(axes[0, -1], privacy, "node" if family == "p2p" else "client")
    for ax in axes[0]:
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        _integer_rounds(ax)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _coefficient_of_results(out: Path, scenario) -> CoefficientFunction | None:
    from fdp_flower.algorithms.fdp_admm.plan import data_source, split_coefficients
    from fdp_flower.outputs.models import load_results

    try:
        model = load_results(out)
    except ValueError:
        return None
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    reference = None
    if (summary.get("reference") or {}).get("w") is not None:
        _, coef = split_coefficients(scenario, np.asarray(summary["reference"]["w"], dtype=float))
        if coef.size == model.coefficients.size:
            reference = model.basis.function(coef)
    try:
        truth = data_source(scenario).true_beta(model.grid)
    except (OSError, ValueError):
        truth = None
    return CoefficientFunction(model.grid, model.beta_values, scenario.algorithm.estimator.kind, truth, reference)


def results_figure(out: str | Path, title: str | None = None):
    """The convergence figure of a results directory written by ``fdp-flower run`` (any family):
    :func:`run_history_figure` for FDP-ADMM, :func:`tabular_history_figure` otherwise, with the
    privacy curve of its ``ledger.csv``; None when the directory holds no history."""
    from fdp_flower.algorithms.registry import family, parse_any_scenario, resolve
    from fdp_flower.config.base import read_yaml_file
    from fdp_flower.outputs.models import read_ledger_csv
    from fdp_flower.outputs.results import read_csv

    out = Path(out)
    if not (out / "history.csv").is_file() or not (out / "scenario.yaml").is_file():
        return None
    history = read_csv(out / "history.csv")
    if not history:
        return None
    scenario = parse_any_scenario(read_yaml_file(out / "scenario.yaml"), str(out / "scenario.yaml"))
    record = family(scenario.algorithm.kind)
    if record.plots is None:
        return None
    p = scenario.privacy
    # a total budget: privacy.mode total, or DP-(Acc)ADMM, whose (eps, delta) is always the whole run's
    total = getattr(p, "mode", "total") == "total" and getattr(p, "enabled", True)
    budget = float(p.eps) if total and getattr(p, "eps", None) is not None else None
    ledger = read_ledger_csv(out / "ledger.csv") if (out / "ledger.csv").is_file() else None
    curve = privacy_curve(ledger, float(p.delta), budget=budget) if ledger is not None else None
    return resolve(record.plots)(out, scenario, history, curve, scenario.name if title is None else title)


def functional_results_figure(out: Path, scenario, history: list[dict], curve, title: str):
    """FDP-ADMM's results figure: :func:`run_history_figure` with the fitted coefficient function."""
    return run_history_figure(history, title, privacy=curve, coefficient=_coefficient_of_results(out, scenario))


def p2p_results_figure(out: Path, scenario, history: list[dict], curve, title: str):
    """A peer-to-peer run's results figure (:func:`tabular_history_figure`)."""
    return tabular_history_figure(history, "p2p", title, privacy=curve)


def gradient_admm_results_figure(out: Path, scenario, history: list[dict], curve, title: str):
    """A DP-ADMM / DP-AccADMM run's results figure (:func:`tabular_history_figure`)."""
    return tabular_history_figure(history, "gradient_admm", title, privacy=curve)


def plot_results_dir(out: str | Path, title: str | None = None) -> Path | None:
    """Save :func:`results_figure` as ``convergence.png`` in ``out``; None when there is no history."""
    fig = results_figure(out, title)
    return None if fig is None else _save(fig, Path(out) / "convergence.png")


def _mode(config: dict) -> str:
    """A sweep configuration's budget mode; summaries written before the field existed were per-round."""
    return config.get("mode") or "per_round"


def _budget_label(config: dict) -> str:
    if not config["private"]:
        return "no privacy"
    if _mode(config) == "total":
        return f"total eps={config['eps']:g}, delta={config['delta']:g} (whole run)"
    return f"eps={config['eps']:g} per round, delta={config['delta']:g}"


def _eps_axis_label(configs: list[dict]) -> str:
    modes = {_mode(c) for c in configs if c["private"]}
    if modes == {"total"}:
        return "total eps of the whole run (per client)"
    if modes == {"per_round"}:
        return "eps per round"
    return "eps (per round or total: see legend)"


def privacy_utility_figure(summary: dict):
    """MISE of the sweep's estimate against eps (per round, or the whole run's total budget), one
    line per (budget mode, delta), one panel per quantile level; privacy off is a dashed line."""
    configs = summary["configs"]
    taus = sorted({c["tau"] for c in configs})
    fig, axes = plt.subplots(1, len(taus), figsize=(3.4 * len(taus) + 1, 3.6), squeeze=False, sharey=True)
    for ax, tau in zip(axes[0], taus):
        cs = [c for c in configs if c["tau"] == tau]
        for mode, delta in sorted({(_mode(c), c["delta"]) for c in cs if c["private"]}):
            pts = sorted((c["eps"], c["mise_mean"], c["mise_se"]) for c in cs
                         if c["private"] and c["delta"] == delta and _mode(c) == mode)
            if pts:
                x, y, e = zip(*pts)
                label = f"total, delta={delta:g}" if mode == "total" else f"per round, delta={delta:g}"
                ax.errorbar(x, y, yerr=e, marker="o", ms=3, capsize=2, ls="-" if mode == "total" else "-.",
                            label=label)
        for c in cs:
            if not c["private"]:
                ax.axhline(c["mise_mean"], color="k", ls="--", lw=1, label="no privacy")
        ax.set_title(f"tau = {tau:g}")
        ax.set_xlabel(_eps_axis_label(configs))
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(f"MISE ({summary.get('estimator', 'final')} estimate)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{summary['name']}: privacy-utility ({summary['repetitions']} repetitions)")
    fig.tight_layout()
    return fig


def plot_privacy_utility(summary: dict, path: str | Path) -> Path:
    """Save :func:`privacy_utility_figure` as a PNG."""
    return _save(privacy_utility_figure(summary), path)


def sweep_convergence_figure(summary: dict, history_rows: list[dict], max_lines: int = 8):
    """Mean MISE and privacy spent vs round for up to ``max_lines`` configurations (tau closest to
    0.5, every eps at the largest delta, and privacy off); each line says whether its eps is per
    round or the whole run's total, and a total budget is drawn as a dashed line of its colour."""
    configs = summary["configs"]
    tau = min({c["tau"] for c in configs}, key=lambda t: abs(t - 0.5))
    cs = [c for c in configs if c["tau"] == tau]
    deltas = sorted({c["delta"] for c in cs if c["private"]})
    chosen = [c for c in cs if not c["private"] or (deltas and c["delta"] == deltas[-1])][:max_lines]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
    for c in chosen:
        rows = [r for r in history_rows if r["config"] == c["config"]]
        label = _budget_label(c)
        (line,) = axes[0].plot(_column(rows, "round"), _column(rows, "mise"), label=label)
        key = "eps_pld" if _has(rows, "eps_pld") else "eps_zcdp"
        if c["private"] and _has(rows, key):
            axes[1].plot(_column(rows, "round"), _column(rows, key), color=line.get_color(), label=label)
            if _mode(c) == "total":
                axes[1].axhline(c["eps"], color=line.get_color(), ls="--", lw=1)
    axes[0].set_yscale("log")
    axes[0].set_title(f"mean MISE of w^l (tau = {tau:g})")
    axes[1].set_title("eps spent so far (PLD accountant, replace-one;\ndashed: total budget)", fontsize=9)
    axes[1].set_ylabel("eps of the worst client")
    for a in axes:
        a.set_xlabel("round")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
        _integer_rounds(a)
    fig.tight_layout()
    return fig


def plot_sweep_convergence(summary: dict, history_rows: list[dict], path: str | Path,
                           max_lines: int = 8) -> Path:
    """Save :func:`sweep_convergence_figure` as a PNG."""
    return _save(sweep_convergence_figure(summary, history_rows, max_lines), path)
