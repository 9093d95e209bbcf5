"""``fdp-flower audit``: the empirical privacy audit of a scenario's releases (any algorithm).

Neighbouring datasets of one client (node) run through the real client code on the same released
transcript (:mod:`fdp_flower.engines.audit`); the command prints, per neighbour pair and step, the
measured sensitivity over the calibrated one, the Monte-Carlo KL of the transcripts against the zCDP
budget and an empirical lower bound on eps against the accounted eps; through the family's real site
function, the released change of replace-one pairs against the sensitivity the site's ledger records and
the released noise's spread against the sigma it records (``--adversarial``: also under crafted public
values); and exits with status 1 and
one line per exceeded bound when any check fails.

Examples::

    fdp-flower audit scenarios/quickstart.yaml --steps 10
    fdp-flower audit scenarios/dp_admm_breast_cancer.yaml --relation both --steps 20
    fdp-flower audit scenarios/p2p_lad_zcdp_nfl.yaml --variant private_anchor   # NOT DP: fails
    fdp-flower audit scenarios/p2p_breast_cancer_pr_admm.yaml --steps 3 --adversarial
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "audit", help="empirical privacy audit of a scenario (sensitivity, KL, eps lower bound)",
        description="Run neighbouring datasets of one client through the real client code on the same "
                    "released transcript; check measured sensitivity <= calibrated, Monte-Carlo KL <= zCDP "
                    "rho and an empirical eps lower bound <= the accounted eps.  Exit status 1 on failure.")
    p.add_argument("scenario", help="scenario YAML (any algorithm)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=value",
                   help="override a scenario field (repeatable)")
    p.add_argument("--steps", type=int, default=None, help="audit the first STEPS releases (default: all)")
    p.add_argument("--trials", type=int, default=200,
                   help="transcripts per hypothesis for the likelihood-ratio test (default: %(default)s)")
    p.add_argument("--transcripts", type=int, default=4,
                   help="transcripts per other neighbour pair (default: %(default)s)")
    p.add_argument("--relation", choices=["calibrated", "both"], default="calibrated",
                   help="the relation the noise is calibrated for, or also the other one where the ledger "
                        "converts (default: %(default)s)")
    p.add_argument("--variant", choices=["private_anchor"], default=None,
                   help="zCDP-NFL anchored at the private iterate: NOT differentially private, offered only "
                        "so that the audit can show it fails")
    p.add_argument("--fpca", action="store_true", help="audit the federated DP-FPCA phase of the scenario")
    p.add_argument("--party", type=int, default=0, help="the audited client / node (default: %(default)s)")
    p.add_argument("--tolerance", type=float, default=1e-6,
                   help="relative slack of the sensitivity and KL checks (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="1 - confidence of the eps lower bound (default: %(default)s)")
    p.add_argument("--site-samples", type=int, default=100,
                   help="releases of one request drawn through the site function to measure the noise's spread "
                        "(default: %(default)s)")
    p.add_argument("--site-alpha", type=float, default=1e-4,
                   help="family-wise level of the chi-square tests of the noise's spread against the ledger's "
                        "sigma (default: %(default)s)")
    p.add_argument("--adversarial", action="store_true",
                   help="also send the site function crafted public values (1e300, subnormals, NaN, values that "
                        "absorb noise in floating point, the wrong shape) and scenarios with a switched loss: each "
                        "must be refused with nothing charged, or released with the ledger's sensitivity and spread")
    p.add_argument("--seed", type=int, default=0, help="seed of the audit's noise (default: %(default)s)")
    p.add_argument("--out", default=None, help="also write the report (Markdown) to this file")
    p.add_argument("--no-steps", action="store_true", help="omit the per-step table")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from fdp_flower.algorithms.registry import load_any_scenario
    from fdp_flower.config.base import ScenarioError
    from fdp_flower.engines.audit import audit_protocol, format_report, protocol_for

    if not 0 < args.alpha < 1:  # a confidence level: 1 - alpha in (0, 1)
        raise ScenarioError(f"audit: --alpha must be in (0, 1), got {args.alpha:g}")
    if not args.tolerance >= 0:
        raise ScenarioError(f"audit: --tolerance must be >= 0, got {args.tolerance:g}")
    scenario = load_any_scenario(args.scenario, args.overrides)
    privacy = scenario.privacy
    if getattr(privacy, "trust", "site") == "secure_aggregation" and privacy.enabled and not args.fpca:
        return _secure_sums(scenario, args)
    protocol = protocol_for(scenario, party=args.party, variant=args.variant, fpca=args.fpca)
    report = audit_protocol(protocol, steps=args.steps, transcripts=args.transcripts, lr_trials=args.trials,
                            relations=args.relation, tolerance=args.tolerance, alpha=args.alpha, seed=args.seed,
                            site_samples=args.site_samples, site_alpha=args.site_alpha,
                            adversarial=args.adversarial)
    text = format_report(report, per_step=not args.no_steps)
    if args.adversarial and not args.fpca and args.variant is None:
        from fdp_flower.engines.audit import format_switched, switched_loss_audits

        switched = switched_loss_audits(scenario, party=args.party, samples=args.site_samples,
                                        alpha=args.site_alpha, tolerance=args.tolerance, seed=args.seed)
        text += "\n" + format_switched(switched)
        report.failures += [f for r in switched if r.site is not None for f in r.site.failures]
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if not report.passed:
        for line in report.failures:
            print(f"AUDIT FAILED: {line}", file=sys.stderr)
        return 1
    print(f"audit passed: {report.algorithm}, {report.steps} steps")
    return 0


def _secure_sums(scenario, args: argparse.Namespace) -> int:
    """``privacy.trust: secure_aggregation``: no site's release reaches the server, so the audit checks the
    released sums' noise instead of one site's release (:func:`fdp_flower.engines.audit.audit_secure_sums`):
    the honest sums must pass, the sums without one site's share must fail (docs/privacy.md, section 8)."""
    from fdp_flower.engines.audit import audit_secure_sums, format_secure_sum_audit

    if not 0 < args.site_alpha < 1:
        from fdp_flower.config.base import ScenarioError

        raise ScenarioError(f"audit: --site-alpha must be in (0, 1), got {args.site_alpha:g}")
    report = audit_secure_sums(scenario, alpha=args.site_alpha, seed=args.seed)
    text = format_secure_sum_audit(report)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if not report.passed:
        reason = ("the released sums' noise does not match the plan" if not report.honest.passed
                  else "the check cannot tell a missing share at this sample size")
        print(f"AUDIT FAILED: secure sums: {reason}", file=sys.stderr)
        return 1
    print(f"audit passed: FDP-ADMM secure sums, {report.trials} sums of {report.sites} shares")
    return 0
