"""Start a real SuperLink (simulation runtime) on loopback and run the app on it.

Used by the Flower end-to-end tests: the SuperLink is the library's
:class:`fdp_flower.engines.flower.SimulationFederation` (FLWR_HOME in the test's temp dir,
telemetry and runtime dependency installation off, every process stopped by PID, also
on failure); ``flwr_run`` passes the run config as a string, as a user would type it.
"""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

from fdp_flower.engines.flower import SimulationFederation

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


class FederationEnv(dict):
    """The environment (FLWR_HOME, PATH) under which `flwr` finds the test SuperLink, and the
    `--federation-config` arguments of its simulation (the SuperNode count)."""

    federation_config: list[str]


@contextlib.contextmanager
def simulation_superlink(tmp_path: Path, num_supernodes: int):
    """A `flower-superlink --simulation` on a free loopback port, registered as connection 'test';
    yields a :class:`FederationEnv`."""
    with SimulationFederation(tmp_path, app_dir=REPO, connection="test", num_supernodes=num_supernodes) as fed:
        env = FederationEnv(fed.env)
        env.federation_config = fed.federation_config()
        yield env


def flwr_run(env: dict[str, str], run_config: str, timeout: float = 600.0, cwd: Path = REPO
             ) -> tuple[str, dict, str]:
    """`flwr run <repo> test --stream` in ``cwd``, then the run's status from `flwr ls` (the exit code is
    not enough)."""
    proc = subprocess.run(
        [str(BIN / "flwr"), "run", str(REPO), "test", "--stream", "--run-config", run_config,
         *getattr(env, "federation_config", [])],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    output = proc.stdout + proc.stderr
    match = re.search(r"started run (\d+)", output)
    if not match:
        raise RuntimeError(f"flwr run did not start a run:\n{output}")
    run_id = match.group(1)
    ls = subprocess.run([str(BIN / "flwr"), "ls", "test", "--run-id", run_id, "--format", "json"],
                        env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    status = json.loads(ls.stdout)
    return run_id, status, output
