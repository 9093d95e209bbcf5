"""``fdp-flower sweep`` and ``fdp-flower report`` (registered by :mod:`fdp_flower.cli`)."""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def flower_command(scenario_path: str, overrides: list[str]) -> str:
    """The ``flwr run`` command that runs this scenario on Flower (server_app.py reads the
    same file and overrides)."""
    config = f"scenario='{scenario_path}'"
    if overrides:
        config += " overrides='" + "; ".join(overrides) + "'"
    if '"' in config:
        return f"flwr run . --stream --run-config {shlex.quote(config)}"
    return f'flwr run . --stream --run-config "{config}"'


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fdp_flower.sweep import load_sweep, run_sweep, write_sweep_results

    spec = load_sweep(args.sweep, args.set)
    runs = len(spec.configs) * spec.sweep.repetitions
    print(f"{spec.source}: {len(spec.configs)} configurations x {spec.sweep.repetitions} repetitions = "
          f"{runs} runs ({spec.sweep.engine} engine)", flush=True)
    if args.dry_run:
        for i, (labels, _) in enumerate(spec.configs):
            print(f"  config {i}: " + (", ".join(f"{k}={v}" for k, v in labels.items()) or "base"))
        return 0
    result = run_sweep(spec, workers=args.workers, progress=not args.no_progress)
    out = write_sweep_results(result, args.out or f"{spec.base.output.dir}/{spec.base.name}",
                              plots=not args.no_plots)
    print(f"{runs} runs in {result.elapsed_seconds:.1f} s with {result.workers} worker(s); results: {out}")
    if spec.sweep.paper_table:
        from fdp_flower.report import report

        text, counts = report(out)
        (out / "report.md").write_text(text)
        print(f"paper Table {spec.sweep.paper_table}: {counts['at_or_below']} of {counts['cells']} cells at or "
              f"below the paper's MISE; report: {out / 'report.md'}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from fdp_flower.report import report

    text, _ = report(args.results)
    out = Path(args.out) if args.out else Path(args.results) / "report.md"
    out.write_text(text)
    print(text)
    print(f"written to {out}")
    return 0


def _register_commands(sub) -> None:
    sweep = sub.add_parser("sweep", help="run a sweep file (scenario + sweep: grid, cases, repetitions)")
    sweep.add_argument("sweep", help="sweep YAML file (a scenario file with a `sweep:` section)")
    sweep.add_argument("--set", action="append", default=[], metavar="A.B=VALUE",
                       help="override a field of the base scenario or of the sweep (sweep.repetitions=5)")
    sweep.add_argument("--workers", type=int, help="worker processes (default: sweep.workers or the CPU count)")
    sweep.add_argument("--out", help="results directory (default: <output.dir>/<name>)")
    sweep.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--dry-run", action="store_true", help="list the configurations and exit")
    sweep.set_defaults(func=_cmd_sweep)
    rep = sub.add_parser("report", help="Markdown tables of a sweep's results (paper layout for paper tables)")
    rep.add_argument("results", help="results directory written by `fdp-flower sweep`")
    rep.add_argument("--out", help="Markdown file (default: <results>/report.md)")
    rep.set_defaults(func=_cmd_report)


def extend_run(sub) -> None:
    """Add ``--engine`` and plots to ``fdp-flower run`` (its parser lives in cli.py).

    ``--engine inprocess`` (default) runs as before and then draws ``convergence.png``;
    ``--engine flower`` does not start anything: it prints the ``flwr run`` command that
    runs the same scenario and overrides on Flower (server_app.py parses the same file).
    """
    run = sub.choices.get("run")
    if run is None:
        return
    run.add_argument("--engine", choices=("inprocess", "flower"), default="inprocess",
                     help="inprocess: run here; flower: print the `flwr run` command for this scenario")
    run.add_argument("--no-plots", action="store_true", help="skip convergence.png")
    inner = run.get_default("func")

    def run_with_engine(args: argparse.Namespace) -> int:
        from fdp_flower.scenario import Scenario
        from fdp_flower.scenario_families import load_any_scenario as load_scenario

        if args.engine == "flower":
            if not args.scenario:
                raise ValueError("--engine flower needs a scenario file")
            load_scenario(args.scenario, args.set)  # fail here, not inside the ServerApp
            print("# run this scenario on Flower (simulation federation with num-supernodes = "
                  "federation.num_clients); this command is not started by fdp-flower:")
            print(flower_command(args.scenario, args.set))
            print("# `flwr run --stream` exits 0 even if the ServerApp fails: check "
                  "`flwr ls --run-id <id> --format json` for the run's status")
            return 0
        code = inner(args)
        if code == 0 and not args.no_plots and args.scenario:
            from fdp_flower.plots import plot_run_history
            from fdp_flower.results import read_csv

            scenario = load_scenario(args.scenario, args.set)
            out = Path(args.out or f"{scenario.output.dir}/{scenario.name}")
            if isinstance(scenario, Scenario) and (out / "history.csv").is_file():
                path = plot_run_history(read_csv(out / "history.csv"), out / "convergence.png", scenario.name)
                print(f"plot: {path}")
        return code

    run.set_defaults(func=run_with_engine)


def register(sub) -> None:
    """The hook :func:`fdp_flower.cli.build_parser` calls: sweep, report, run --engine."""
    _register_commands(sub)
    extend_run(sub)
