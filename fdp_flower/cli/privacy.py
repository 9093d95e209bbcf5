"""``fdp-flower privacy``: what a scenario spends, per client, without training.

The releases of every client are computed from public quantities only
(:class:`fdp_flower.algorithms.fdp_admm.plan.NoisePlan` and :func:`fdp_flower.algorithms.fdp_admm.plan.partition_sizes`),
composed in a :class:`~fdp_flower.privacy.PrivacyLedger`, printed as a table and
plotted as eps against rounds.

Examples::

    fdp-flower privacy scenarios/flwr_default.yaml --set privacy.eps=0.3 --out eps.png
    fdp-flower privacy --clients 20 --rounds 50 --mode total --eps 1 --schedule geometric --ratio 1.05
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import load_scenario, parse_scenario
from fdp_flower.config.base import ScenarioError, apply_overrides
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.privacy.closed_forms import fdp_admm_closed_form

#: plain parameter -> scenario field it overrides
_PLAIN = {
    "clients": "federation.num_clients",
    "samples": "data.n_samples",
    "rounds": "algorithm.rounds",
    "components": "basis.n_components",
    "mode": "privacy.mode",
    "eps": "privacy.eps",
    "delta": "privacy.delta",
    "schedule": "privacy.schedule.kind",
    "ratio": "privacy.schedule.ratio",
    "decay": "privacy.schedule.decay",
    "period": "privacy.schedule.period",
    "rate": "privacy.schedule.rate",
}


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``privacy`` subcommand to an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "privacy", help="per-client privacy ledger of a scenario, without training",
        description="Compute every client's releases from the scenario's public quantities, print the "
                    "per-client ledger summary (zCDP, RDP, PLD, the paper's closed form) and plot eps "
                    "against rounds.  No data is loaded and nothing is trained.")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the built-in defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=value",
                   help="override a scenario field (repeatable)")
    g = p.add_argument_group("plain parameters (override the scenario)")
    g.add_argument("--clients", type=int, help="M")
    g.add_argument("--samples", type=int, help="n, split evenly over the clients")
    g.add_argument("--rounds", type=int, help="L")
    g.add_argument("--components", type=int, help="K, the basis size")
    g.add_argument("--mode", choices=["per_round", "total"])
    g.add_argument("--eps", type=float, help="eps per round (per_round) or total (total)")
    g.add_argument("--delta", type=float)
    g.add_argument("--schedule", choices=["constant", "geometric", "periodic", "iteration"])
    g.add_argument("--ratio", type=float, help="geometric: rho_{l+1} / rho_l")
    g.add_argument("--decay", type=float, help="periodic: R_P")
    g.add_argument("--period", type=int, help="periodic: K_p")
    g.add_argument("--rate", type=float, help="iteration: R_T")
    p.add_argument("--out", default="privacy_eps.png", help="PNG of eps against rounds (default: %(default)s)")
    p.add_argument("--no-pld", action="store_true", help="skip the PLD accountant (faster)")
    p.add_argument("--points", type=int, default=40, help="rounds at which the PLD curve is computed "
                                                              "(default: %(default)s)")


def scenario_from_args(args: argparse.Namespace):
    overrides = list(args.overrides)
    for name, field in _PLAIN.items():
        value = getattr(args, name, None)
        if value is not None:
            overrides.append(f"{field}={value}")
    if args.scenario:
        return load_scenario(args.scenario, overrides)
    return parse_scenario(apply_overrides({}, overrides), "<parameters>")


def fdp_admm_ledger(scenario) -> tuple[PrivacyLedger, np.ndarray]:
    """The ledger a run of ``scenario`` would record (every client, every round) and the sizes m_i."""
    from fdp_flower.algorithms.fdp_admm.plan import NoisePlan, build_objective, partition_sizes
    from fdp_flower.algorithms.fdp_admm.site import SitePlan, term_release

    if scenario.algorithm.kind != "fdp_admm":
        raise ScenarioError(f"the calculator computes FDP-ADMM's releases; algorithm {scenario.algorithm.kind!r} "
                            "records its own ledger (see docs/privacy.md)")
    if scenario.privacy.enabled and scenario.privacy.trust != "site":
        raise ScenarioError(f"privacy.trust {scenario.privacy.trust!r}: the calculator computes per-site Gaussian "
                            "releases only; a run's own ledger and summary report the secure-aggregation (RDP) or "
                            "trusted-aggregator eps (docs/privacy.md, section 7.1)")
    dim = getattr(scenario.basis, "n_components", None)
    if dim is None:
        raise ScenarioError("the basis size K is chosen from data (explained_variance); "
                            "give basis.n_components to compute the releases without data")
    sizes = partition_sizes(scenario)
    # A step in whitened units needs the basis's lambda_1, which no one has before the data; the eps do not
    # depend on it (every sigma is the calibrated multiplier times its own sensitivity), so use 1.
    plan = NoisePlan(scenario, int(dim) + int(scenario.model.intercept), leading_score_variance=1.0)
    ledger = PrivacyLedger()
    if not plan.private:
        return ledger, sizes
    # the noise shape (the basis's score variances) changes no eps: each release is a Gaussian with its
    # own multiplier z_l, whatever the metric its sensitivity is measured in
    calibration = SitePlan(build_objective(scenario).loss, plan.gradient_bound, None, plan.noise_multipliers,
                           plan.dim, row_bound=float(scenario.model.clip_c1)
                           if scenario.model.clip_shape == "sphere" else None)
    if getattr(scenario.algorithm, "rule", "admm") == "newton":
        return _newton_ledger(scenario, calibration, sizes), sizes
    from fdp_flower.algorithms.fdp_admm.plan import level_calibration

    if level_calibration(scenario):
        return _level_ledger(calibration, sizes), sizes
    for round_ in range(1, scenario.algorithm.rounds + 1):
        sensitivity, sigma = calibration.calibration(round_, sizes)
        ledger.record_many(term_release(i, round_, sensitivity[i], sigma[i]) for i in range(len(sizes)))
    return ledger, sizes


def _newton_ledger(scenario, calibration, sizes) -> PrivacyLedger:
    """The Newton rule's releases (docs/algorithms.md section 1.3): its schedule splits the ADMM plan's mu^2 over
    quartile shares, a fixed basis's second moments, data terms, residual densities and shares, each with its own
    mechanism.  A density's
    sensitivity 1 / (2 h m_i) depends on the bandwidth h the server names during the run; its eps does not
    (sigma = z_l x sensitivity), so the first, public bandwidth stands in."""
    from dataclasses import replace

    from fdp_flower.algorithms.fdp_admm import newton as N
    from fdp_flower.algorithms.fdp_admm.config import publishes_score_variances
    from fdp_flower.algorithms.fdp_admm.site import newton_release_event

    a = scenario.algorithm
    mu = float(np.sqrt(np.sum(np.asarray(calibration.noise_multipliers, float) ** -2.0)))
    schedule = N.newton_schedule(a.rounds, mu=mu, total_records=float(np.sum(sizes)),
                                 intercept=bool(scenario.model.intercept), bounds=a.response_bounds is not None,
                                 moments=not publishes_score_variances(scenario.basis))
    plan = replace(calibration, schedule=schedule, noise_multipliers=schedule.multipliers)
    ledger = PrivacyLedger()
    for round_, kind in enumerate(schedule.kinds, start=1):
        ledger.record_many(newton_release_event(kind, i, round_, float(m), plan, N.DENSITY_BANDWIDTHS[0])
                           for i, m in enumerate(sizes))
    return ledger


def _level_ledger(calibration, sizes) -> PrivacyLedger:
    """The ADMM rule's releases with a level calibration (docs/algorithms.md, "Level calibration"): the data terms
    of the ADMM plan's L rounds, then residual quartile shares and residual shares, one schedule splitting the same
    mu^2 (:func:`fdp_flower.algorithms.fdp_admm.newton.level_schedule`)."""
    from dataclasses import replace

    from fdp_flower.algorithms.fdp_admm import newton as N
    from fdp_flower.algorithms.fdp_admm.site import newton_release_event

    schedule = N.level_schedule(calibration.noise_multipliers, total_records=float(np.sum(sizes)))
    plan = replace(calibration, schedule=schedule, noise_multipliers=schedule.multipliers)
    ledger = PrivacyLedger()
    for round_, kind in enumerate(schedule.kinds, start=1):
        ledger.record_many(newton_release_event(kind, i, round_, float(m), plan) for i, m in enumerate(sizes))
    return ledger


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def format_table(summaries, sizes, add_remove=None) -> str:
    head = ["client", "m_i", "releases", "rho", "eps_zcdp", "eps_rdp", "eps_pld", "paper"]
    if add_remove is not None:
        head.append("eps_pld(add/rm)")
    rows = [head]
    for k, s in enumerate(summaries):
        row = [str(s.client), str(int(sizes[s.client])), str(s.releases), _fmt(s.zcdp_rho), _fmt(s.eps_zcdp),
               _fmt(s.eps_rdp), _fmt(s.eps_pld), _fmt(s.closed_form_eps)]
        if add_remove is not None:
            a = add_remove[k]
            row.append(_fmt(a.eps_pld if a.eps_pld is not None else a.eps_rdp))
        rows.append(row)
    widths = [max(len(r[j]) for r in rows) for j in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)


def plot_curve(path: Path, full, pld_points, *, title: str, target: float | None,
               per_round: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    rounds = [s.round for s in full]
    ax.plot(rounds, [s.eps_zcdp for s in full], label="zCDP (Bun-Steinke)")
    ax.plot(rounds, [s.eps_rdp for s in full], label="RDP (dp-accounting)")
    if pld_points:
        ax.plot([s.round for s in pld_points], [s.eps_pld for s in pld_points], "o-", ms=3,
                label="PLD (dp-accounting)")
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label="total budget")
    if per_round is not None:
        ax.axhline(per_round, color="gray", ls=":", lw=1, label="Zhou & Xiang (2022): per-round eps")
    ax.set_xlabel("round")
    ax.set_ylabel("eps of the worst client")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.points < 2:
        print(f"error: --points must be >= 2 (rounds at which the PLD curve is computed), got {args.points}",
              file=sys.stderr)
        return 2
    try:
        scenario = scenario_from_args(args)
        ledger, sizes = fdp_admm_ledger(scenario)
    except (ScenarioError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    p = scenario.privacy
    if not ledger.releases:
        print(f"{scenario.name}: privacy is off (F-ADMM): no noisy release, no privacy guarantee.")
        return 0
    delta = p.delta
    with_pld = not args.no_pld
    from fdp_flower.algorithms.fdp_admm.plan import scheduled_rule

    newton = scheduled_rule(scenario)  # the Newton rule, or the ADMM rule with a level calibration
    # the paper's closed form is the ADMM rule's per-round eps; the Newton rule's releases are other queries
    summaries = ledger.summaries(delta, with_pld=with_pld, closed_form=None if newton else fdp_admm_closed_form())
    add_remove = ledger.under_neighbouring("add_remove").summaries(delta, with_pld=with_pld)
    budget = (f"total budget (eps={p.eps:g}, delta={p.delta:g}), schedule {p.schedule.kind}"
              if p.mode == "total" else f"per-round rule (eps={p.eps:g}, delta={p.delta:g} each round)")
    if newton:
        from collections import Counter

        kinds = Counter(r.mechanism for r in ledger.releases if r.client == ledger.releases[0].client)
        rule = "Newton rule" if getattr(scenario.algorithm, "rule", "admm") == "newton" else \
            "ADMM rule with level calibration"
        budget = (f"total budget (eps={p.eps:g}, delta={p.delta:g}), {rule}: "
                  + ", ".join(f"{n} {mechanism}" for mechanism, n in sorted(kinds.items())))
    print(f"{scenario.name}: FDP-ADMM, M={len(sizes)} clients, L={scenario.algorithm.rounds} rounds, "
          f"K={getattr(scenario.basis, 'n_components', '?')}, {budget}")
    print(f"per client, replace-one neighbours, totals over all rounds at delta={delta:g}"
          + ("" if newton else "; 'paper' = Zhou & Xiang (2022) Thm 1's per-round eps (not a total)"))
    print(format_table(summaries, sizes, add_remove))
    worst = max(summaries, key=lambda s: s.zcdp_rho)
    headline, accountant = (worst.eps_pld, "PLD") if worst.eps_pld is not None else (worst.eps_rdp, "RDP")
    print(f"worst client {worst.client}: eps = {headline:.4g} at delta = {delta:g} "
          f"({accountant}, replace-one neighbours)")
    ok = True
    if p.mode == "total":
        ok = headline <= p.eps
        print(f"budget check: {headline:.6g} {'<=' if ok else '>'} {p.eps:g} "
              f"({'within' if ok else 'EXCEEDS'} the total budget)")
    from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_lines, predicted_cost_section

    for line in predicted_cost_lines(predicted_cost_section(scenario, sizes)):
        print(line)
    full = ledger.epsilon_curve(worst.client, delta, with_pld=False)
    pld_points = []
    if with_pld:
        rounds = ledger.rounds
        idx = np.unique(np.linspace(0, len(rounds) - 1, min(max(args.points, 2), len(rounds))).round().astype(int))
        pld_points = ledger.epsilon_curve(worst.client, delta, rounds=[rounds[i] for i in idx], with_pld=True)
    out = Path(args.out)
    per_round = worst.closed_form_eps if p.mode == "per_round" else None
    plot_curve(out, full, pld_points, title=f"{scenario.name}: {budget}",
               target=p.eps if p.mode == "total" else None,
               per_round=per_round if per_round is not None and math.isfinite(per_round) else None)
    print(f"plot: {out}")
    if p.mode == "total" and not ok:
        print(f"error: worst client {worst.client} spends eps = {worst.eps:.6g} > the total budget {p.eps:g}",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fdp-flower")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
