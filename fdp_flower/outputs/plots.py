"""PNG plots of runs and sweeps (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _column(rows: list[dict], key: str) -> list[float]:
    return [float(r.get(key, math.nan)) if r.get(key) is not None else math.nan for r in rows]


def _has(rows: list[dict], key: str) -> bool:
    return any(r.get(key) is not None and not (isinstance(r.get(key), float) and math.isnan(r[key]))
               for r in rows)


def plot_run_history(history: list[dict], path: str | Path, title: str = "") -> Path:
    """Convergence of one run: MISE, objective, empirical loss and privacy spent vs round."""
    path = Path(path)
    rounds = _column(history, "round")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    ax = axes[0, 0]
    for key, label in (("mise", "MISE of w^l"), ("mise_avg", "MISE of wbar^l")):
        if _has(history, key):
            ax.plot(rounds, _column(history, key), label=label)
    ax.set_yscale("log")
    ax.set_title("MISE")
    ax.legend()
    ax = axes[0, 1]
    for key, label in (("objective", "objective at w^l"), ("augmented_objective", "augmented objective")):
        if _has(history, key):
            ax.plot(rounds, _column(history, key), label=label)
    if _has(history, "objective_gap"):
        twin = ax.twinx()
        twin.plot(rounds, _column(history, "objective_gap"), color="grey", ls=":", label="relative gap")
        twin.set_yscale("log")
        twin.set_ylabel("relative gap to the exact optimum")
    ax.set_title("objective")
    ax.legend(loc="upper right")
    ax = axes[1, 0]
    if _has(history, "empirical_loss"):
        ax.plot(rounds, _column(history, "empirical_loss"))
    ax.set_title("empirical loss at the released primals")
    ax = axes[1, 1]
    plotted = False
    for key, label in (("eps_pld", "eps (PLD accountant)"), ("eps_rdp", "eps (RDP, looser)"),
                       ("eps_zcdp", "eps (zCDP conversion, looser)")):
        if _has(history, key):
            ax.plot(rounds, _column(history, key), label=label)
            plotted = True
    ax.set_title("privacy spent by the worst client (composed, replace-one)")
    if plotted:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "privacy off", ha="center", va="center", transform=ax.transAxes)
    for a in axes.flat:
        a.set_xlabel("round")
        a.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_privacy_utility(summary: dict, path: str | Path) -> Path:
    """MISE of the sweep's estimate against the per-round eps, one line per delta, one panel
    per quantile level; the privacy-off configuration is a dashed horizontal line."""
    path = Path(path)
    configs = summary["configs"]
    taus = sorted({c["tau"] for c in configs})
    fig, axes = plt.subplots(1, len(taus), figsize=(3.4 * len(taus) + 1, 3.6), squeeze=False, sharey=True)
    for ax, tau in zip(axes[0], taus):
        cs = [c for c in configs if c["tau"] == tau]
        for delta in sorted({c["delta"] for c in cs if c["private"]}):
            pts = sorted((c["eps"], c["mise_mean"], c["mise_se"]) for c in cs if c["private"] and c["delta"] == delta)
            if pts:
                x, y, e = zip(*pts)
                ax.errorbar(x, y, yerr=e, marker="o", ms=3, capsize=2, label=f"delta={delta:g}")
        for c in cs:
            if not c["private"]:
                ax.axhline(c["mise_mean"], color="k", ls="--", lw=1, label="no privacy")
        ax.set_title(f"tau = {tau:g}")
        ax.set_xlabel("eps per round")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel(f"MISE ({summary.get('estimator', 'final')} estimate)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{summary['name']}: privacy-utility ({summary['repetitions']} repetitions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep_convergence(summary: dict, history_rows: list[dict], path: str | Path,
                           max_lines: int = 8) -> Path:
    """Mean MISE and privacy spent vs round for up to ``max_lines`` configurations
    (tau closest to 0.5, every eps at the largest delta, and privacy off)."""
    path = Path(path)
    configs = summary["configs"]
    tau = min({c["tau"] for c in configs}, key=lambda t: abs(t - 0.5))
    cs = [c for c in configs if c["tau"] == tau]
    deltas = sorted({c["delta"] for c in cs if c["private"]})
    chosen = [c for c in cs if not c["private"] or (deltas and c["delta"] == deltas[-1])][:max_lines]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for c in chosen:
        rows = [r for r in history_rows if r["config"] == c["config"]]
        label = "no privacy" if not c["private"] else f"eps={c['eps']:g}, delta={c['delta']:g}"
        axes[0].plot(_column(rows, "round"), _column(rows, "mise"), label=label)
        if c["private"] and _has(rows, "eps_pld"):
            axes[1].plot(_column(rows, "round"), _column(rows, "eps_pld"), label=label)
    axes[0].set_yscale("log")
    axes[0].set_title(f"mean MISE of w^l (tau = {tau:g})")
    axes[1].set_title("eps spent by the whole run so far (PLD accountant, replace-one)")
    for a in axes:
        a.set_xlabel("round")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
