"""The local SuperLink launcher (fdp_flower/engines/flower.py) leaves nothing behind and refuses a
federation that cannot fit the scenario before it starts one.

- ``fdp-flower run --engine flower --supernodes N`` and the deployment demo's ``--nodes N`` on a
  scenario with node-local data (one SuperNode per client) whose client count is not N: one error line
  naming both numbers, exit code 2, no SuperLink started, no results directory made.
- A SuperLink killed with SIGKILL mid-run leaves its flower-superexec and the ServerApp's process
  (``flwr-simulation`` here) without a parent; :meth:`Federation.stop` still kills every process the
  federation caused (they carry its mark in their environment).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fdp_flower.cli import main
from fdp_flower.engines.flower import SimulationFederation, run_demo
from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

ROOT = Path(__file__).resolve().parents[1]


def _sim_workdirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("fdp-flower-sim-*")}


def test_supernodes_that_do_not_match_a_node_local_scenario_fail_in_one_line_before_the_run(tmp_path, capsys):
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=90), 3), tmp_path / "data", "npz")
    before, out = _sim_workdirs(), tmp_path / "results"
    started = time.monotonic()
    code = main(["run", str(ROOT / "scenarios" / "deploy_demo.yaml"), "--engine", "flower", "--supernodes", "8",
                 "--set", f"data.paths={json.dumps([str(p) for p in paths])}", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: --supernodes 8 does not match the scenario's 3 clients"), err
    assert time.monotonic() - started < 20  # no SuperLink was started (one takes longer than that to run)
    assert _sim_workdirs() == before and not out.exists()


def test_the_deployment_demo_refuses_a_node_count_that_does_not_match_the_scenario(tmp_path):
    with pytest.raises(ValueError, match=r"^--nodes 5 does not match the scenario's 3 clients"):
        run_demo(str(ROOT / "scenarios" / "deploy_demo.yaml"), nodes=5, workdir=str(tmp_path / "demo"))
    assert not (tmp_path / "demo").exists()  # refused before the data was partitioned


def test_supernodes_are_free_on_simulated_data(tmp_path, capsys):
    """Simulated data: a SuperNode simulates as many clients as it is given; the check does not apply."""
    from fdp_flower.algorithms.registry import any_scenario_from_run_config
    from fdp_flower.engines.flower import check_node_count

    scenario = any_scenario_from_run_config({"scenario": str(ROOT / "scenarios" / "quickstart.yaml"), "overrides": ""})
    check_node_count(scenario, 8, "--supernodes")  # no error


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc (Linux)")
@pytest.mark.skipif(shutil.which("flower-superlink") is None
                    and not (Path(sys.executable).parent / "flower-superlink").exists(),
                    reason="flower-superlink not installed")
def test_stop_kills_what_a_sigkilled_superlink_left_running(tmp_path):
    fed = SimulationFederation(tmp_path, app_dir=ROOT, num_supernodes=2)
    try:
        fed.start()
        link = fed.processes[0]
        cfg = tmp_path / "run.toml"
        cfg.write_text(f'scenario = "{ROOT / "scenarios" / "quickstart.yaml"}"\n'
                       f'overrides = "algorithm.rounds=500"\nresults-dir = "{tmp_path / "results"}"\n')
        started = fed._flwr("run", str(ROOT), fed.connection, "--run-config", str(cfg), *fed.federation_config(),
                            timeout=120)  # without --stream: returns once the run is submitted
        assert "started run" in started.stdout + started.stderr, started.stdout + started.stderr
        deadline = time.monotonic() + 120
        while not any("flwr-simulation" in _cmdline(p) for p in fed.marked_processes()):
            assert time.monotonic() < deadline, fed.logs()
            time.sleep(0.2)
        caused = [p for p in fed.marked_processes() if p != link.pid]
        names = {p: _cmdline(p) for p in caused}
        assert any("flower-superexec" in c for c in names.values()), names

        os.kill(link.pid, signal.SIGKILL)
        link.wait()
        time.sleep(2.0)
        left = [p for p in caused if _alive(p)]
        # what the old stop() missed: processes no longer below any process we started
        orphans = [p for p in left if p not in fed._descendants()]
        print(f"after SIGKILL of the SuperLink: {len(left)} of its processes alive, "
              f"{len(orphans)} outside our process tree: {[names[p].split()[1:2] for p in orphans]}")
    finally:
        fed.stop()
    assert orphans, "nothing was left running after the SIGKILL: the test no longer exercises stop()"
    survivors = {p: names[p] for p in caused if _alive(p)}
    assert not survivors, survivors
    assert not fed.marked_processes()


def test_flowers_final_results_dump_is_held_back_and_the_rest_passes():
    """The lines of `flwr run --stream` as Flower 1.41/1.42 prints them (ANSI-coloured level, tab-indented
    dump between "Final results:" and the next message)."""
    from fdp_flower.engines.flower import HideFinalResults

    info = "\x1b[92mINFO \x1b[0m:      "
    stream = [f"{info}[ROUND 3/3]", f"{info}Global evaluation", f"{info}\t└──> MetricRecord: {{'round': 3.0}}",
              f"{info}", f"{info}Strategy execution finished in 1.00s", f"{info}", f"{info}Final results:", f"{info}",
              f"{info}\tGlobal Arrays:", f"{info}\t\tArrayRecord (0.000 MB)", f"{info}\t",
              f"{info}\tServerApp-side Evaluate Metrics:", *[f"{info}\t{{ {r}: {{'mise': 0.1}}," for r in range(30)],
              f"{info}", f"{info}fdp-flower: completed after 3 rounds", "run 5 status"]
    shown: list[str] = []
    quiet = HideFinalResults(shown.append, "flower.log")
    for line in stream:
        quiet(line)
    quiet.close()
    dump = stream.index(f"{info}Final results:"), stream.index(f"{info}fdp-flower: completed after 3 rounds")
    assert shown == stream[:dump[0]] + ["(Flower's final-results dump, 37 lines, not repeated here: flower.log)"] \
        + stream[dump[1]:]
    assert dump[1] - dump[0] == 37


def test_a_flwr_command_that_outlives_its_timeout_is_a_timeout_error(tmp_path):
    """`python -m fdp_flower.engines.flower` (the deployment demo) reports a TimeoutError in one line; a
    subprocess.TimeoutExpired escaped it with a traceback."""
    from fdp_flower.engines.flower import Federation

    with pytest.raises(TimeoutError, match=r"^flwr --version still running after 0s$"):
        Federation(tmp_path)._flwr("--version", timeout=1e-3)
