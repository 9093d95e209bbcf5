"""What a run leaves behind: CSV headers, the convergence figure (integer rounds, the PLD curve,
beta_hat against the truth and the exact estimator), sweep labels for total budgets, peer-to-peer
progress and plot, and ``fdp-flower --version``."""
from __future__ import annotations

import csv
import re
import tomllib
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.cli import main
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.outputs.models import load_results
from fdp_flower.outputs.plots import privacy_utility_figure, results_figure, sweep_convergence_figure
from fdp_flower.outputs.results import write_results

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["data.n_samples=600", "algorithm.rounds=7", "federation.num_clients=3"]


@pytest.fixture(scope="module")
def total_budget_run(tmp_path_factory):
    """A small FDP-ADMM run with a total budget (eps = 2 for the whole run) and its results dir."""
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml",
                             [*QUICK, "privacy.mode=total", "privacy.eps=2.0"])
    out = write_results(run_fdp_admm(scenario), tmp_path_factory.mktemp("total") / "run")
    return out


def _header(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


def test_failures_and_ledger_csv_have_their_header_when_empty(tmp_path, total_budget_run):
    assert _header(total_budget_run / "failures.csv") == ["round", "client", "reason", "charged"]
    assert list(csv.DictReader(open(total_budget_run / "failures.csv"))) == []  # no client failed
    off = load_scenario(ROOT / "scenarios" / "quickstart.yaml", [*QUICK, "privacy.enabled=false"])
    out = write_results(run_fdp_admm(off, with_reference=False), tmp_path / "off")
    assert _header(out / "ledger.csv") == ["client", "round", "sensitivity", "sigma", "neighbouring", "mechanism"]
    assert list(csv.DictReader(open(out / "ledger.csv"))) == []  # privacy off: no release
    report = load_results(out).privacy  # a header-only ledger reads back as "no noisy release"
    assert not report.private and report.releases == 0


def _panels(fig) -> dict[str, plt.Axes]:
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title()}


def _line(ax, label: str):
    lines = [ln for ln in ax.get_lines() if ln.get_label() == label]
    assert len(lines) == 1, (label, [ln.get_label() for ln in ax.get_lines()])
    return lines[0]


def test_convergence_figure_has_integer_rounds_the_pld_curve_and_beta_panel(total_budget_run):
    fig = results_figure(total_budget_run)
    fig.canvas.draw()
    panels = _panels(fig)
    titles = set(panels)
    assert {"MISE", "objective", "empirical loss at the released primals", "coefficient function beta(t)"} <= titles
    privacy_title = next(t for t in titles if t.startswith("privacy spent by the worst client"))
    # integer round ticks on every panel plotted against the round
    for title in ("MISE", "objective", "empirical loss at the released primals", privacy_title):
        ax = panels[title]
        assert ax.get_xlabel() == "round"
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (title, ticks)
    # the PLD curve ends at the eps the run reports (the worst client's PLD total), under the budget line
    model = load_results(total_budget_run)
    priv = panels[privacy_title]
    pld = _line(priv, "PLD (reported)")
    assert pld.get_xdata()[-1] == 7
    # one Gaussian of the combined multiplier vs the ledger's grouped composition: equal up to the
    # PLD discretization
    assert pld.get_ydata()[-1] == pytest.approx(model.privacy.eps, rel=1e-5)
    budget = _line(priv, "total budget 2")
    assert np.all(np.asarray(budget.get_ydata()) == 2.0) and pld.get_ydata()[-1] <= 2.0
    rdp = _line(priv, "RDP")
    assert np.all(np.diff(rdp.get_ydata()) > 0)  # composition only grows
    assert list(rdp.get_xdata()) == list(range(1, 8))
    # beta_hat of the results directory, the true beta and the exact estimator on the same grid
    beta = panels["coefficient function beta(t)"]
    est = _line(beta, "beta_hat (tail_average)")
    np.testing.assert_allclose(est.get_ydata(), model.beta_values)
    np.testing.assert_allclose(est.get_xdata(), model.grid)
    truth = _line(beta, "true beta")
    assert model.mise(np.asarray(truth.get_ydata())) > 0
    assert len(_line(beta, "exact non-private estimate (same basis)").get_ydata()) == model.grid.size
    plt.close(fig)


def _config(c, eps, *, mode="total", private=True, delta=1e-5):
    return {"config": c, "tau": 0.5, "private": private, "eps": eps if private else None,
            "delta": delta if private else None, "mode": mode if private else None,
            "mise_mean": 0.1 * (c + 1), "mise_se": 0.01}


def _history(configs, rounds=5):
    return [{"config": c["config"], "round": r, "mise": 1.0 / r, "eps_zcdp": 0.3 * r if c["private"] else 0.0}
            for c in configs for r in range(1, rounds + 1)]


def test_sweep_plots_label_total_budgets_as_totals():
    configs = [_config(0, 1.0), _config(1, 4.0), _config(2, None, private=False)]
    summary = {"name": "s", "repetitions": 2, "estimator": "final", "configs": configs}
    fig = sweep_convergence_figure(summary, _history(configs))
    mise_ax, eps_ax = fig.axes
    labels = [t.get_text() for t in mise_ax.get_legend().get_texts()]
    assert labels == ["total eps=1, delta=1e-05 (whole run)", "total eps=4, delta=1e-05 (whole run)", "no privacy"]
    # each total budget is drawn once, in its line's colour, at its eps
    budgets = sorted(ln.get_ydata()[0] for ln in eps_ax.get_lines() if ln.get_linestyle() == "--")
    assert budgets == [1.0, 4.0]
    assert all(float(t).is_integer() for t in mise_ax.get_xticks())
    plt.close(fig)
    fig = privacy_utility_figure(summary)
    assert fig.axes[0].get_xlabel() == "total eps of the whole run (per client)"
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["no privacy", "total, delta=1e-05"]
    plt.close(fig)
    per_round = [_config(0, 0.5, mode="per_round"), _config(1, 1.0, mode="per_round")]
    fig = sweep_convergence_figure({**summary, "configs": per_round}, _history(per_round))
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "eps=0.5 per round, delta=1e-05", "eps=1 per round, delta=1e-05"]
    assert not [ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == "--"]
    plt.close(fig)
    fig = privacy_utility_figure({**summary, "configs": per_round})
    assert fig.axes[0].get_xlabel() == "eps per round"
    plt.close(fig)


def test_sweep_summary_records_the_budget_mode(tmp_path):
    from fdp_flower.engines.sweep import load_sweep, run_sweep, summarize_sweep

    spec = load_sweep(ROOT / "scenarios" / "quickstart.yaml",
                      [*QUICK, "algorithm.rounds=3", "privacy.mode=total",
                       "sweep={repetitions: 1, grid: {privacy.eps: [1.0, 3.0]}}"])
    summary = summarize_sweep(run_sweep(spec, workers=1, progress=False))
    assert [(c["mode"], c["eps"]) for c in summary["configs"]] == [("total", 1.0), ("total", 3.0)]


def test_p2p_run_shows_progress_and_draws_its_plot(tmp_path, capsys):
    out = tmp_path / "p2p"
    steps = 40
    assert main(["run", str(ROOT / "scenarios" / "p2p_lad_zcdp_nfl.yaml"), "--out", str(out),
                 "--set", f"algorithm.rounds={steps}", "--set", "federation.num_clients=8", "--set", "privacy.eps=2"]) == 0
    text = capsys.readouterr().out
    progress = re.findall(r"^\[\s*(\d+)/40\] released_normalized_error=(\S+), .*eps_pld=(\S+)$", text, re.MULTILINE)
    assert [int(r) for r, _, _ in progress] == list(range(2, steps + 1, 2))
    eps_pld = [float(e) for _, _, e in progress]
    assert all(b > a for a, b in zip(eps_pld, eps_pld[1:]))
    model = load_results(out)
    assert eps_pld[-1] == pytest.approx(model.privacy.eps, rel=5e-4)  # printed to 4 significant digits
    history = list(csv.DictReader(open(out / "history.csv")))
    assert float(progress[-1][1]) == pytest.approx(float(history[-1]["released_normalized_error"]), rel=1e-3)
    assert f"plot: {out / 'convergence.png'}" in text and (out / "convergence.png").stat().st_size > 1000
    fig = results_figure(out)
    fig.canvas.draw()
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("normalized error") and titles[-1].startswith("privacy spent by the worst node")
    assert _line(fig.axes[-1], "PLD (reported)").get_ydata()[-1] == pytest.approx(model.privacy.eps, rel=1e-5)
    assert model.privacy.eps <= 2.0
    assert all(float(t).is_integer() for t in fig.axes[0].get_xticks())
    plt.close(fig)


def test_version_flag_prints_the_package_version(capsys):
    import fdp_flower

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"fdp-flower {version}" == f"fdp-flower {fdp_flower.__version__}"
