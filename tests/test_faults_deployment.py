"""Kill a SuperNode mid-run in a real loopback deployment (flower-superlink + 3 flower-supernode
processes with node-local files, the harness of tests/test_deployment.py).

The run must complete with that node's client marked failed from the kill on (the others go on;
quorum 0.5 = 2 of 3), and nothing computed before the kill may be lost: the rounds before it are in
the final history exactly as checkpointed, and equal the in-process engine's iterates.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.config.base import parse_override_string
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional.node_files import load_dataset, partition, write_partitions
from fdp_flower.outputs.checkpoint import read_checkpoint

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_demo.yaml"
ROUNDS = 10
KILL_AFTER = 2  # kill supernode 2 once round 2 is checkpointed
OVERRIDES = f"algorithm.rounds={ROUNDS}; output.checkpoint_every=1; faults.reply_timeout=30; faults.quorum=0.5"

# the sites opt in to noise from the run seed (the server knows it: reproducibility tests only), so the
# deployment's iterates can equal the in-process engine's; tests/test_site_privacy_deployment.py covers
# the default (noise the server cannot predict)
SEEDED = {"allow-seeded-noise": True}

pytestmark = pytest.mark.skipif(shutil.which("flower-superlink") is None
                                and not (Path(sys.executable).parent / "flower-superlink").exists(),
                                reason="flower-superlink not installed")


def _checkpoint_round(results: Path) -> int:
    for ck in results.glob("*/checkpoint.npz"):
        try:
            return read_checkpoint(ck).round
        except ValueError:
            return 0
    return 0


@pytest.mark.slow
def test_killing_a_supernode_mid_run(tmp_path):
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=1500), 3), tmp_path / "data", "npz")
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=SEEDED)
    outcome: dict = {}
    try:
        fed.start()
        victim = fed.processes[3]  # processes: superlink, supernode-0, supernode-1, supernode-2
        runner = threading.Thread(target=lambda: outcome.update(zip(("run_id", "status"), fed.run(
            {"scenario": str(SCENARIO), "overrides": OVERRIDES, "results-dir": str(results)}, timeout=400))))
        runner.start()
        deadline = time.monotonic() + 300
        while _checkpoint_round(results) < KILL_AFTER:
            assert runner.is_alive() and time.monotonic() < deadline, fed.logs()
            time.sleep(0.05)
        os.killpg(victim.pid, signal.SIGKILL)  # the node and its ClientApp process die at once
        killed_at = _checkpoint_round(results)
        runner.join(420)
        assert not runner.is_alive()
        assert outcome.get("status") == "finished:completed", fed.logs()
    finally:
        fed.stop()
    assert killed_at < ROUNDS, "the run finished before the kill; make rounds slower or more"

    (out,) = list(results.glob(f"*run{outcome['run_id']}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["rounds_completed"] == ROUNDS
    failures = list(csv.DictReader(open(out / "failures.csv")))
    assert failures and {int(f["client"]) for f in failures} == {2}, failures
    failed_rounds = sorted(int(f["round"]) for f in failures)
    first = failed_rounds[0]
    assert killed_at <= first <= killed_at + 1  # the round in flight at the kill, or the next
    assert failed_rounds == list(range(first, ROUNDS + 1))  # marked failed every round from then on
    assert summary["failures"]["clients"] == [2]
    history = list(csv.DictReader(open(out / "history.csv")))
    assert [int(float(r["failed_clients"])) for r in history] == [0] * (first - 1) + [1] * (ROUNDS - first + 1)
    # client 2 released in the rounds before it died, and nothing after (or the conservatively charged
    # release of a round whose reply was lost)
    ledger = list(csv.DictReader(open(out / "ledger.csv")))
    c2 = sorted(int(r["round"]) for r in ledger if int(r["client"]) == 2)
    charged = {int(f["round"]) for f in failures if f["charged"] == "1"}
    assert c2 == sorted(set(range(1, first)) | charged)

    # nothing computed before the kill is lost: those rounds equal the in-process engine's
    scenario = load_scenario(SCENARIO, parse_override_string(OVERRIDES)
                             + [f"data.paths={json.dumps([str(p) for p in paths])}"])
    before = run_fdp_admm(scenario, with_reference=False, stop_after=first - 1)
    final = read_checkpoint(out)  # the last checkpoint (round ROUNDS) carries the whole history
    assert final.round == ROUNDS and len(final.history) == ROUNDS
    held = np.load(out / "final.npz")["state_noisy_primals"][2]
    np.testing.assert_allclose(held, before.state.noisy_primals[2], rtol=1e-10, atol=1e-12)  # its last release
    print(f"killed supernode 2 after round {killed_at}; client 2 failed in rounds {failed_rounds}; "
          f"run completed {ROUNDS} rounds")
