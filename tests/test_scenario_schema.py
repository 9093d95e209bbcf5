"""Scenario and sweep files: every shipped file loads, every field is described and bounded,
and a bad field gives a one-line error naming the file and the field."""
from __future__ import annotations

import typing
from pathlib import Path

import annotated_types
import pytest
import yaml
from pydantic import BaseModel

from fdp_flower.algorithms.fdp_admm.config import Scenario, load_scenario
from fdp_flower.config.base import ScenarioError
from fdp_flower.engines.sweep import SweepConfig, load_sweep

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _load_any(path: Path):
    """Each file with the loader of its algorithm family."""
    data = yaml.safe_load(path.read_text())
    kind = (data.get("algorithm") or {}).get("kind", "fdp_admm")
    if "sweep" in data:
        return load_sweep(path)
    if kind == "fdp_admm":
        return load_scenario(path)
    if kind in ("dp_admm", "dp_acc_admm"):
        from fdp_flower.algorithms.gradient_admm.config import load_gradient_admm_scenario

        return load_gradient_admm_scenario(path)
    from fdp_flower.algorithms.p2p.config import load_p2p_scenario

    return load_p2p_scenario(path)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_every_shipped_scenario_loads(path):
    assert _load_any(path) is not None


def test_paper_table_files_cover_the_paper_grid():
    from fdp_flower.outputs import paper_tables

    for table, (penalty, m) in paper_tables.SETTINGS.items():
        spec = load_sweep(ROOT / "scenarios" / f"paper_table{table}.yaml")
        assert spec.sweep.paper_table == table and spec.sweep.repetitions == 100
        assert spec.base.model.penalty.kind == penalty and spec.base.federation.num_clients == m
        assert spec.base.data.n_samples == 100_000 and spec.base.privacy.paper_constants
        cells = {(c.model.loss.tau, c.privacy.eps if c.privacy.enabled else None,
                  c.privacy.delta if c.privacy.enabled else None) for _, c in spec.configs}
        wanted = {(t, e, d) for t in paper_tables.TAUS for e, d in paper_tables.ROWS}
        assert cells == wanted


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


_BOUNDS = (annotated_types.Ge, annotated_types.Gt, annotated_types.Le, annotated_types.Lt,
           annotated_types.MaxLen, annotated_types.MinLen)


def _unbounded_or_undescribed(model, seen) -> list[str]:
    if model in seen:
        return []
    seen.add(model)
    bad = []
    for name, field in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        if not field.description:
            bad.append(f"{where}: no description")
        subs = _models(field.annotation)
        literal = typing.get_origin(field.annotation) is typing.Literal
        bounded = any(isinstance(m, _BOUNDS) for m in field.metadata)
        if not (subs or literal or bounded or field.annotation is bool or name in ("grid", "cases")):
            bad.append(f"{where}: no bounds")
        for sub in subs:
            bad += _unbounded_or_undescribed(sub, seen)
    return bad


def test_every_field_is_described_and_bounded():
    assert _unbounded_or_undescribed(Scenario, set()) == []
    assert _unbounded_or_undescribed(SweepConfig, set()) == []


def test_models_are_frozen_and_forbid_extra():
    seen: set = set()
    _unbounded_or_undescribed(Scenario, seen)
    for model in seen | {SweepConfig}:
        assert model.model_config.get("extra") == "forbid", model
        assert model.model_config.get("frozen") is True, model


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_misspelled_field_is_one_line_naming_file_and_field(tmp_path):
    path = _write(tmp_path, "privacy:\n  epsiln: 0.5\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and "privacy.epsiln" in msg


def test_out_of_range_field_names_it(tmp_path):
    path = _write(tmp_path, "privacy:\n  delta: 2.0\n")
    with pytest.raises(ScenarioError, match=r"privacy\.delta") as err:
        load_scenario(path)
    assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match=r"algorithm\.rho"):
        load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["algorithm.rho=-1"])


def test_unknown_variant_names_the_section(tmp_path):
    path = _write(tmp_path, "basis:\n  kind: wavelet\n")
    with pytest.raises(ScenarioError, match=r"basis") as err:
        load_scenario(path)
    assert "\n" not in str(err.value)


def test_yaml_1e5_string_is_rejected(tmp_path):
    """YAML reads 1e-5 as a string; the schema refuses it instead of guessing."""
    path = _write(tmp_path, "privacy:\n  delta: 1e-5\n")
    try:
        sc = load_scenario(path)
    except ScenarioError as err:
        assert "privacy.delta" in str(err)
    else:  # pydantic may coerce the numeric string; then it must be the right number
        assert sc.privacy.delta == 1.0e-5


def test_sweep_errors_name_the_sweep_field_and_case(tmp_path):
    path = _write(tmp_path, "sweep:\n  repetitons: 3\n")
    with pytest.raises(ScenarioError, match=r"sweep\.repetitons") as err:
        load_sweep(path)
    assert "\n" not in str(err.value)
    path = _write(tmp_path, "sweep:\n  repetitions: 0\n")
    with pytest.raises(ScenarioError, match=r"sweep\.repetitions"):
        load_sweep(path)
    path = _write(tmp_path, "sweep:\n  grid:\n    privacy.eps: [0.5, -1.0]\n")
    with pytest.raises(ScenarioError) as err:
        load_sweep(path)
    msg = str(err.value)
    assert "privacy.eps=-1.0" in msg and "privacy.eps:" in msg and "\n" not in msg
    path = _write(tmp_path, "sweep:\n  cases:\n    - {privacy.epsilon: 0.3}\n")
    with pytest.raises(ScenarioError, match=r"privacy\.epsilon"):
        load_sweep(path)


def test_sweep_expands_grid_times_cases_and_overrides(tmp_path):
    path = _write(tmp_path, "name: t\nsweep:\n  repetitions: 3\n  grid:\n    model.loss.tau: [0.25, 0.5]\n"
                            "    federation.num_clients: [2, 4]\n  cases:\n    - {privacy.eps: 0.2}\n"
                            "    - {privacy.enabled: false}\n")
    spec = load_sweep(path)
    assert len(spec.configs) == 8
    assert {c.federation.num_clients for _, c in spec.configs} == {2, 4}
    runs = spec.runs()
    assert len(runs) == 24 and sorted({sc.seed for _, _, sc in runs}) == [0, 1, 2]
    spec = load_sweep(path, ["sweep.repetitions=1", "seed=10"])
    assert spec.sweep.repetitions == 1 and {sc.seed for _, _, sc in spec.runs()} == {10}
