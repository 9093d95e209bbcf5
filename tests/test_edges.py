"""Bad input and faults at the edges (docs/faults.md, "Edge cases"): every case runs the CLI in
process (``cli.main(argv)``) and checks the exit code, that stderr is exactly one line naming the
problem (no traceback), and what is on disk afterwards.  Ctrl-C needs a real signal: those few
cases run a subprocess."""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import yaml

from fdp_flower import cli
from fdp_flower.outputs.checkpoint import read_checkpoint
from tests.test_faults import task_identity  # noqa: F401  (fixture: Flower messages need a run id)

#: small and fast: 2 clients x 100 curves on 20 grid points, 3 rounds, fixed basis
TINY = {"name": "tiny", "seed": 1, "data": {"kind": "paper_simulation", "n_samples": 200, "grid_points": 20},
        "federation": {"num_clients": 2}, "basis": {"kind": "fixed", "n_components": 3},
        "algorithm": {"kind": "fdp_admm", "rounds": 3}, "output": {"dir": "results", "checkpoint_every": 1}}
RESULT_FILES = {"scenario.yaml", "history.csv", "ledger.csv", "failures.csv", "summary.json", "final.npz",
                "checkpoint.npz"}


def _write(path: Path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _node_files(tmp: Path, fmt: str = "csv") -> list[str]:
    """Two node files of the paper design (20 grid points) via ``fdp-flower partition``."""
    assert cli.main(["partition", "paper", "--nodes", "2", "--out", str(tmp / "nodes"), "--n-samples", "120",
                     "--grid-points", "20", "--format", fmt]) == 0
    return [str(tmp / "nodes" / f"node-{i}.{fmt}") for i in range(2)]


def _node_scenario(tmp: Path, paths: list[str] | None) -> str:
    data = {"kind": "node_files", "grid_points": 20, **({"paths": paths} if paths else {})}
    return _write(tmp / "nodes.yaml", {**TINY, "data": data})


def _nothing_written(tmp: Path) -> None:
    assert not (tmp / "out").exists() and not (tmp / "results").exists()


def _results(out: Path) -> dict:
    assert RESULT_FILES <= {p.name for p in out.iterdir()}, sorted(p.name for p in out.iterdir())
    return json.loads((out / "summary.json").read_text())


@dataclass
class Case:
    """One edge: ``setup(tmp)`` writes inputs and returns argv; ``needle`` must be in the one error
    line (None: the command succeeds and stderr is empty); ``after(tmp, err)`` checks the disk."""

    name: str
    setup: Callable[[Path], list[str]]
    code: int
    needle: str | None
    after: Callable[[Path, str], None] = field(default=lambda tmp, err: None)
    patch: Callable[[pytest.MonkeyPatch], None] | None = None


# ------------------------------------------------------------------------- issue 17 items
def _bom_csv(tmp):
    paths = _node_files(tmp)
    bom = tmp / "nodes" / "bom-0.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + Path(paths[0]).read_bytes())  # as a spreadsheet saves it
    return ["run", _node_scenario(tmp, [str(bom), paths[1]]), "--out", str(tmp / "out"), "--no-plots"]


def _complex_npz(tmp):
    paths = _node_files(tmp, "npz")
    with np.load(paths[0]) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(paths[0], grid=arrays["grid"], curves=arrays["curves"] + 1j, response=arrays["response"])
    return ["run", _node_scenario(tmp, paths), "--out", str(tmp / "out"), "--no-plots"]


def _huge_values(tmp):
    paths = _node_files(tmp, "npz")
    with np.load(paths[0]) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["curves"][3, 5] = 1e300  # finite, but its scores' norm (used by the clip) overflows
    np.savez(paths[0], **arrays)
    return ["run", _node_scenario(tmp, paths), "--out", str(tmp / "out"), "--no-plots"]


def _full_disk(mp):
    from fdp_flower.outputs import results

    def no_space(result, out_dir):
        raise OSError(errno.ENOSPC, "No space left on device", str(out_dir))
    mp.setattr(results, "write_results", no_space)


def _rescued(tmp, err):
    rescue = Path(re.search(r"kept ledger\.csv and checkpoint\.npz in (\S+)", err).group(1))
    ledger = (rescue / "ledger.csv").read_text().splitlines()
    assert len(ledger) == 1 + 3 * 2  # header + 3 rounds x 2 clients: every release is on record
    assert read_checkpoint(rescue).round == 3  # resumable
    assert not (tmp / "out" / "summary.json").exists()


def _exceeding_ledger(mp):
    from fdp_flower.cli import privacy

    real = privacy.fdp_admm_ledger

    def doubled(scenario):  # every release twice: the calculator must say EXCEEDS and fail
        ledger, sizes = real(scenario)
        ledger.record_many(list(ledger.releases))
        return ledger, sizes
    mp.setattr(privacy, "fdp_admm_ledger", doubled)


def _run_summary(eps_note: bool):
    def check(tmp, err):
        summary = _results(tmp / "out")
        assert summary["rounds_completed"] == 2 and summary["privacy"]["private"]
        assert (summary["privacy"].get("note") is not None) == eps_note
        with np.load(tmp / "out" / "final.npz") as z:
            assert np.all(np.isfinite(z["beta_hat"]))
    return check


ISSUE_17 = [
    # 1. empty scenario file
    Case("empty-scenario", lambda t: ["run", _write(t / "e.yaml", ""), "--out", str(t / "out")], 2,
         "e.yaml: the scenario file is empty", lambda t, e: _nothing_written(t)),
    Case("comments-only-scenario", lambda t: ["run", _write(t / "c.yaml", "# nothing\n"), "--out", str(t / "out")],
         2, "c.yaml: the scenario file is empty", lambda t, e: _nothing_written(t)),
    # 2. a YAML list with --set
    Case("list-with-set", lambda t: ["run", _write(t / "l.yaml", "- a\n- b\n"), "--set", "a.b=1"], 2,
         "l.yaml: a scenario must be a mapping of sections, got a list", lambda t, e: _nothing_written(t)),
    # 3. large budgets: the accountant answers, results are written
    Case("eps-100-per-round", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "privacy.eps=100",
                                         "--set", "algorithm.rounds=2", "--out", str(t / "out"), "--no-plots"],
         0, None, _run_summary(eps_note=False)),
    Case("eps-1e300-per-round", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "privacy.eps=1e300",
                                           "--set", "algorithm.rounds=2", "--out", str(t / "out"), "--no-plots"],
         0, None, _run_summary(eps_note=True)),
    Case("eps-1e300-total", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "privacy.eps=1e300",
                                       "--set", "privacy.mode=total", "--set", "algorithm.rounds=2",
                                       "--out", str(t / "out"), "--no-plots"],
         0, None, _run_summary(eps_note=True)),
    Case("privacy-calculator-eps-100", lambda t: ["privacy", _write(t / "s.yaml", TINY), "--eps", "100",
                                                  "--out", str(t / "eps.png")],
         0, None, lambda t, e: (t / "eps.png").is_file() or pytest.fail("no plot")),
    # 4. output locations: checked before the first release; a failed write keeps the ledger
    Case("out-is-a-file", lambda t: ["run", _write(t / "s.yaml", TINY), "--out", _write(t / "f", "x")], 2,
         "exists and is not a directory", lambda t, e: (t / "f").read_text() == "x" or pytest.fail("clobbered")),
    Case("out-under-a-file", lambda t: ["run", _write(t / "s.yaml", TINY), "--out", _write(t / "f", "x") + "/sub"],
         2, "is a file, not a directory", lambda t, e: (t / "f").read_text() == "x" or pytest.fail("clobbered")),
    Case("disk-full-at-the-end", lambda t: ["run", _write(t / "s.yaml", TINY), "--out", str(t / "out"),
                                            "--no-plots"],
         1, "No space left on device", _rescued, patch=_full_disk),
    Case("sweep-out-is-a-file", lambda t: ["sweep", _write(t / "s.yaml", TINY), "--out", _write(t / "f", "x"),
                                           "--no-progress"], 2, "exists and is not a directory"),
    Case("report-out-is-a-dir", lambda t: ["report", str(t), "--out", str(t)], 2, "is a directory"),
    Case("partition-out-is-a-file", lambda t: ["partition", "paper", "--nodes", "2", "--n-samples", "20",
                                               "--out", _write(t / "f", "x")], 2, "exists and is not a directory"),
    # 5. truncated or empty checkpoint
    Case("empty-checkpoint", lambda t: ["run", "--resume", _write(t / "ck.npz", b"")], 2,
         "ck.npz: unreadable checkpoint (empty"),
    Case("truncated-checkpoint", lambda t: ["run", "--resume", _truncated_checkpoint(t)], 2,
         "ck.npz: unreadable checkpoint (truncated"),
    # 6. argument bounds
    Case("partition-grid-points-0", lambda t: ["partition", "paper", "--nodes", "2", "--out", str(t / "out"),
                                               "--grid-points", "0"], 2, "--grid-points must be >= 3",
         lambda t, e: _nothing_written(t)),
    Case("partition-grid-points-1", lambda t: ["partition", "paper", "--nodes", "2", "--out", str(t / "out"),
                                               "--grid-points", "1"], 2, "--grid-points must be >= 3",
         lambda t, e: _nothing_written(t)),
    Case("privacy-points-negative", lambda t: ["privacy", "--points", "-3", "--out", str(t / "out" / "e.png")], 2,
         "--points must be >= 2", lambda t, e: _nothing_written(t)),
    Case("sweep-workers-negative", lambda t: ["sweep", _write(t / "s.yaml", TINY), "--workers", "-3",
                                              "--out", str(t / "out")], 2, "--workers must be >= 1",
         lambda t, e: _nothing_written(t)),
    # 7. a design the machine cannot hold
    Case("memory-estimate", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "data.n_samples=10000000",
                                       "--set", "data.grid_points=10000", "--set", "basis.kind=pooled",
                                       "--out", str(t / "out")],
         2, "data.n_samples = 10000000 x data.grid_points = 10000 needs about",
         lambda t, e: not (t / "out" / "summary.json").exists() or pytest.fail("ran")),
    # 8. data files
    Case("csv-with-bom", _bom_csv, 0, None, lambda t, e: _results(t / "out")),
    Case("complex-npz", _complex_npz, 2, "node-0.npz: array 'curves' is complex",
         lambda t, e: not (t / "out" / "summary.json").exists() or pytest.fail("ran")),
    Case("projection-overflow", _huge_values, 2, "projection of curve 3 on the basis is not finite",
         lambda t, e: not (t / "out" / "summary.json").exists() or pytest.fail("ran")),
    # 9. scenario files and node data
    Case("node-files-without-paths", lambda t: ["run", _node_scenario(t, None), "--out", str(t / "out")], 2,
         "set data.paths", lambda t, e: not (t / "out" / "summary.json").exists() or pytest.fail("ran")),
    Case("node-files-too-few-paths", lambda t: ["run", _node_scenario(t, _node_files(t)[:1]),
                                                "--out", str(t / "out")], 2,
         "data.paths names 1 files for federation.num_clients = 2"),
    Case("binary-scenario", lambda t: ["run", _write(t / "b.yaml", bytes(range(256)))], 2,
         "b.yaml: not a UTF-8 text file"),
    Case("utf16-scenario", lambda t: ["run", _write(t / "u.yaml", "name: x\n".encode("utf-16"))], 2,
         "u.yaml: not a UTF-8 text file"),
    Case("duplicate-key", lambda t: ["run", _write(t / "d.yaml", "privacy:\n  eps: 1\n  eps: 2\n")], 2,
         "d.yaml: line 3 invalid YAML (duplicate key 'eps')"),
    Case("duplicate-section", lambda t: ["run", _write(t / "d.yaml", "name: a\nname: b\n")], 2,
         "duplicate key 'name'"),
    Case("utf8-bom-scenario-accepted", lambda t: ["privacy", _write(t / "s.yaml", b"\xef\xbb\xbf"
                                                                    + yaml.safe_dump(TINY).encode()),
                                                  "--no-pld", "--out", str(t / "e.png")], 0, None),
    # 11. the calculator's budget check fails the command
    Case("privacy-total-exceeds", lambda t: ["privacy", _write(t / "s.yaml", TINY), "--mode", "total", "--eps", "1",
                                             "--no-pld", "--out", str(t / "e.png")],
         1, "spends eps =", lambda t, e: (t / "e.png").is_file() or pytest.fail("no plot"), patch=_exceeding_ledger),
]


def _truncated_checkpoint(tmp: Path) -> str:
    assert cli.main(["run", _write(tmp / "s.yaml", TINY), "--out", str(tmp / "full"), "--no-plots"]) == 0
    data = (tmp / "full" / "checkpoint.npz").read_bytes()
    return _write(tmp / "ck.npz", data[: len(data) // 2])


# ------------------------------------------------------------------------- handled before issue 17
ALREADY_HANDLED = [
    Case("missing-scenario", lambda t: ["run", str(t / "nope.yaml")], 2, "nope.yaml: scenario file not found",
         lambda t, e: _nothing_written(t)),
    Case("invalid-yaml", lambda t: ["run", _write(t / "bad.yaml", "privacy: {eps: 0.5\n")], 2, "invalid YAML"),
    Case("unknown-field", lambda t: ["run", _write(t / "s.yaml", {**TINY, "privacy": {"epsiln": 1}})], 2,
         "privacy.epsiln: Extra inputs are not permitted"),
    Case("eps-zero", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "privacy.eps=0"], 2,
         "privacy.eps: Input should be greater than 0", lambda t, e: _nothing_written(t)),
    Case("more-clients-than-samples", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "data.n_samples=2",
                                                 "--set", "federation.num_clients=3"], 2, "data.n_samples"),
    Case("override-without-equals", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "privacy.eps"], 2,
         "must look like section.field=value"),
    Case("override-into-a-value", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "name.x=1"], 2,
         "'name' is not a section"),
    Case("unknown-algorithm", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "algorithm.kind=sgd"], 2,
         "algorithm"),
    Case("resume-without-checkpoint", lambda t: ["run", "--resume", str(t)], 2, "no checkpoint found"),
    Case("resume-other-scenario", lambda t: ["run", _write(t / "s2.yaml", {**TINY, "seed": 2}), "--resume",
                                             _truncated_checkpoint(t).replace("ck.npz", "full")], 2,
         "the checkpoint belongs to another scenario"),
    Case("run-without-scenario", lambda t: ["run"], 2, "give a scenario file or --resume"),
    Case("node-file-missing", lambda t: ["run", _node_scenario(t, [str(t / "a.csv"), str(t / "b.csv")])], 2,
         "a.csv: data file not found"),
    Case("node-file-nan", lambda t: ["run", _node_scenario(t, _nan_csv(t))], 2, "contain NaN or infinite values"),
    Case("node-file-wrong-grid", lambda t: ["run", _node_scenario(t, _node_files(t)), "--set",
                                            "data.grid_points=25"], 2, "grid points, but the scenario's grid has 25"),
    Case("sweep-typo-in-case", lambda t: ["sweep", _write(t / "sw.yaml", {**TINY, "sweep": {"cases": [
        {"privacy.epss": 1}]}}), "--out", str(t / "out")], 2, "sweep privacy.epss=1"),
    Case("report-not-a-results-dir", lambda t: ["report", str(t)], 2, "no summary.json"),
    Case("privacy-non-fdp-admm", lambda t: ["privacy", "--set", "basis.kind=explained_variance"], 2, "basis"),
]


def _nan_csv(tmp: Path) -> list[str]:
    paths = _node_files(tmp)
    lines = Path(paths[0]).read_text().splitlines()
    lines[1] = ",".join(["nan", *lines[1].split(",")[1:]])
    Path(paths[0]).write_text("\n".join(lines) + "\n")
    return paths


# ------------------------------------------------------------------------- issue 30: nothing overwritten
def _finished_run(tmp: Path, out: str = "out") -> None:
    """A finished run of TINY in ``tmp/out``; a copy of its summary and ledger kept to compare with."""
    assert cli.main(["run", _write(tmp / "first.yaml", TINY), "--out", str(tmp / out), "--no-plots"]) == 0
    for name in ("summary.json", "ledger.csv"):
        (tmp / f"first-{name}").write_bytes((tmp / out / name).read_bytes())


def _first_run_intact(tmp: Path, err: str = "") -> None:
    for name in ("summary.json", "ledger.csv"):
        assert (tmp / "out" / name).read_bytes() == (tmp / f"first-{name}").read_bytes(), f"{name} overwritten"


def _other_run_over(tmp: Path, *extra: str) -> list[str]:
    _finished_run(tmp)
    return ["run", _write(tmp / "other.yaml", {**TINY, "name": "other", "seed": 2}), "--out", str(tmp / "out"),
            "--no-plots", *extra]


_LOCKS: list[int] = []


def _locked_by_another(tmp: Path) -> list[str]:
    """The lock of ``out`` held (flock) through another open file, as a second process would hold it."""
    import fcntl

    (tmp / "out").mkdir()
    fd = os.open(tmp / "out" / ".fdp-flower.lock", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"424242\n")
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _LOCKS.append(fd)
    return ["run", _write(tmp / "s.yaml", TINY), "--out", str(tmp / "out"), "--no-plots"]


def _unlock_and_check_nothing_written(tmp: Path, err: str) -> None:
    os.close(_LOCKS.pop())
    assert [p.name for p in (tmp / "out").iterdir()] == [".fdp-flower.lock"]


def _sweep_over_sweep(tmp: Path) -> list[str]:
    sweep = _write(tmp / "sw.yaml", {**TINY, "sweep": {"cases": [{"privacy.eps": 1.0}]}})
    assert cli.main(["sweep", sweep, "--out", str(tmp / "out"), "--no-progress", "--no-plots"]) == 0
    (tmp / "first-runs.csv").write_bytes((tmp / "out" / "runs.csv").read_bytes())
    return ["sweep", _write(tmp / "sw2.yaml", {**TINY, "sweep": {"cases": [{"privacy.eps": 2.0}]}}),
            "--out", str(tmp / "out"), "--no-progress", "--no-plots"]


ISSUE_30 = [
    # a results directory holding another run: refused before training, the first run's files untouched
    Case("run-over-another-run", _other_run_over, 2, "holds another run (summary.json, ledger.csv",
         _first_run_intact),
    Case("p2p-run-over-another-run", lambda t: (_finished_run(t), [
        "run", str(Path(__file__).resolve().parents[1] / "scenarios" / "p2p_lad_zcdp_nfl.yaml"), "--set",
        "algorithm.rounds=2", "--out", str(t / "out"), "--no-plots"])[1], 2, "holds another run", _first_run_intact),
    # a second writer while the first still writes: the lock refuses it, nothing is written
    Case("run-while-another-writes", _locked_by_another, 2, "another run (pid 424242) is writing it",
         _unlock_and_check_nothing_written),
    Case("sweep-over-another-sweep", _sweep_over_sweep, 2, "sweep directory",
         lambda t, e: ((t / "out" / "runs.csv").read_bytes() == (t / "first-runs.csv").read_bytes()
                       or pytest.fail("runs.csv overwritten"))),
    # bad inputs of issue 30 (the CLI)
    Case("audit-alpha-2", lambda t: ["audit", _write(t / "s.yaml", TINY), "--alpha", "2"], 2,
         "audit: --alpha must be in (0, 1), got 2", lambda t, e: _nothing_written(t)),
    Case("seed-true", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "seed=true", "--out", str(t / "out")],
         2, "seed: Input should be a valid integer", lambda t, e: _nothing_written(t)),
    Case("name-outside-output-dir", lambda t: ["run", _write(t / "s.yaml", TINY), "--set", "name=../../x"], 2,
         "name: Value error, must be one path component", lambda t, e: (
             not (t / "x").exists() and not (t.parent / "x").exists() and not (t / "results").exists())
         or pytest.fail("written")),
    Case("re-partition-into-node-files", lambda t: (_node_files(t), [
        "partition", "paper", "--nodes", "3", "--n-samples", "60", "--grid-points", "20",
        "--out", str(t / "nodes")])[1], 2, "already holds node files (node-0.csv, node-1.csv)",
         lambda t, e: (sorted(p.name for p in (t / "nodes").iterdir()) == ["node-0.csv", "node-1.csv"]
                       or pytest.fail("re-partitioned"))),
    Case("fpca-pre-basis-larger-than-grid", lambda t: ["run", _write(t / "s.yaml", TINY), "--set",
                                                       "basis.kind=federated_dp", "--set", "basis.n_components=3",
                                                       "--set", "basis.eps=1", "--out", str(t / "out")], 2,
         "basis.pre_basis_size = 30 exceeds the grid's 20 points: the federated DP-FPCA expands every curve",
         lambda t, e: not (t / "out" / "summary.json").exists() or pytest.fail("ran")),
    # --resume continues the run in its own directory: allowed
    Case("resume-in-own-directory", lambda t: (_finished_run(t), ["run", "--resume", str(t / "out"),
                                                                   "--no-plots"])[1], 0, None),
]


@pytest.mark.parametrize("case", ISSUE_17 + ALREADY_HANDLED + ISSUE_30, ids=lambda c: c.name)
def test_edge(case: Case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = case.setup(tmp_path)
    capsys.readouterr()  # what setting up printed
    if case.patch is not None:
        case.patch(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:  # a warning would be a stderr line too
        warnings.simplefilter("always")
        code = cli.main(argv)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    lines += [f"warning: {w.message} ({w.filename})" for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert "Traceback" not in err, err
    if case.needle is None:
        assert lines == [], err
    else:
        assert len(lines) == 1, err
        assert case.needle in lines[0], lines[0]
    assert code == case.code, (code, err, out[-500:])
    case.after(tmp_path, err)


def test_deployment_data_errors_name_the_partition(tmp_path, task_identity):
    """A node whose file is missing says which partition it is (the server knows it by node id)."""
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.clients.node_phase import handle_node_setup_query

    sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 20}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": 3}})
    ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 1, "num-partitions": 2,
                                                    "data-path": str(tmp_path / "gone.npz")},
                  state=RecordDict(), run_config={})
    query = Message(RecordDict({"config": ConfigRecord({"phase": "node-setup"})}), dst_node_id=5,
                    message_type=MessageType.QUERY)
    with pytest.raises(ValueError, match=r"^partition 1: .*gone\.npz: data file not found$"):
        handle_node_setup_query(query, ctx, sc)


def test_accountant_is_bounded_and_falls_back_with_a_note():
    """PLD discretization grows with the composition's mu (bounded size); beyond PLD_MAX_MU the
    exact analytic eps of the composed Gaussian is reported, flagged by a note."""
    from fdp_flower.privacy import GaussianRelease, pld_epsilon
    from fdp_flower.privacy.calibration import PLD_DISCRETIZATION, analytic_gaussian_epsilon, pld_discretization
    from fdp_flower.privacy.ledger import pld_fallback_note

    assert pld_discretization(1.0) == pld_discretization(2.0) == PLD_DISCRETIZATION  # paper budgets unchanged
    assert pld_discretization(35.0) > PLD_DISCRETIZATION and pld_discretization(1e5) is None
    delta = 1e-5
    for z, n in ((0.05, 3), (1e-3, 30), (1e-300, 3)):  # mu = 35, 5.5e3, 1.7e300
        rel = [GaussianRelease(0, r, 1.0, z) for r in range(n)]
        mu = np.sqrt(n) / z
        exact = analytic_gaussian_epsilon(mu, delta)
        eps = pld_epsilon(rel, delta)
        # the PLD is an upper bound within its discretization; the fallback is the exact value
        assert exact <= eps <= exact * (1 + 2e-3) or (not np.isfinite(exact) and eps == exact)
        assert (pld_fallback_note(rel) is not None) == (pld_discretization(mu) is None)


# ------------------------------------------------------------------------- Ctrl-C (real signals)
def _cli_process(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = "import sys; from fdp_flower.cli import main; sys.exit(main())"
    # a shell that starts the suite in the background ignores SIGINT, and its children inherit that (Python
    # then installs no KeyboardInterrupt handler): restore the default so the signal reaches the CLI
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))


def _interrupt_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120.0) -> tuple[str, str]:
    start = time.monotonic()
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - start < timeout, "never got ready"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=60)


SWEEP = {**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 4},
         "sweep": {"repetitions": 10, "engine": "inprocess", "grid": {"privacy.eps": [0.5, 1.0]}}}


@pytest.mark.slow
def test_ctrl_c_during_a_sweep_keeps_finished_runs_and_resume_completes_it(tmp_path, monkeypatch, capsys):
    _write(tmp_path / "sw.yaml", SWEEP)
    partial = tmp_path / "out" / "runs.partial.jsonl"
    proc = _cli_process(["sweep", "sw.yaml", "--out", "out", "--no-progress", "--no-plots", "--workers", "2"],
                        tmp_path)
    _out, err = _interrupt_when(proc, lambda: partial.is_file() and len(partial.read_text().splitlines()) >= 2)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130 and len(lines) == 1 and "Traceback" not in err, err
    assert "runs kept" in lines[0] and "--resume" in lines[0]
    kept = len(partial.read_text().splitlines())
    assert 2 <= kept < 20 and not (tmp_path / "out" / "runs.csv").exists()

    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", "sw.yaml", "--out", "out", "--no-progress", "--no-plots", "--resume"]) == 0
    assert cli.main(["sweep", "sw.yaml", "--out", "fresh", "--no-progress", "--no-plots"]) == 0
    capsys.readouterr()
    resumed = (tmp_path / "out" / "runs.csv").read_text()
    assert resumed == (tmp_path / "fresh" / "runs.csv").read_text()  # the same 20 runs, same numbers
    assert len(resumed.splitlines()) == 21 and not partial.exists()
    # a resume of another sweep is refused
    assert cli.main(["sweep", "sw.yaml", "--out", "out", "--set", "sweep.repetitions=3", "--resume"]) == 2
    assert "another sweep" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_during_a_run_prints_one_line_and_keeps_the_checkpoint(tmp_path):
    _write(tmp_path / "s.yaml", {**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 100000}})
    checkpoint = tmp_path / "out" / "checkpoint.npz"
    proc = _cli_process(["run", "s.yaml", "--out", "out", "--no-plots"], tmp_path)
    _out, err = _interrupt_when(proc, checkpoint.is_file)
    # the one line of the interrupt (the run's own one-line warnings before it: 100000 per-round rounds)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert proc.returncode == 130 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("interrupted (Ctrl-C)")
    assert read_checkpoint(checkpoint).round >= 1


# ------------------------------------------------------------------------- issue 30: the Python API's out=
def _api_data():
    from fdp_flower.functional import design

    grid = design.default_grid(20)
    return design.simulate_slice(3, 0, 300, tau=0.5, grid=grid), grid


API_OUT_CASES = [
    ("out-is-a-file", lambda t: _write(t / "f", "x"), r"^out: results directory .*f: exists and is not a directory$",
     lambda t: (t / "f").read_text() == "x"),
    ("out-in-proc", lambda t: "/proc/fdp-flower-x", r"^out: results directory /proc/fdp-flower-x: not writable",
     lambda t: not Path("/proc/fdp-flower-x").exists()),
]


@pytest.mark.parametrize("name,out,match,after", API_OUT_CASES, ids=[c[0] for c in API_OUT_CASES])
def test_api_out_is_checked_before_training(name, out, match, after, tmp_path, monkeypatch):
    """``fit(..., out=...)`` refuses an output it cannot write in one line before training (the CLI's check)."""
    import fdp_flower
    from fdp_flower.engines import inprocess

    def no_training(*a, **k):
        raise AssertionError("trained before checking out=")
    monkeypatch.setattr(inprocess, "run_fdp_admm", no_training)
    data, grid = _api_data()
    with pytest.raises(ValueError, match=match):
        fdp_flower.fit(data.curves, data.response, grid=grid, rounds=3, reference=False, out=out(tmp_path))
    assert after(tmp_path)


def test_api_fit_twice_into_one_out_keeps_the_first(tmp_path):
    """The second fit into a directory holding a fit is refused before training; the first's record stays."""
    import fdp_flower

    data, grid = _api_data()
    fdp_flower.fit(data.curves, data.response, grid=grid, rounds=3, reference=False, out=tmp_path / "fit")
    first = {n: (tmp_path / "fit" / n).read_bytes() for n in ("summary.json", "ledger.csv")}
    with pytest.raises(ValueError, match=r"fit: holds another run \(summary.json, ledger.csv.*choose another out="):
        fdp_flower.fit(data.curves, data.response, grid=grid, rounds=5, eps=2.0, reference=False,
                       out=tmp_path / "fit")
    assert {n: (tmp_path / "fit" / n).read_bytes() for n in first} == first
    for fit in (fdp_flower.fit_p2p, fdp_flower.fit_gradient):  # the tabular fits check it the same way
        with pytest.raises(ValueError, match="holds another run"):
            fit(data.curves[:, :3], np.sign(data.response), loss="logistic", rounds=2, out=tmp_path / "fit")
    assert {n: (tmp_path / "fit" / n).read_bytes() for n in first} == first


def test_two_runs_into_one_out_at_once_one_is_refused(tmp_path):
    """Two ``fdp-flower run`` processes with the same --out at once: exactly one writes it, the other is refused
    in one line (by the lock while the first runs, or as another run's directory once it finished)."""
    scenario = _write(tmp_path / "s.yaml", {**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 30}})
    procs = [_cli_process(["run", scenario, "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert len(refused.strip().splitlines()) == 1 and ("is writing it" in refused or "holds another run" in refused)
    _results(tmp_path / "out")


def test_a_run_without_out_goes_beside_an_earlier_run_of_its_name(tmp_path, monkeypatch, capsys):
    """Without --out, a second run of one scenario goes to ``results/<name>-2`` and says so; the first stays."""
    monkeypatch.chdir(tmp_path)
    scenario = _write(tmp_path / "s.yaml", TINY)
    assert cli.main(["run", scenario, "--no-plots"]) == 0
    first = (tmp_path / "results" / "tiny" / "summary.json").read_bytes()
    capsys.readouterr()
    assert cli.main(["run", scenario, "--set", "privacy.eps=2", "--no-plots"]) == 0
    out, err = capsys.readouterr()
    assert f"results{os.sep}tiny holds an earlier run; this one goes beside it: results{os.sep}tiny-2" in out, out
    assert (tmp_path / "results" / "tiny" / "summary.json").read_bytes() == first
    assert json.loads((tmp_path / "results" / "tiny-2" / "summary.json").read_text())["privacy"]["private"]


# ------------------------------------------------------------------------- issue 30: load_results checks the ledger
def _cut_ledger(out: Path) -> None:
    lines = (out / "ledger.csv").read_text().splitlines(keepends=True)
    (out / "ledger.csv").write_text("".join(lines[: len(lines) - 2]))  # cut at a line boundary


LEDGER_CASES = [
    ("ledger-cut-at-a-line", _cut_ledger, r"ledger.csv does not match summary.json \(client 0: 2 releases on "
                                          r"record, the summary counts 3\)"),
    ("ledger-removed", lambda out: (out / "ledger.csv").unlink(), r"no ledger.csv \(the record of every release\)"),
    ("ledger-emptied", lambda out: (out / "ledger.csv").write_text("client,round,sensitivity,sigma\n"),
     r"does not match summary.json \(the summary says private, the ledger holds 0 releases\)"),
]


@pytest.mark.parametrize("name,damage,match", LEDGER_CASES, ids=[c[0] for c in LEDGER_CASES])
def test_load_results_refuses_a_ledger_that_does_not_match_the_summary(name, damage, match, tmp_path):
    """A cut, removed or emptied ledger.csv is one error line, never a smaller eps or "not private"."""
    import fdp_flower

    assert cli.main(["run", _write(tmp_path / "s.yaml", TINY), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    model = fdp_flower.load_results(tmp_path / "out")  # intact: loads, the summary's eps
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert model.privacy.eps == pytest.approx(summary["privacy"]["eps"], rel=1e-9)
    damage(tmp_path / "out")
    with pytest.raises(ValueError, match=match) as caught:
        fdp_flower.load_results(tmp_path / "out")
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------- issue 30: bad inputs of the Python API
def _fit(**kwargs):
    import fdp_flower

    data, grid = _api_data()
    args = dict(grid=grid, rounds=3, reference=False)
    y = kwargs.pop("y", data.response)
    return fdp_flower.fit(data.curves, y, **{**args, **kwargs})



API_INPUT_CASES = [
    # (name, call, error regex or None for success, check of the result)
    ("constant-response-with-reference", lambda: _fit(y=np.full(300, 5.0), reference=True), None,
     lambda m: np.isfinite(m.history["objective_gap"]).all()),
    ("response-times-1e300", lambda: _fit(y=_api_data()[0].response * 1e300, reference=True),
     r"^HiGHS failed on the exact reference LP \(.*\); the data reach .*e\+30\d in absolute value: rescale the "
     r"response \(e\.g\. divide it by its standard deviation\) or leave the reference out \(reference=False\)$", None),
    ("nan-client-ids", lambda: _fit(client_ids=np.r_[np.zeros(150), np.ones(148), np.nan, np.nan]),
     r"^client_ids: 2 rows have no client \(None or NaN; rows 298, 299\)", None),
    ("none-in-client-ids", lambda: _fit(client_ids=[0] * 150 + [1] * 149 + [None]),
     r"^client_ids: 1 rows have no client", None),
    ("mixed-int-str-client-ids", lambda: _fit(client_ids=[0] * 150 + ["a"] * 150),
     r"^client_ids: labels of mixed types \(number, str\)", None),
    ("none-in-client-column", lambda: __import__("fdp_flower").fit(_frame_with_site([0] * 150 + ["b"] * 149 + [None]),
                                                                  client_column="site", rounds=3, reference=False),
     r"^client column 'site': 1 rows have no client", None),
    ("numpy-float32-eps", lambda: _fit(eps=np.float32(1.0), rounds=np.int64(3)), None,
     lambda m: m.privacy.eps == pytest.approx(1.0, rel=1e-4)),
    ("fpca-on-a-20-point-grid", lambda: _fit(basis="fpca", n_components=4), None,
     lambda m: m.scenario.basis.pre_basis_size == 20),
]


def _frame_with_site(site):
    import pandas as pd

    data, grid = _api_data()
    frame = pd.DataFrame(data.curves, columns=[f"t={t}" for t in grid])
    frame["response"] = data.response
    frame["site"] = site
    return frame


@pytest.mark.parametrize("name,call,match,check", API_INPUT_CASES, ids=[c[0] for c in API_INPUT_CASES])
def test_api_bad_inputs_are_one_line_or_handled(name, call, match, check, tmp_path, monkeypatch):
    """Each bad input of issue 30 is a one-line ValueError naming the argument, or handled (the fit runs)."""
    monkeypatch.chdir(tmp_path)
    if match is None:
        assert check(call())
    else:
        with pytest.raises(ValueError, match=match) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no out=: nothing written


def test_a_pooled_basis_is_named_where_eps_is_printed(tmp_path, capsys):
    """A noise-free pooled basis is not covered by the eps: the privacy line printed with eps says so, and
    summary.json carries it (issue 30); the flagship scenario (scenarios/flwr_default.yaml) estimates its basis
    privately (federated_dp, charged), so its eps covers everything it released."""
    assert yaml.safe_load((Path(__file__).resolve().parents[1] / "scenarios" / "flwr_default.yaml").read_text()
                          )["basis"]["kind"] == "federated_dp"
    scenario = _write(tmp_path / "s.yaml", {**TINY, "basis": {"kind": "pooled", "n_components": 3}})
    assert cli.main(["run", scenario, "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("privacy spent"))
    assert "eps = " in line and "NOT covered: the basis (basis.kind pooled) is an FPCA of every site's curves " \
                                "without noise" in line, line
    assert "basis.kind pooled" in json.loads((tmp_path / "out" / "summary.json").read_text())["privacy"]["caveat"]
    assert cli.main(["run", _write(tmp_path / "f.yaml", TINY), "--out", str(tmp_path / "fixed"), "--no-plots"]) == 0
    assert "NOT covered" not in capsys.readouterr().out  # a fixed basis: eps covers the whole release


# ------------------------------------------------------------------------- issue 30: sites that cannot be confused
def _setup_query(tmp: Path, data_path: str, run_id: int = 7, **policy):
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.clients.node_phase import handle_node_setup_query

    sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 20}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": 3}})
    ctx = Context(run_id=run_id, node_id=5, state=RecordDict(), run_config={},
                  node_config={"partition-id": 0, "num-partitions": 2, "data-path": data_path,
                               "ledger-dir": str(tmp / "ledger"), **policy})
    query = Message(RecordDict({"config": ConfigRecord({"phase": "node-setup"})}), dst_node_id=5,
                    message_type=MessageType.QUERY)
    return handle_node_setup_query(query, ctx, sc)


def test_a_site_whose_data_file_changes_during_a_run_is_refused(tmp_path, task_identity):
    """The data file a site used first in a run is fingerprinted (beside its ledger); a restart with another file,
    or the same file changed, is refused for the rest of that run; a new run starts afresh."""
    first, other = _node_files(tmp_path)
    assert _setup_query(tmp_path, first).content["metrics"]["num-examples"] == 60
    assert _setup_query(tmp_path, first).content["metrics"]["num-examples"] == 60  # the same file: accepted
    with pytest.raises(ValueError, match=r"^partition 0: the data file changed during run 7 \(first used: .*node-0"
                                         r"\.csv, 60 records, sha256 [0-9a-f]{12}; now: .*node-1\.csv"):
        _setup_query(tmp_path, other)  # a SuperNode restarted with another file
    Path(first).write_text(Path(first).read_text() + Path(other).read_text().split("\n", 1)[1])  # rows added
    with pytest.raises(ValueError, match="the data file changed during run 7"):
        _setup_query(tmp_path, first)  # the first file, edited
    assert _setup_query(tmp_path, other, run_id=8).content["metrics"]["num-examples"] == 60  # another run
    assert sorted(p.name for p in (tmp_path / "ledger" / "data-fingerprints").iterdir()) == [
        "run-7-partition-0.json", "run-8-partition-0.json"]


def test_a_site_below_its_minimum_of_records_warns_or_refuses(tmp_path, task_identity, caplog):
    """A site's file of fewer records than its policy's min-records (default 20) warns in the site's log; with
    refuse-below-min-records it refuses in one line."""
    import logging

    assert cli.main(["partition", "paper", "--nodes", "2", "--out", str(tmp_path / "small"), "--n-samples", "10",
                     "--grid-points", "20", "--format", "csv"]) == 0
    small = str(tmp_path / "small" / "node-0.csv")
    with caplog.at_level(logging.WARNING, logger="fdp_flower.site"):
        _setup_query(tmp_path, small)
    assert [r.getMessage() for r in caplog.records if r.name == "fdp_flower.site"] == [
        "partition 0: the data file holds 5 records, fewer than min-records = 20: each release is calibrated to one "
        "record, so this site's releases are mostly noise"]
    with pytest.raises(ValueError, match=r"^partition 0: the data file holds 5 records, fewer than min-records = 4"
                                         r"0: .*; refused \(refuse-below-min-records\)$"):
        _setup_query(tmp_path, small, run_id=9, **{"min-records": 40, "refuse-below-min-records": True})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fdp_flower.site"):
        _setup_query(tmp_path, small, run_id=10, **{"min-records": 5})
    assert not [r for r in caplog.records if r.name == "fdp_flower.site"]


def test_a_run_that_cannot_finish_within_a_site_budget_is_refused_at_setup(tmp_path, task_identity):
    """The whole run's planned releases, composed with the site's ledger, are checked against its max-eps at setup:
    the site's setup reply says why it refuses the run and the server stops there in one line, before any release
    (nothing recorded); a budget that holds the run passes."""
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.clients.node_phase import planned_releases
    from fdp_flower.privacy.site_policy import SitePolicy, SiteRelease, site_epsilon
    from fdp_flower.strategies.node_phase import SetupError, check_setup_replies, unpack_setup_reply

    paths = _node_files(tmp_path)
    sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 20}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": 3}})
    planned = planned_releases(sc, 0)
    assert len(planned) == sc.algorithm.rounds
    need = site_epsilon([SiteRelease(7, r, "os_entropy") for r in planned], SitePolicy())

    def replies(max_eps, run_id):
        out = []
        for i, path in enumerate(paths):
            reply = _setup_query(tmp_path / f"site{i}", path, run_id=run_id, **{"max-eps": max_eps})
            _node, metrics, arrays, reason = unpack_setup_reply(reply)
            metrics["partition-id"] = i
            out.append((i + 1, metrics, arrays, reason))
        return out

    with pytest.raises(SetupError, match=rf"^client 0: site refuses the run at setup: its {len(planned)} planned "
                                         rf"releases would bring the site's eps to {need:.6g} > max-eps "
                                         rf"{need * 0.9:g} .*\(spent so far 0\); nothing was released; client 1: "):
        check_setup_replies(sc, replies(need * 0.9, 7))
    for i in range(2):  # nothing released
        ledger = tmp_path / f"site{i}" / "ledger" / "site-ledger.jsonl"
        assert not ledger.exists() or all(json.loads(line)["kind"] != "release"
                                          for line in ledger.read_text().splitlines())
    assert sorted(check_setup_replies(sc, replies(need * 1.01, 8))) == [0, 1]  # fits: set up


def test_one_grid_tolerance_in_process_and_in_deployment(tmp_path, task_identity):
    """A site's grid with t0 = 1e-12 instead of 0 is accepted in process (check_grid, GRID_RTOL) and so in the
    deployment's setup phase (it was refused there as a mismatch: the digest rounds to 9 digits); a grid off by
    1e-3 is refused by both."""
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.algorithms.fdp_admm.plan import grid_of
    from fdp_flower.functional.node_files import NodeDataError, check_grid
    from fdp_flower.strategies.node_phase import SetupError, check_setup_replies

    paths = _node_files(tmp_path, "npz")
    sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 20}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": 3}})

    def shifted(path, by):
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["grid"] = arrays["grid"].copy()
        arrays["grid"][0] += by
        np.savez(path, **arrays)
        return arrays["grid"]

    def replies():
        out = []
        for i, path in enumerate(paths):
            reply = _setup_query(tmp_path, path, run_id=20 + len(list(tmp_path.glob("ledger/data-fingerprints/*"))))
            metrics = dict(reply.content["metrics"])
            metrics["partition-id"] = i
            out.append((i + 1, metrics, {}, None))
        return out

    check_grid(shifted(paths[0], 1e-12), grid_of(sc), "in process")  # accepted in process
    setup = replies()
    assert setup[0][1]["grid-digest"] != setup[1][1]["grid-digest"]  # the digests differ ...
    assert sorted(check_setup_replies(sc, setup)) == [0, 1]  # ... and the deployment accepts it too
    far = shifted(paths[0], 1e-3)
    with pytest.raises(NodeDataError, match="grid differs from the scenario's grid"):
        check_grid(far, grid_of(sc), "in process")
    with pytest.raises(SetupError, match="grid mismatch between nodes"):
        check_setup_replies(sc, replies())


def test_a_run_beside_an_earlier_one_draws_its_plot_in_its_own_directory(tmp_path, capsys, monkeypatch):
    """Without --out a second run of a scenario goes beside the first (``<name>-2``); its convergence.png goes
    there too, and the first run's directory is left as it was."""
    monkeypatch.chdir(tmp_path)
    scenario = _write(tmp_path / "s.yaml", {**TINY, "output": {"dir": str(tmp_path / "results")}})
    assert cli.main(["run", scenario]) == 0
    first = tmp_path / "results" / "tiny"
    before = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    capsys.readouterr()
    assert cli.main(["run", scenario]) == 0
    printed = capsys.readouterr().out
    (second,) = [p for p in (tmp_path / "results").iterdir() if p != first]
    assert f"plot: {second / 'convergence.png'}" in printed and (second / "convergence.png").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == before
