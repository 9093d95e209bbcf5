"""Saving a run: resolved scenario, per-round history (CSV), ledger, summary (JSON), final state."""
from __future__ import annotations

import contextlib
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
from fdp_flower.outputs import layout
from fdp_flower.outputs.layout import ResultsDir
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
    #: the server rule's state beyond ``state`` for a checkpoint (:class:`fdp_flower.outputs.checkpoint.Checkpoint`)
    server_state: dict | None = None


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


#: files that mark a directory as holding a run's or a sweep's results (checkpoint.npz: an unfinished run)
RUN_MARKERS = (layout.SUMMARY_FILE, layout.LEDGER_FILE, layout.HISTORY_FILE, layout.CHECKPOINT_FILE, layout.FINAL_FILE,
               "sweep.yaml", "runs.csv", "runs.partial.jsonl", layout.SCENARIO_FILE)
#: the lock file a writer holds (``fcntl.flock``) for as long as it writes the directory
LOCK_NAME = ".fdp-flower.lock"
_held_locks: dict[Path, int] = {}


def claim_output_dir(path: str | Path, what: str = "results directory", *, resume: bool = False,
                     option: str = "--out") -> Path:
    """:func:`check_output_dir`, then make sure nothing is overwritten: take the directory's lock (another
    process writing it is refused) and refuse a directory that already holds a run or a sweep
    (:data:`RUN_MARKERS`) unless ``resume`` continues it.  Both are an :class:`OutputError` of one line, raised
    before any training or release.  The lock is held until :func:`release_output_dir` or the process ends."""
    path = check_output_dir(path, what)
    key = path.resolve()
    if key in _held_locks:
        raise OutputError(f"{what} {path}: this process is already writing it (a run or fit still open)")
    import fcntl

    fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise OutputError(f"{what} {path}: another run (pid {holder}) is writing it; wait for it or choose "
                          f"another {option}") from None
    if not resume:
        found = [name for name in RUN_MARKERS if (key / name).exists()]
        if found:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise OutputError(f"{what} {path}: holds another run ({', '.join(found[:3])}); nothing is overwritten "
                              f"-- choose another {option} or remove it")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held_locks[key] = fd
    return path


def beside_other_runs(default: str | Path) -> Path:
    """The default results directory ``<output.dir>/<name>`` when it holds no run, else the first of
    ``<name>-2``, ``<name>-3``, ... that holds none: a run without ``--out`` goes beside an earlier run of the same
    name instead of over it (an explicit ``--out`` holding a run is refused by :func:`claim_output_dir`)."""
    default = Path(default)
    candidate, k = default, 1
    while candidate.is_dir() and any((candidate / name).exists() for name in RUN_MARKERS):
        k += 1
        candidate = default.with_name(f"{default.name}-{k}")
    if candidate != default:
        print(f"{default} holds an earlier run; this one goes beside it: {candidate}", flush=True)
    return candidate


def release_output_dir(path: str | Path) -> None:
    """Give up the lock :func:`claim_output_dir` took on ``path`` (nothing if it holds none)."""
    fd = _held_locks.pop(Path(path).resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor drops the flock


def release_all_output_dirs() -> None:
    """Give up every lock this process holds (the end of a CLI command)."""
    for path in list(_held_locks):
        release_output_dir(path)


@contextlib.contextmanager
def claimed_output(path, what: str = "results directory", *, option: str = "out="):
    """``with claimed_output(out):`` -- :func:`claim_output_dir` on entry (nothing when ``path`` is None), the lock
    released on exit; the Python API's ``out=`` checks its directory this way before training."""
    if path is None:
        yield None
        return
    claimed = claim_output_dir(path, what, option=option)
    try:
        yield claimed
    finally:
        release_output_dir(claimed)


def rescue_run(result, out_dir: str | Path, exc: OSError) -> str:
    """After writing ``out_dir`` failed: keep the ledger of what was released and a checkpoint in a
    new temporary directory; returns the one line saying where (and why)."""
    from fdp_flower.outputs.checkpoint import CHECKPOINT_NAME, Checkpoint, write_checkpoint

    rescue = Path(tempfile.mkdtemp(prefix="fdp-flower-rescue-"))
    kept = []
    try:
        write_csv(ResultsDir.at(rescue).ledger, result.ledger.to_rows(), LEDGER_COLUMNS)
        kept.append(ResultsDir.at(rescue).ledger.name)
        write_checkpoint(rescue / CHECKPOINT_NAME, Checkpoint(result.scenario, result.state, result.ledger,
                                                             result.history, result.failures, engine=result.engine,
                                                             server_state=result.server_state))
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
    from fdp_flower.privacy.ledger import epsilon_of_rho, has_skellam, pld_epsilon, pld_fallback_note, trust_note

    if not ledger.releases:
        return {k: None for k in PRIVACY_KEYS} | {"private": False, "accountant": "pld", "delta": delta,
                                                  "releases": 0, "mechanisms": [], "per_client": [],
                                                  "note": None}
    relations = sorted({r.neighbouring for r in ledger.releases})
    if len(relations) > 1:
        ledger, relations = ledger.under_neighbouring("replace_one"), ["replace_one"]
    per_client = ledger.summaries(delta, with_pld=False)
    if has_skellam(ledger.releases):  # secure aggregation: the Skellam's RDP figure is the headline (eq. (9.3))
        worst = max(per_client, key=lambda s: s.eps_rdp)
        rows = [{"client": s.client, "releases": s.releases, "zcdp_rho": s.zcdp_rho, "eps_zcdp": None,
                 "eps_rdp": s.eps_rdp, "eps_pld": None} for s in per_client]
        return {"private": True, "accountant": "rdp", "eps": worst.eps_rdp, "delta": delta,
                "neighbouring": relations[0], "worst_client": worst.client, "releases": worst.releases,
                "eps_rdp": worst.eps_rdp, "eps_zcdp": None, "zcdp_rho": worst.zcdp_rho, "mode": mode,
                "eps_budget": eps_budget, "mechanisms": sorted({r.mechanism for r in ledger.releases}),
                "per_client": rows, "note": trust_note(ledger)}
    worst = max(per_client, key=lambda s: s.zcdp_rho)  # Gaussians: eps is increasing in the composed rho
    rows = [{"client": s.client, "releases": s.releases, "zcdp_rho": s.zcdp_rho, "eps_zcdp": s.eps_zcdp,
             "eps_rdp": s.eps_rdp, "eps_pld": epsilon_of_rho(s.zcdp_rho, delta)} for s in per_client]
    return {"private": True, "accountant": "pld", "eps": pld_epsilon(ledger.of_client(worst.client), delta),
            "delta": delta, "neighbouring": relations[0], "worst_client": worst.client, "releases": worst.releases,
            "eps_rdp": worst.eps_rdp, "eps_zcdp": worst.eps_zcdp, "zcdp_rho": worst.zcdp_rho, "mode": mode,
            "eps_budget": eps_budget, "mechanisms": sorted({r.mechanism for r in ledger.releases}),
            "per_client": rows, "note": "; ".join(n for n in (trust_note(ledger),
                                                                pld_fallback_note(ledger.of_client(worst.client))) if n)
            or None}


def _format_eps(eps) -> str:
    """eps for a one-line report (None: not finite, as summary.json stores it)."""
    return "inf" if eps is None else f"{eps:.4f}" if eps < 1e6 else f"{eps:.4g}"


#: what a private run with ``basis.kind: pooled`` does not cover (docs/privacy.md, "Not covered")
POOLED_BASIS_CAVEAT = ("the basis (basis.kind pooled) is an FPCA of every site's curves without noise, not covered "
                       "by this eps; use basis.kind federated_dp (charged) or a fixed basis for a guarantee of the "
                       "whole release")


def privacy_headline(section: dict, who: str = "client") -> str:
    """The one line every command prints about privacy, from a :func:`privacy_section`."""
    if not section.get("private"):
        return "privacy: off (no noise was added: no differential-privacy guarantee)"
    asked = section.get("eps_budget")
    budget = "" if asked is None else {"total": f"; total budget eps = {asked:g}",
                                       "per_round": f"; eps = {asked:g} per round"}.get(section.get("mode") or "", "")
    relation = NEIGHBOURING_TEXT.get(section["neighbouring"], section["neighbouring"])
    accountant = "RDP accountant of the Skellam secure sums" if section.get("accountant") == "rdp" else "PLD accountant"
    note = section.get("note") or ""
    trusted = "; NO protection against the server (trusted aggregator)" if "trusted_aggregator" in note else ""
    caveat = f"; NOT covered: {section['caveat']}" if section.get("caveat") else ""
    return (f"privacy spent per {who} (worst {who} {section['worst_client']}, {section['releases']} releases): "
            f"eps = {_format_eps(section['eps'])} at delta = {section['delta']:g} ({accountant}, {relation} "
            f"neighbours{budget}{trusted}){caveat}")


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
    from fdp_flower.privacy.ledger import has_skellam, skellam_aware_epsilon

    rows = []
    for client, report in sorted(site_reports.items()):
        delta, relation = float(report["delta"]), str(report["neighbouring"])
        releases = ledger.of_client(client)
        if has_skellam(releases):  # secure-sum shares: the RDP figure the site computes too (replace-one)
            server = skellam_aware_epsilon(releases, delta) if relation == "replace_one" else None
        else:
            try:
                server = pld_epsilon([r.under(relation) for r in releases], delta)
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
        "name": sc.name, "engine": result.engine, "rule": getattr(sc.algorithm, "rule", "admm"),
        "stop_reason": result.stop_reason,
        "rounds_completed": len(result.history), "rounds_planned": _planned_rounds(sc),
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
    if getattr(sc.basis, "kind", None) == "pooled" and summary["privacy"].get("private"):
        summary["privacy"]["caveat"] = POOLED_BASIS_CAVEAT  # printed with eps (privacy_headline)
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


def write_run(out_dir: str | Path, scenario, *, history: list[dict], ledger: PrivacyLedger, summary: dict,
              final: dict | None = None, iterates: dict | None = None, failures: list | None = None,
              graph: dict | None = None) -> Path:
    """The one writer of a results directory (:mod:`fdp_flower.outputs.layout`), for every family and engine:
    ``scenario.yaml``, ``history.csv``, ``ledger.csv``, ``failures.csv`` (when ``failures`` is given),
    ``final.npz`` / ``iterates.npz`` (the arrays given), ``graph.json`` and, last, ``summary.json`` (so a
    directory with a summary is complete).  Text files are replaced atomically; returns the directory."""
    files = ResultsDir.at(out_dir)
    files.root.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(files.scenario, scenario_to_yaml(scenario))
    write_csv(files.history, history)
    write_csv(files.ledger, ledger.to_rows(), LEDGER_COLUMNS)
    if failures is not None:
        write_csv(files.failures, [f.to_row() for f in failures], FailureRecord.COLUMNS)
    if final is not None:
        np.savez(files.final, **final)
    if iterates is not None:
        np.savez_compressed(files.iterates, **iterates)
    if graph is not None:
        _atomic_write_text(files.graph, json.dumps(graph))
    _atomic_write_text(files.summary, json.dumps(_clean(summary), indent=2, default=float))
    return files.root


def tabular_summary(scenario, history: list[dict], ledger: PrivacyLedger, *, engine: str, stop_reason: str | None,
                    **extra) -> dict:
    """``summary.json`` of a peer-to-peer or gradient run: name, engine, algorithm, stop reason, rounds, the last
    history row and the privacy section (the scenario's delta, mode and budget when it released noise)."""
    p = scenario.privacy
    enabled = bool(getattr(p, "enabled", False) and ledger.releases)
    return {"name": scenario.name, "engine": engine, "algorithm": scenario.algorithm.kind,
            "stop_reason": stop_reason or "completed", "rounds_completed": len(history),
            "final": history[-1] if history else {}, **extra,
            "privacy": privacy_section(ledger, p.delta, mode=getattr(p, "mode", "total") if enabled else None,
                                       eps_budget=getattr(p, "eps", None) if enabled else None)}


def write_results(result, out_dir: str | Path) -> Path:
    """Write every file of an FDP-ADMM run into ``out_dir`` (created, :func:`write_run`); returns the directory."""
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
    try:
        summary = summarize(result)
    except (ArithmeticError, MemoryError, ValueError) as exc:  # the other files are written whatever happens here
        log.warning("privacy summary failed (%s); ledger.csv holds every release", exc)
        summary = summarize(result, privacy={"private": bool(result.ledger.releases),
                                             "error": f"accountant failed: {type(exc).__name__}: {exc}"})
    out = write_run(out_dir, result.scenario, history=result.history, ledger=result.ledger, summary=summary,
                    final=arrays, failures=getattr(result, "failures", None) or [])
    log.info("results written to %s", out.resolve())
    return out


def write_protocol_results(server, scenario, out_dir: str | Path, *, engine: str = "inprocess") -> dict:
    """Write the results directory of a run of a family's server protocol (the generic drivers, :func:`write_run`):
    ``final.npz`` holds the protocol's :meth:`~fdp_flower.algorithms.protocol.ServerProtocol.final_arrays`;
    returns the summary."""
    summary = tabular_summary(scenario, server.history, server.ledger, engine=engine, stop_reason=server.stop_reason,
                              rounds_planned=server.rounds_planned)
    write_run(out_dir, scenario, history=server.history, ledger=server.ledger, summary=summary,
              final=server.final_arrays(), failures=server.failures)
    return _clean(summary)


def _planned_rounds(scenario) -> int:
    """The rounds an FDP-ADMM run plans (a level calibration's included)."""
    from fdp_flower.algorithms.fdp_admm.plan import planned_rounds

    return planned_rounds(scenario)
