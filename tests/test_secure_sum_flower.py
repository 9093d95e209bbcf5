"""A secure sum through Flower's SecAgg+ on the simulation runtime behind a real SuperLink, driven
from a Message-API ServerApp (fdp_flower/strategies/secure_sum.py, fdp_flower/clients/secure_sum.py;
app in benchmarks/secure_sum_app): the integer sum Flower returns equals the in-process sum of the
same shares bit for bit; one node dropping out within t keeps the round, two (beyond t) refuse it,
at the server, at Flower's threshold or at the sites; nothing data-dependent passes unmasked."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.engines.flower import SimulationFederation

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "benchmarks" / "secure_sum_app"
NODES = 4  # M; t = 1


def _app():
    if str(APP) not in sys.path:
        sys.path.insert(0, str(APP))
    return importlib.import_module("secure_sum_app.apps")


def _cfg(**overrides) -> dict:
    """The app's run config defaults (pyproject.toml) with ``overrides``."""
    import tomllib

    cfg = dict(tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    return cfg | {"num-nodes": NODES} | overrides


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure_sum")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")  # the ServerApp / ClientApps import ours
    try:
        with SimulationFederation(tmp, app_dir=APP, connection="secure-sum", num_supernodes=NODES) as fed:
            yield fed
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _run(fed, name: str, **overrides) -> tuple[dict, dict]:
    out = fed.workdir / f"{name}.json"
    cfg = _cfg(out=str(out), **overrides)
    _run_id, status = fed.run(cfg, timeout=900)
    assert status == "finished:completed", f"{status}\n{fed.logs()[-4000:]}"
    return cfg, json.loads(out.read_text())


@pytest.mark.slow
def test_secure_sum_equals_the_inprocess_sum_bit_for_bit_and_only_masked_values_carry_data(federation):
    apps = _app()
    cfg, out = _run(federation, "all")
    (round1,) = out["secure"]
    assert "refused" not in round1, round1
    expected = apps.expected_sum(cfg, 1, range(NODES))
    assert round1["total"] == expected  # int64 lists: bit for bit
    assert len(round1["contributors"]) == NODES and round1["dropped"] == []
    # the plan's shares are far from Flower's clip, and the sum is not trivially small: well above one share's
    # noise sd at the sampler's largest Poisson mean (sqrt(2 * 2^30) = 46341)
    assert max(abs(v) for v in expected) > 1e5
    # what crossed the wire in clear at the masked-vector stage: no arrays, empty metrics, num_examples 1
    collect = [w for w in round1["wire"] if w["stage"] == "collect_masked_vectors"]
    assert len(collect) == NODES
    for w in collect:
        assert w["array_records"] == {"fitres.parameters": 0}
        assert w["config_records"] == {"fitres.metrics": [], "fitres.status": ["code", "message"],
                                       "secaggplus_configs": ["masked_params"]}
        assert w["metric_records"] == {"fitres.num_examples": {"num_examples": 1}}
    assert all(v == {"num_examples": 1, "metrics": {}} for v in round1["unmasked"].values())
    # the other stages carry key material only
    for w in round1["wire"]:
        if w["stage"] != "collect_masked_vectors":
            assert w["array_records"] == {} and w["metric_records"] == {}, w


@pytest.mark.slow
def test_one_dropout_within_t_keeps_the_round_and_two_beyond_t_refuse_it(federation):
    apps = _app()
    # one node (partition 0) fails at the masked-vector stage: t = 1 tolerates it
    cfg, out = _run(federation, "drop1", drop=1)
    (r,) = out["secure"]
    assert "refused" not in r, r
    assert len(r["contributors"]) == NODES - 1 and len(r["dropped"]) == 1
    assert r["total"] == apps.expected_sum(cfg, 1, range(1, NODES))
    # two fail: Flower's own check halts the round (Shamir threshold M - t = 3 > 2 live nodes)
    _cfg2, out = _run(federation, "drop2", drop=2)
    assert "refused" in out["secure"][0] and "halted" in out["secure"][0]["refused"], out["secure"]
    # with a threshold of 2 Flower would go on: the server's guard refuses before unmasking
    _cfg3, out = _run(federation, "drop2-server", drop=2, threshold=2)
    assert "2 masked vectors arrived, the round needs 3" in out["secure"][0].get("refused", ""), out["secure"]


@pytest.mark.slow
def test_the_sites_refuse_to_unmask_an_under_noised_sum_that_the_server_would_release(federation):
    apps = _app()
    # a server that does not check (or lies about checking), threshold 2: the sites refuse to unmask
    _cfg1, out = _run(federation, "drop2-sites", drop=2, threshold=2, **{"server-guard": False})
    assert "refused at unmasking: 2 nodes contributed" in out["secure"][0].get("refused", ""), out["secure"]
    # control: without the sites' guard Flower releases the sum of 2 shares, whose noise is
    # 2 / (M - t) = 2/3 of what the accounting needs -- what the two checks above prevent
    cfg, out = _run(federation, "drop2-control", drop=2, threshold=2, **{"server-guard": False, "site-guard": False})
    r = out["secure"][0]
    assert "refused" not in r, r
    assert r["total"] == apps.expected_sum(cfg, 1, range(2, NODES))
    assert np.all(np.asarray(r["total"]) != 0)
