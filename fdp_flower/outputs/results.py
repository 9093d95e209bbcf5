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


class OutputError(ValueError):
    """An output location that cannot be written; the message is one line naming it."""


def check_output_dir(path: str | Path, what: str = "results directory") -> Path:
    """Create ``path`` (a directory) and prove it writable with a probe file, before any work or
    release: a file in the way, a parent that is a file, no permission or no space is an
    :class:`OutputError` naming the path."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path}: exists and is not a directory")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise OutputError(f"{what} {path}: {parent} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".fdp-flower-probe-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"\0" * 4096)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what} {path}: not writable ({exc.strerror or exc})") from None
    return path


def rescue_run(result, out_dir: str | Path, exc: OSError) -> str:
    """After writing ``out_dir`` failed: keep the ledger of what was released and a checkpoint in a
    new temporary directory; returns the one line saying where (and why)."""
    from fdp_flower.outputs.checkpoint import CHECKPOINT_NAME, Checkpoint, write_checkpoint

    rescue = Path(tempfile.mkdtemp(prefix="fdp-flower-rescue-"))
    kept = []
    try:
        write_csv(rescue / "ledger.csv", result.ledger.to_rows(), LEDGER_COLUMNS)
        kept.append("ledger.csv")
        write_checkpoint(rescue / CHECKPOINT_NAME, Checkpoint(result.scenario, result.state, result.ledger,
                                                             result.history, result.failures, engine=result.engine))
        kept.append(CHECKPOINT_NAME)
    except OSError:
        pass
    reason = exc.strerror or str(exc)
    return (f"cannot write results to {out_dir} ({reason}); kept {' and '.join(kept) or 'nothing'} in {rescue}"
            + (f" (resume: fdp-flower run --resume {rescue})" if CHECKPOINT_NAME in kept else ""))


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


#: Keys of the ``privacy`` section of every family's summary.json (:func:`privacy_section`).
PRIVACY_KEYS = ("private", "accountant", "eps", "delta", "neighbouring", "worst_client", "releases", "eps_rdp",
                "eps_zcdp", "zcdp_rho", "mode", "eps_budget", "mechanisms", "per_client", "note")

NEIGHBOURING_TEXT = {"replace_one": "replace-one", "add_remove": "add/remove"}


def privacy_section(ledger, delta: float, *, mode: str | None = None, eps_budget: float | None = None) -> dict:
    """The ``privacy`` section of a summary, the same keys for every algorithm family (:data:`PRIVACY_KEYS`).

    ``eps`` is the headline: the worst client's (node's) whole-run eps at ``delta`` by the PLD
    accountant (:func:`fdp_flower.privacy.ledger.pld_epsilon`), under ``neighbouring``, the relation
    of the recorded sensitivities (a ledger mixing relations is reported under replace-one).
    ``per_client`` rows carry every client's figures (``eps_pld`` in closed form, equal to the PLD
    accountant's to 1e-7).  ``mode`` / ``eps_budget``: what was asked for (total or per-round eps).
    """
    from fdp_flower.privacy.ledger import epsilon_of_rho, pld_epsilon, pld_fallback_note

    if not ledger.releases:
        return {k: None for k in PRIVACY_KEYS} | {"private": False, "accountant": "pld", "delta": delta,
                                                  "releases": 0, "mechanisms": [], "per_client": [],
                                                  "note": None}
    relations = sorted({r.neighbouring for r in ledger.releases})
    if len(relations) > 1:
        ledger, relations = ledger.under_neighbouring("replace_one"), ["replace_one"]
    per_client = ledger.summaries(delta, with_pld=False)
    worst = max(per_client, key=lambda s: s.zcdp_rho)  # Gaussians: eps is increasing in the composed rho
    rows = [{"client": s.client, "releases": s.releases, "zcdp_rho": s.zcdp_rho, "eps_zcdp": s.eps_zcdp,
             "eps_rdp": s.eps_rdp, "eps_pld": epsilon_of_rho(s.zcdp_rho, delta)} for s in per_client]
    return {"private": True, "accountant": "pld", "eps": pld_epsilon(ledger.of_client(worst.client), delta),
            "delta": delta, "neighbouring": relations[0], "worst_client": worst.client, "releases": worst.releases,
            "eps_rdp": worst.eps_rdp, "eps_zcdp": worst.eps_zcdp, "zcdp_rho": worst.zcdp_rho, "mode": mode,
            "eps_budget": eps_budget, "mechanisms": sorted({r.mechanism for r in ledger.releases}),
            "per_client": rows, "note": pld_fallback_note(ledger.of_client(worst.client))}


def _format_eps(eps) -> str:
    """eps for a one-line report (None: not finite, as summary.json stores it)."""
    return "inf" if eps is None else f"{eps:.4f}" if eps < 1e6 else f"{eps:.4g}"


def privacy_headline(section: dict, who: str = "client") -> str:
    """The one line every command prints about privacy, from a :func:`privacy_section`."""
    if not section.get("private"):
        return "privacy: off (no noise was added: no differential-privacy guarantee)"
    asked = section.get("eps_budget")
    budget = "" if asked is None else {"total": f"; total budget eps = {asked:g}",
                                       "per_round": f"; eps = {asked:g} per round"}.get(section.get("mode") or "", "")
    relation = NEIGHBOURING_TEXT.get(section["neighbouring"], section["neighbouring"])
    return (f"privacy spent per {who} (worst {who} {section['worst_client']}, {section['releases']} releases): "
            f"eps = {_format_eps(section['eps'])} at delta = {section['delta']:g} (PLD accountant, {relation} "
            f"neighbours{budget})")


def privacy_report(ledger, delta: float, *, mode: str | None = None, eps_budget: float | None = None) -> dict:
    """FDP-ADMM's privacy section (:func:`privacy_section`)."""
    return privacy_section(ledger, delta, mode=mode, eps_budget=eps_budget)


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


def _predicted_cost(result) -> dict | None:
    """The predicted privacy cost of an FDP-ADMM run (:mod:`fdp_flower.algorithms.fdp_admm.predicted`) from
    its public sizes and, when the basis publishes them, its score variances."""
    from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_section

    sizes = [m for m in (result.sample_sizes or []) if m]
    if not sizes or len(sizes) != len(result.sample_sizes):
        return None
    basis = result.basis
    return predicted_cost_section(result.scenario, sizes,
                                  eigenvalues=None if basis is None else basis.eigenvalues,
                                  n_components=None if basis is None else basis.n_components)


def summarize(result, privacy: dict | None = None) -> dict:
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
        "privacy": privacy if privacy is not None else privacy_report(
            result.ledger, sc.privacy.delta, mode=sc.privacy.mode if sc.privacy.enabled else None,
            eps_budget=sc.privacy.eps if sc.privacy.enabled else None),
    }
    predicted = _predicted_cost(result)
    if predicted is not None:
        summary["predicted_privacy_cost"] = predicted
    sites = getattr(result, "site_reports", None) or {}
    if sites and privacy is None:
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
    arrays = {f"state_{k}": v for k, v in result.state.to_arrays().items()}
    if result.basis is not None:
        arrays.update({f"basis_{k}": v for k, v in result.basis.to_arrays().items()})
        arrays["basis_kind"] = np.asarray(result.basis.kind)
        # the released model: the scenario's estimator (last iterate, average or tail average)
        intercept, coef = split_coefficients(result.scenario,
                                             result.state.estimate(result.scenario.algorithm.estimator.kind))
        scale = float(getattr(result.scenario.data, "response_scale", 1.0))  # back to the response's units
        arrays["beta_hat"] = scale * result.basis.function(coef)
        arrays["intercept"] = np.asarray(scale * intercept)
    np.savez(out / "final.npz", **arrays)
    try:
        summary = summarize(result)
    except (ArithmeticError, MemoryError, ValueError) as exc:  # the files above are written whatever happens here
        log.warning("privacy summary failed (%s); ledger.csv holds every release", exc)
        summary = summarize(result, privacy={"private": bool(result.ledger.releases),
                                             "error": f"accountant failed: {type(exc).__name__}: {exc}"})
    _atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    log.info("results written to %s", out.resolve())
    return out


def write_protocol_results(server, scenario, out_dir: str | Path, *, engine: str = "inprocess") -> dict:
    """Write the results directory of a run of a family's server protocol (the generic drivers):
    ``scenario.yaml``, ``history.csv``, ``ledger.csv``, ``failures.csv``, ``final.npz`` (the protocol's
    :meth:`~fdp_flower.algorithms.protocol.ServerProtocol.final_arrays`) and ``summary.json``; returns the summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(out / "scenario.yaml", scenario_to_yaml(scenario))
    write_csv(out / "history.csv", server.history)
    write_csv(out / "ledger.csv", server.ledger.to_rows(), LEDGER_COLUMNS)
    write_csv(out / "failures.csv", [f.to_row() for f in server.failures], FailureRecord.COLUMNS)
    np.savez(out / "final.npz", **server.final_arrays())
    p = scenario.privacy
    private = bool(getattr(p, "enabled", False))
    summary = _clean({"name": scenario.name, "engine": engine, "algorithm": scenario.algorithm.kind,
                      "stop_reason": server.stop_reason or "completed", "rounds_completed": len(server.history),
                      "rounds_planned": server.rounds_planned,
                      "final": server.history[-1] if server.history else {},
                      "privacy": privacy_section(server.ledger, p.delta, mode=getattr(p, "mode", None) if private
                                                 else None, eps_budget=getattr(p, "eps", None) if private else None)})
    _atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary
