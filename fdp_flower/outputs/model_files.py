"""Saving and loading a fitted model: ``model.save(path)`` and ``fdp_flower.load(path)`` (docs/api.md).

A saved model is a directory:

- ``model.json``: the format, the model class and what is not an array (stop reason, engine, the
  sites' m_i, the inference record's calibration);
- ``scenario.yaml``: the fully resolved scenario of the fit;
- ``model.npz``: the released estimate w, the basis (functional models), the node estimates
  (peer-to-peer), the aggregated inference pieces (if any);
- ``ledger.csv`` and ``history.csv``: every release and the per-round metrics.

Everything in it is a release of the fit or public, like the model object itself.  :func:`load_model`
also reads a results directory of ``fdp-flower run``, ``flwr run`` or ``fit(..., out=...)`` (through
:func:`fdp_flower.outputs.models.load_results`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fdp_flower.outputs.layout import ResultsDir

FORMAT = "fdp-flower-model"
FORMAT_VERSION = 1


def save_model(model, path) -> Path:
    """Write ``model`` (a FunctionalModel or TabularModel) to the directory ``path``; returns the path."""
    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.models import FunctionalModel
    from fdp_flower.outputs.results import LEDGER_COLUMNS, OutputError, check_output_dir, write_csv

    try:
        out = check_output_dir(path, "model directory")
    except OutputError as exc:
        raise ValueError(f"save: {exc}") from None
    arrays: dict[str, np.ndarray] = {"w": np.asarray(model.w, dtype=float)}
    meta: dict = {"format": FORMAT, "version": FORMAT_VERSION, "stop_reason": model.stop_reason}
    if isinstance(model, FunctionalModel):
        meta.update(kind="functional", engine=model.engine, sample_sizes=list(model.sample_sizes),
                    basis_kind=model.basis.kind)
        arrays.update({f"basis_{k}": v for k, v in model.basis.to_arrays().items()})
        if model.basis.explained_variance_ratio is not None:
            arrays["basis_explained_variance_ratio"] = model.basis.explained_variance_ratio
        if model.inference is not None:
            meta["inference"] = _record_meta(model.inference)
            if model.inference.sandwich is not None:
                arrays.update(_sandwich_arrays(model.inference.sandwich))
    else:
        meta.update(kind="tabular", intercept_scale=float(model.intercept_scale))
        if model.node_w is not None:
            arrays["node_w"] = np.asarray(model.node_w, dtype=float)
    files = ResultsDir.at(out)
    files.scenario.write_text(scenario_to_yaml(model.scenario))
    np.savez(files.model_arrays, **arrays)
    write_csv(files.ledger, model.ledger.to_rows(), LEDGER_COLUMNS)
    model.history.to_csv(files.history, index=False)
    files.model_meta.write_text(json.dumps(meta, indent=2))
    return out


def _record_meta(record) -> dict:
    meta = {"eps_total": record.eps_total, "delta": record.delta,
            "multipliers": None if record.multipliers is None else list(record.multipliers),
            "shares": list(record.shares), "failure": record.failure}
    s = record.sandwich
    if s is not None:
        d = s.density
        meta.update(density=[d.density, d.half_width, d.window_fraction, d.target_mass, d.slope, d.slope_sd],
                    sample_sizes=list(s.sample_sizes), tau=s.tau, gram_min_eigenvalue=s.gram_min_eigenvalue,
                    gram_noise=s.gram_noise, repaired=s.repaired, private=s.private)
    return meta


def _sandwich_arrays(sandwich) -> dict[str, np.ndarray]:
    return {"inference_gram": sandwich.gram, "inference_omega": sandwich.omega, "inference_hessian": sandwich.hessian}


def load_model(path):
    """The model saved by ``model.save(path)``, or the model of a results directory (``load_results``)."""
    from fdp_flower.algorithms.registry import parse_any_scenario
    from fdp_flower.config.base import read_yaml_file
    from fdp_flower.outputs.models import (
        FunctionalModel,
        PrivacyReport,
        TabularModel,
        _history,
        _ledger,
        _scenario_privacy,
        load_results,
    )

    out = Path(path)
    if not out.is_dir():
        raise ValueError(f"load: {out}: no such directory")
    files = ResultsDir.at(out)
    if not files.model_meta.is_file():
        return load_results(out)
    try:
        meta = json.loads(files.model_meta.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"load: {files.model_meta}: unreadable ({exc})") from None
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise ValueError(f"load: {files.model_meta}: not a saved fdp-flower model of format version {FORMAT_VERSION}")
    scenario = parse_any_scenario(read_yaml_file(files.scenario), str(files.scenario))
    ledger = _ledger(out)
    history = _history(out)
    with np.load(files.model_arrays, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    delta, mode, eps = _scenario_privacy(scenario)
    if meta["kind"] == "tabular":
        privacy = PrivacyReport.from_ledger(ledger, delta=delta, mode=mode, eps_budget=eps)
        return TabularModel(arrays["w"], float(meta["intercept_scale"]), scenario, privacy, ledger, history,
                            node_w=arrays.get("node_w"), stop_reason=str(meta["stop_reason"]))
    from fdp_flower.functional.fpca import FunctionalBasis

    basis_arrays = {k[len("basis_"):]: v for k, v in arrays.items() if k.startswith("basis_")}
    ratio = basis_arrays.pop("explained_variance_ratio", None)
    basis = FunctionalBasis.from_arrays(basis_arrays, kind=str(meta["basis_kind"]))
    if ratio is not None:
        from dataclasses import replace

        basis = replace(basis, explained_variance_ratio=ratio)
    record = None
    info = meta.get("inference")
    if info is not None:
        record = _record(info, arrays, ledger)
        privacy = PrivacyReport.from_ledger(ledger, delta=delta, mode="total", eps_budget=info["eps_total"]) \
            if record.releases else PrivacyReport.from_ledger(ledger, delta=delta, mode=mode, eps_budget=eps)
    else:
        privacy = PrivacyReport.from_ledger(ledger, delta=delta, mode=mode, eps_budget=eps)
    return FunctionalModel(arrays["w"], basis, scenario, privacy, ledger, history, str(meta["stop_reason"]),
                           tuple(int(m) for m in meta["sample_sizes"]), str(meta["engine"]), record)


def _record(info: dict, arrays: dict, ledger):
    from fdp_flower.inference.bands import ResidualDensity, SandwichEstimate
    from fdp_flower.inference.inprocess import InferenceRecord
    from fdp_flower.inference.releases import INFERENCE_MECHANISMS

    sandwich = None
    if "density" in info:
        sandwich = SandwichEstimate(arrays["inference_gram"], arrays["inference_omega"],
                                    ResidualDensity(*(float(v) for v in info["density"])), arrays["inference_hessian"],
                                    tuple(int(m) for m in info["sample_sizes"]), float(info["tau"]),
                                    float(info["gram_min_eigenvalue"]), float(info["gram_noise"]),
                                    bool(info["repaired"]), bool(info["private"]))
    releases = tuple(r for r in ledger.releases if r.mechanism in INFERENCE_MECHANISMS)
    multipliers = None if info["multipliers"] is None else tuple(float(z) for z in info["multipliers"])
    return InferenceRecord(sandwich, releases, info["eps_total"], float(info["delta"]), multipliers,
                           tuple(float(v) for v in info["shares"]), str(info.get("failure", "")))
