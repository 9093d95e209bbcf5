"""Saving a run: resolved scenario, per-round history (CSV), ledger, summary (JSON), final state."""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.faults import FailureRecord
from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import split_coefficients
from fdp_flower.algorithms.fdp_admm.reference import ReferenceSolution
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.config.base import scenario_to_yaml
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy import PrivacyLedger

log = logging.getLogger(__name__)

#: the columns of ``ledger.csv`` (:meth:`fdp_flower.privacy.PrivacyLedger.to_rows`), also when it is empty
LEDGER_COLUMNS = ("client", "round", "sensitivity", "sigma", "neighbouring", "mechanism")


@dataclass
class RunResult:
    """What a run produced; :func:`fdp_flower.outputs.results.write_results` saves it."""

    scenario: Scenario
    state: FDPADMMState
    history: list[dict] = field(default_factory=list)
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    basis: FunctionalBasis | None = None
    reference: ReferenceSolution | None = None
    clipped_rows: list[int] = field(default_factory=list)
    sample_sizes: list[int] = field(default_factory=list)
    stop_reason: str = "completed"
    engine: str = "inprocess"
    failures: list[FailureRecord] = field(default_factory=list)
    #: client -> the totals its site reported from its own ledger (deployment on node-local data)
    site_reports: dict[int, dict] = field(default_factory=dict)


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict], columns: tuple[str, ...] = ()) -> None:
    """Rows as CSV; ``columns`` come first and make the header of a file with no rows."""
    keys: list[str] = list(columns)
    for row in rows:
        keys += [k for k in row if k not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()}
                for row in csv.DictReader(fh)]


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (np.floating, np.integer)):
        return _clean(value.item())
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def privacy_report(ledger, delta: float) -> dict:
    """Per-client and worst-case composed privacy of a ledger, at ``delta``."""
    if not ledger.releases:
        return {"private": False}
    per_client = [ledger.summary(c, delta) for c in ledger.clients]
    worst = max(per_client, key=lambda s: s.eps_pld if s.eps_pld is not None else s.eps_rdp)
    row = lambda s: {"client": s.client, "releases": s.releases, "zcdp_rho": s.zcdp_rho,  # noqa: E731
                     "eps_zcdp": s.eps_zcdp, "eps_rdp": s.eps_rdp, "eps_pld": s.eps_pld}
    return {"private": True, "delta": delta, "worst_client": row(worst), "eps": worst.eps,
            "per_client": [row(s) for s in per_client]}


def site_report_rows(site_reports: dict[int, dict], ledger) -> list[dict]:
    """Each site's own report next to the server ledger's eps of the same client, computed by the same
    accountant (PLD) at the site's delta and under the site's neighbouring relation.

    A site's ``eps`` covers every release it ever made (all runs); ``run_eps`` this run's, which
    can exceed the server's figure when the server did not see every release (a lost reply, the
    releases of a run this one resumed)."""
    from fdp_flower.privacy import pld_epsilon

    rows = []
    for client, report in sorted(site_reports.items()):
        delta, relation = float(report["delta"]), str(report["neighbouring"])
        try:
            server = pld_epsilon([r.under(relation) for r in ledger.of_client(client)], delta)
        except ValueError:  # a release without a known conversion to the site's relation
            server = None
        rows.append({"client": int(client), "eps": float(report["eps"]), "releases": int(report["releases"]),
                     "run_eps": float(report["run-eps"]), "run_releases": int(report["run-releases"]),
                     "delta": delta, "neighbouring": relation, "max_eps": float(report["max-eps"]),
                     "noise_source": str(report.get("noise-source", "")), "server_eps": server})
    return rows


def summarize(result) -> dict:
    sc = result.scenario
    final = result.history[-1] if result.history else {}
    summary = {
        "name": sc.name, "engine": result.engine, "stop_reason": result.stop_reason,
        "rounds_completed": len(result.history), "rounds_planned": sc.algorithm.rounds,
        "final": final,
        "final_global_w": result.state.global_w.tolist(),
        "estimator": sc.algorithm.estimator.model_dump(),
        "final_estimate_w": result.state.estimate(sc.algorithm.estimator.kind).tolist(),
        "sample_sizes": result.sample_sizes,
        "clipped_rows": result.clipped_rows,
        "privacy": privacy_report(result.ledger, sc.privacy.delta),
    }
    sites = getattr(result, "site_reports", None) or {}
    if sites:
        summary["privacy"]["sites"] = site_report_rows(sites, result.ledger)
    failures = getattr(result, "failures", None) or []
    if failures:
        summary["failures"] = {"count": len(failures),
                               "clients": sorted({f.client for f in failures}),
                               "last_round": max(f.round for f in failures)}
    if result.reference is not None:
        summary["reference"] = {"objective": result.reference.objective, "solver": result.reference.solver,
                                "w": result.reference.w.tolist()}
    return _clean(summary)


def write_results(result, out_dir: str | Path) -> Path:
    """Write every file of a run into ``out_dir`` (created); returns the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(out / "scenario.yaml", scenario_to_yaml(result.scenario))
    write_csv(out / "history.csv", result.history)
    write_csv(out / "ledger.csv", result.ledger.to_rows(), LEDGER_COLUMNS)
    write_csv(out / "failures.csv", [f.to_row() for f in getattr(result, "failures", None) or []],
              FailureRecord.COLUMNS)
    _atomic_write_text(out / "summary.json", json.dumps(summarize(result), indent=2))
    arrays = {f"state_{k}": v for k, v in result.state.to_arrays().items()}
    if result.basis is not None:
        arrays.update({f"basis_{k}": v for k, v in result.basis.to_arrays().items()})
        arrays["basis_kind"] = np.asarray(result.basis.kind)
        # the released model: the scenario's estimator (last iterate, average or tail average)
        intercept, coef = split_coefficients(result.scenario,
                                             result.state.estimate(result.scenario.algorithm.estimator.kind))
        arrays["beta_hat"] = result.basis.function(coef)
        arrays["intercept"] = np.asarray(intercept)
    np.savez(out / "final.npz", **arrays)
    log.info("results written to %s", out.resolve())
    return out
