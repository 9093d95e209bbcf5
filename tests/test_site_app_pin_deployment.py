"""A site runs only the app it approved, in a real deployment (flower-superlink + flower-supernode
processes on loopback, the site's launcher ``fdp-flower site-clientapp``).

The server ships the ClientApp's code (the app bundle, FAB).  Sites 0 and 1 pin the fdp-flower app
(site 0 by the SHA-256 of its bytes, site 1 by the SHA-256 of its files, both computed offline with
``fdp-flower fab-hash`` from the app directory) and run their SuperNodes with ``--isolation process``
next to the launcher; site 2 runs a plain SuperNode (Flower's own ``flower-superexec``), the negative
control.  The approved app completes a private run.  Then the server ships a hostile bundle whose
ClientApp returns the file named by ``data-path``: the control site sends its file back whole (the
attack is real), the pinned sites refuse before any of the bundle's code runs -- no marker file, no
byte of the data in the replies -- and the server receives an ``INVALID_FAB`` error reply from each.
About 2 minutes.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from fdp_flower.clients.site_launcher import build_fab, describe_fab
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.functional.node_files import load_dataset, partition, write_partitions
from fdp_flower.privacy.site_fab import fab_digests

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_demo.yaml"
INVALID_FAB = 7  # flwr.common.constant.ErrorCode.INVALID_FAB

pytestmark = pytest.mark.skipif(shutil.which("flower-superlink") is None
                                and not (Path(sys.executable).parent / "flower-superlink").exists(),
                                reason="flower-superlink not installed")

THIEF_PYPROJECT = """\
[project]
name = "site-thief"
version = "0.1.0"
description = "An app bundle that returns the node's data file (fdp-flower tests)"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "fdp-flower-tests"

[tool.flwr.app.components]
serverapp = "site_thief_app:server"
clientapp = "site_thief_app:client"

[tool.flwr.app.config]
results-dir = ""
num-nodes = 3
"""


@pytest.mark.slow
def test_a_site_runs_only_the_app_it_approved(tmp_path):
    sha_pin, files_pin = describe_fab(APP).splitlines()[:2]  # what `fdp-flower fab-hash <app dir>` prints
    assert sha_pin.startswith("sha256:") and files_pin.startswith("files-sha256:")
    thief = tmp_path / "thief"
    thief.mkdir()
    (thief / "pyproject.toml").write_text(THIEF_PYPROJECT)
    shutil.copy(Path(__file__).parent / "site_thief_app.py", thief / "site_thief_app.py")
    thief_hash = fab_digests(build_fab(thief)).sha256
    assert f"sha256:{thief_hash}" != sha_pin

    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=300), 3), tmp_path / "data", "npz")
    fed = LoopbackFederation(tmp_path, data_paths=paths, app_pins={0: [sha_pin], 1: [files_pin]})
    try:
        fed.start()
        run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": "algorithm.rounds=1",
                                  "results-dir": str(tmp_path / "results")}, timeout=300)
        assert status == "finished:completed", fed.logs()
        fed.app_dir = thief  # the server ships its own code
        thief_run, thief_status = fed.run({"results-dir": str(tmp_path / "loot"), "num-nodes": 3}, timeout=300)
    finally:
        fed.stop()
    logs = {i: (tmp_path / f"site-clientapp-{i}.log").read_text() for i in (0, 1)}

    # the approved app: every site took part, each pinned site's launcher approved and ran it
    summary = json.loads(next((tmp_path / "results").glob(f"*run{run_id}/summary.json")).read_text())
    assert summary["stop_reason"] == "completed" and summary["sample_sizes"] == [100, 100, 100]
    assert sha_pin in logs[0] and f"approved by pin {sha_pin}" in logs[0]
    assert f"approved by pin {files_pin}" in logs[1]

    # the hostile bundle: the control site gave its file away; the pinned sites refused it
    assert thief_status == "finished:completed", fed.logs()
    replies = json.loads((tmp_path / "loot" / "thief.json").read_text())
    stolen = [r for r in replies.values() if "sha256" in r]
    refused = [r for r in replies.values() if "error_code" in r]
    assert len(replies) == 3 and len(stolen) == 1 and len(refused) == 2, replies
    assert stolen[0]["path"] == str(paths[2])
    assert stolen[0]["sha256"] == hashlib.sha256(paths[2].read_bytes()).hexdigest()  # the whole file: attack real
    assert Path(f"{paths[2]}.read-by-app").exists()
    for reply in refused:
        assert reply["error_code"] == INVALID_FAB
        assert reply["reason"].startswith(f"the site refuses app bundle sha256:{thief_hash} (files-sha256:")
        assert reply["reason"].endswith("it is not one of the 1 app(s) this site approved")
        assert "data" not in reply["reason"] and "npz" not in reply["reason"]  # no path, no content
    for i in (0, 1):
        assert not Path(f"{paths[i]}.read-by-app").exists()  # none of the bundle's code ran on a pinned site
        assert f"run {thief_run}: the site refuses app bundle sha256:{thief_hash}" in logs[i]
        assert "site-thief" not in logs[i]  # never installed, never loaded
    print(f"approved run {run_id}: {status}; hostile bundle sha256:{thief_hash[:12]}...: control site sent "
          f"{stolen[0]['size']} bytes, pinned sites replied INVALID_FAB")
