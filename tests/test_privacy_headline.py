"""One headline eps: every family's summary.json has the same privacy section (PLD accountant, its
neighbouring relation) and `fdp-flower run` prints that figure in one line."""
from __future__ import annotations

import json
import re

import pytest

from fdp_flower.cli import main
from fdp_flower.outputs.results import PRIVACY_KEYS
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.privacy.ledger import pld_epsilon

LINE = re.compile(r"privacy spent per (client|node) \(worst (client|node) (\d+), (\d+) releases\): eps = ([0-9.]+) "
                  r"at delta = ([0-9.e-]+) \(PLD accountant, (replace-one|add/remove) neighbours")


def _ledger(path):
    import csv

    with open(path) as fh:
        rows = [{**r, "client": int(r["client"]), "round": int(r["round"]), "sensitivity": float(r["sensitivity"]),
                 "sigma": float(r["sigma"])} for r in csv.DictReader(fh)]
    return PrivacyLedger.from_rows(rows)


@pytest.mark.parametrize("scenario,overrides,budget", [
    ("scenarios/quickstart.yaml", ["algorithm.rounds=3", "data.n_samples=600", "federation.num_clients=3",
                                   "privacy.mode=total", "privacy.eps=1.0"], 1.0),
    ("scenarios/p2p_lad_zcdp_nfl.yaml", ["algorithm.rounds=5"], 10.0),
    ("scenarios/dp_admm_breast_cancer.yaml", ["algorithm.rounds=5"], None),
])
def test_every_family_reports_the_pld_eps_and_its_relation(tmp_path, capsys, scenario, overrides, budget):
    args = ["run", scenario, "--out", str(tmp_path)]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0
    out = capsys.readouterr().out
    privacy = json.loads((tmp_path / "summary.json").read_text())["privacy"]
    assert set(privacy) >= set(PRIVACY_KEYS) and privacy["private"] is True
    assert privacy["accountant"] == "pld" and privacy["neighbouring"] in ("replace_one", "add_remove")
    ledger = _ledger(tmp_path / "ledger.csv")
    worst = privacy["worst_client"]
    # the headline is the worst client's PLD eps of its recorded releases, recomputed here
    assert privacy["eps"] == pytest.approx(pld_epsilon(ledger.of_client(worst), privacy["delta"]), rel=1e-12)
    assert privacy["eps"] <= privacy["eps_rdp"] <= privacy["eps_zcdp"]
    assert max(r["eps_pld"] for r in privacy["per_client"]) == pytest.approx(privacy["eps"], rel=1e-6)
    if budget is not None:  # a total budget: calibrated to meet it by this same accountant
        assert 0.97 * budget <= privacy["eps"] <= budget and privacy["eps_budget"] == budget
    (match,) = [m for m in map(LINE.search, out.splitlines()) if m]
    assert int(match.group(3)) == worst and int(match.group(4)) == privacy["releases"]
    assert float(match.group(5)) == pytest.approx(privacy["eps"], abs=5e-5)
    assert match.group(7) == {"replace_one": "replace-one", "add_remove": "add/remove"}[privacy["neighbouring"]]
    assert "(RDP)" not in out


def test_history_carries_the_same_eps_every_round(tmp_path, capsys):
    import csv

    assert main(["run", "scenarios/quickstart.yaml", "--out", str(tmp_path), "--set", "algorithm.rounds=3",
                 "--set", "data.n_samples=600", "--set", "federation.num_clients=3"]) == 0
    capsys.readouterr()
    with open(tmp_path / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    eps = [float(r["eps_pld"]) for r in rows]
    assert eps == sorted(eps) and eps[0] > 0
    privacy = json.loads((tmp_path / "summary.json").read_text())["privacy"]
    assert eps[-1] == pytest.approx(privacy["eps"], rel=1e-6)
    assert privacy["mode"] == "per_round" and privacy["eps"] > privacy["eps_budget"]  # 3 rounds of 0.5 each
