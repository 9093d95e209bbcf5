"""Sweeps end to end: reproducible from the seed whatever the worker count, results files,
paper-layout report, CLI subcommands and their one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fdp_flower.cli import main
from fdp_flower.engines.sweep import load_sweep, run_sweep, write_sweep_results
from fdp_flower.outputs import paper_tables
from fdp_flower.outputs.report import paper_table_markdown, report

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.n_samples=1200", "algorithm.rounds=6", "federation.num_clients=4"]


def _small_table(repetitions=2, *extra):
    return load_sweep(ROOT / "scenarios" / "paper_table1.yaml",
                      SMALL + [f"sweep.repetitions={repetitions}", *extra])


def test_sweep_is_reproducible_from_its_seed_for_any_worker_count():
    spec = _small_table(2, "sweep.grid={model.loss.tau: [0.25]}")
    one = run_sweep(spec, workers=1, progress=False)
    two = run_sweep(spec, workers=2, progress=False)
    assert len(one.runs) == 21 * 2
    key = lambda r: (r["config"], r["repetition"])
    for a, b in zip(sorted(one.runs, key=key), sorted(two.runs, key=key)):
        assert a["estimate_mise"] == b["estimate_mise"] and a["seed"] == b["seed"]
    # repetitions differ (different data and noise), configurations within one differ too
    mises = np.array([r["estimate_mise"] for r in one.runs if r["config"] == 0])
    assert mises[0] != mises[1]


def test_sweep_runs_match_single_runs():
    """A sweep cell is the run of its scenario with seed = base seed + repetition."""
    from fdp_flower.engines.inprocess import run_fdp_admm

    spec = load_sweep(ROOT / "scenarios" / "paper_table4.yaml", SMALL + ["sweep.repetitions=2"])
    result = run_sweep(spec, workers=1, progress=False)
    row = next(r for r in result.runs if r["config"] == 7 and r["repetition"] == 1)
    scenario = spec.configs[7][1].model_copy(update={"seed": spec.base.seed + 1})
    ref = run_fdp_admm(scenario, with_reference=False)
    assert abs(ref.history[-1]["mise"] - row["estimate_mise"]) < 1e-10


def test_results_directory_and_paper_report(tmp_path):
    spec = _small_table()
    result = run_sweep(spec, workers=1, progress=False)
    out = write_sweep_results(result, tmp_path / "t1")
    for name in ("sweep.yaml", "runs.csv", "history.csv", "summary.json", "privacy_utility.png",
                 "convergence.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["paper_table"] == 1 and len(summary["configs"]) == 105
    reloaded = load_sweep(out / "sweep.yaml")  # the resolved file is itself a valid sweep
    assert len(reloaded.configs) == 105 and reloaded.base.data.n_samples == 1200
    text, counts = report(out)
    table_rows = [line for line in text.splitlines() if line.startswith("| ") and "eps |" not in line]
    assert len(table_rows) == 21 and counts["cells"] == 105
    assert "(1.10935)" in text and "(0.38291)" in text  # the paper's numbers beside ours
    assert counts["at_or_below"] + len(counts["above"]) == 105


def test_report_counts_against_the_paper():
    """A synthetic summary: cells below the paper are counted, cells above are listed."""
    configs = []
    for i, (eps, delta) in enumerate(paper_tables.ROWS):
        for j, tau in enumerate(paper_tables.TAUS):
            paper = paper_tables.MISE[2][i][j]
            configs.append({"tau": tau, "private": eps is not None, "eps": eps, "delta": delta,
                            "mise_mean": paper * (2.0 if (i, j) == (0, 0) else 0.5), "mise_se": 0.0})
    summary = {"configs": configs, "repetitions": 1, "estimator": "final", "paper_table": 2}
    _, counts = paper_table_markdown(summary)
    assert counts["cells"] == 105 and counts["at_or_below"] == 104
    assert counts["above"] == [{"eps": 0.1, "delta": 1.0e-6, "tau": 0.1, "ours": 2 * 9.14206,
                                "paper": 9.14206}]


def test_paper_numbers_transcribed_in_grid_order():
    # spot checks, including rows after the "Cont." page breaks of Tables 2, 5 and 6
    assert paper_tables.paper_mise(2, 0.5, 1.0e-4, 0.1) == 0.60473
    assert paper_tables.paper_mise(5, 0.5, 1.0e-3, 0.5) == 0.26164
    assert paper_tables.paper_mise(6, 0.3, 1.0e-3, 0.75) == 1.02293
    assert paper_tables.paper_mise(6, None, None, 0.5) == 0.13762
    assert all(len(rows) == 21 and all(len(r) == 5 for r in rows) for rows in paper_tables.MISE.values())


def test_cli_sweep_report_and_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(["sweep", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out), "--no-progress",
                 "--workers", "1", "--set", "data.n_samples=800", "--set", "algorithm.rounds=4",
                 "--set", "sweep={repetitions: 2, grid: {privacy.eps: [0.2, 0.8]}}"])
    assert code == 0
    assert (out / "summary.json").is_file() and (out / "privacy_utility.png").is_file()
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "privacy.eps" in text and (out / "report.md").is_file()
    assert main(["sweep", str(ROOT / "scenarios" / "quickstart.yaml"), "--set", "privacy.epsiln=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "privacy.epsiln" in err and "quickstart.yaml" in err
    assert main(["report", str(tmp_path)]) == 2
    assert "summary.json" in capsys.readouterr().err


def test_cli_run_engine_flower_refuses_bad_input_before_starting_anything(capsys, tmp_path):
    path = str(ROOT / "scenarios" / "quickstart.yaml")
    cases = [(["--set", "privacy.eps=-1"], "privacy.eps"), (["--supernodes", "0"], "--supernodes"),
             (["--resume", str(tmp_path)], "no checkpoint found")]
    for extra, word in cases:
        assert main(["run", path, "--engine", "flower", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and word in err
        assert "SuperLink" not in capsys.readouterr().out


def test_cli_run_writes_convergence_plot(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out),
                 "--set", "data.n_samples=600", "--set", "algorithm.rounds=3"]) == 0
    assert (out / "convergence.png").stat().st_size > 1000 and (out / "history.csv").is_file()


def test_inprocess_sweep_engine_equals_batched():
    path = ROOT / "scenarios" / "quickstart.yaml"
    common = ["data.n_samples=600", "algorithm.rounds=4", "sweep={repetitions: 2, grid: {privacy.eps: [0.2, 0.8]}}"]
    batched = run_sweep(load_sweep(path, common), workers=1, progress=False)
    inproc = run_sweep(load_sweep(path, [*common, "sweep.engine=inprocess"]), workers=1, progress=False)
    assert len(batched.runs) == len(inproc.runs) == 4
    for a, b in zip(batched.runs, inproc.runs):
        assert (a["config"], a["repetition"]) == (b["config"], b["repetition"])
        assert abs(a["estimate_mise"] - b["estimate_mise"]) < 1e-10
    assert np.allclose(batched.histories[0]["mise"], inproc.histories[0]["mise"], rtol=0, atol=1e-10)


def test_printed_flower_command_parses_with_flwr():
    """The run config of the printed command is what server_app.py reads (scenario, overrides)."""
    import shlex

    from flwr.common.config import parse_config_args

    from fdp_flower.algorithms.registry import any_scenario_from_run_config as scenario_from_run_config
    from fdp_flower.cli.sweep import flower_command

    args = shlex.split(flower_command("scenarios/quickstart.yaml", ["privacy.eps=0.2", "algorithm.rounds=5"]))
    config = parse_config_args([args[args.index("--run-config") + 1]])
    assert config == {"scenario": "scenarios/quickstart.yaml", "overrides": "privacy.eps=0.2; algorithm.rounds=5"}
    scenario = scenario_from_run_config(config)
    assert scenario.privacy.eps == 0.2 and scenario.algorithm.rounds == 5
