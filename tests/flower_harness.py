"""Start a real SuperLink (simulation runtime) on loopback and run the app on it.

Used by the Flower end-to-end tests: FLWR_HOME is a temp dir, telemetry and
runtime dependency installation are off, and every process started here is
stopped by PID (its whole process group), also on failure.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flower_env(flwr_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FLWR_HOME=str(flwr_home), FLWR_TELEMETRY_ENABLED="0",
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_DISABLE_UPDATE_CHECK="1",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # flower-superexec, flwr-simulation
    return env


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@contextlib.contextmanager
def simulation_superlink(tmp_path: Path, num_supernodes: int):
    """A `flower-superlink --simulation` on a free loopback port, registered as connection 'test'."""
    flwr_home = tmp_path / "flwr-home"
    flwr_home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (flwr_home / "config.toml").write_text(
        '[superlink]\ndefault = "test"\n\n[superlink.test]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
        f'options.num-supernodes = {num_supernodes}\n'
        'options.backend.client-resources.num-cpus = 1\n')
    env = flower_env(flwr_home)
    log = open(tmp_path / "superlink.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "flower-superlink"), "--insecure", "--simulation",
         "--disable-runtime-dependency-installation", "--host", "127.0.0.1", "--port", str(port),
         "--fleet-api-address", f"127.0.0.1:{free_port()}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"superlink did not start:\n{(tmp_path / 'superlink.log').read_text()}")
            time.sleep(0.3)
        yield env
    finally:
        stop_process(proc)
        log.close()


def flwr_run(env: dict[str, str], run_config: str, timeout: float = 600.0) -> tuple[str, dict, str]:
    """`flwr run <repo> test --stream`, then the run's status from `flwr ls` (the exit code is not enough)."""
    proc = subprocess.run(
        [str(BIN / "flwr"), "run", str(REPO), "test", "--stream", "--run-config", run_config],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    output = proc.stdout + proc.stderr
    match = re.search(r"started run (\d+)", output)
    if not match:
        raise RuntimeError(f"flwr run did not start a run:\n{output}")
    run_id = match.group(1)
    ls = subprocess.run([str(BIN / "flwr"), "ls", "test", "--run-id", run_id, "--format", "json"],
                        env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    status = json.loads(ls.stdout)
    return run_id, status, output
