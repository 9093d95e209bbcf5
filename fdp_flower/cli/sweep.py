"""``fdp-flower sweep`` and ``fdp-flower report`` (registered by :mod:`fdp_flower.cli`)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from fdp_flower.config.base import ScenarioError
from fdp_flower.outputs.layout import ResultsDir


def flower_command(scenario_path: str, overrides: list[str], resume: str | None = None,
                   typed: dict | None = None, results: Path | None = None, supernodes: int | None = None) -> str:
    """The ``flwr run`` command that runs this scenario on Flower (server_app.py reads the
    same file, overrides, typed keys and checkpoint to resume from)."""
    config = f"scenario='{scenario_path}'"
    if overrides:
        config += " overrides='" + "; ".join(overrides) + "'"
    for key, value in (typed or {}).items():
        config += f" {key}={value!r}" if isinstance(value, str) else f" {key}={value}"
    if results is not None:
        config += f" results-dir='{results}'"
    if resume:
        config += f" resume='{resume}'"
    quoted = shlex.quote(config) if '"' in config else f'"{config}"'
    federation = f' --federation-config "num-supernodes={supernodes}"' if supernodes else ""
    return f"flwr run . --stream --run-config {quoted}{federation}"


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fdp_flower.engines.sweep import load_sweep, run_sweep, write_sweep_results
    from fdp_flower.outputs.results import beside_other_runs, claim_output_dir

    if args.workers is not None and args.workers < 1:
        raise ScenarioError(f"sweep: --workers must be >= 1, got {args.workers}")
    spec = load_sweep(args.sweep, args.set)
    runs = len(spec.configs) * spec.sweep.repetitions
    print(f"{spec.source}: {len(spec.configs)} configurations x {spec.sweep.repetitions} repetitions = "
          f"{runs} runs ({spec.sweep.engine} engine)", flush=True)
    if args.dry_run:
        for i, (labels, _) in enumerate(spec.configs):
            print(f"  config {i}: " + (", ".join(f"{k}={v}" for k, v in labels.items()) or "base"))
        return 0
    # another sweep or run in it is refused (unless --resume continues it), and so is a second writer
    default = f"{spec.base.output.dir}/{spec.base.name}"
    out_dir = claim_output_dir(args.out or (default if args.resume else beside_other_runs(default)),
                               "sweep directory", resume=args.resume)
    try:
        result = run_sweep(spec, workers=args.workers, progress=not args.no_progress, out_dir=out_dir,
                           resume=args.resume)
    except KeyboardInterrupt:
        from fdp_flower.engines.sweep import PARTIAL_NAME

        partial = out_dir / PARTIAL_NAME
        kept = len(partial.read_text().splitlines()) if partial.is_file() else 0
        again = " ".join(["fdp-flower sweep", shlex.quote(args.sweep), *(f"--set {shlex.quote(o)}" for o in args.set),
                          # the directory it used (without --out it may have gone beside an earlier sweep)
                          *(["--out", shlex.quote(str(out_dir))] if args.out or out_dir != Path(default) else []),
                          "--resume"])
        print(f"interrupted (Ctrl-C): {kept} of {runs} runs kept in {partial}; continue with: {again}",
              file=sys.stderr)
        return 130
    out = write_sweep_results(result, out_dir, plots=not args.no_plots)
    print(f"{runs} runs in {result.elapsed_seconds:.1f} s with {result.workers} worker(s); results: {out}")
    if spec.sweep.paper_table:
        from fdp_flower.outputs.report import report

        text, counts = report(out)
        (out / "report.md").write_text(text)
        print(f"paper Table {spec.sweep.paper_table}: {counts['at_or_below']} of {counts['cells']} cells at or "
              f"below the paper's MISE; report: {out / 'report.md'}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from fdp_flower.outputs.report import report
    from fdp_flower.outputs.results import OutputError

    out = Path(args.out) if args.out else Path(args.results) / "report.md"
    if out.is_dir():
        raise OutputError(f"report --out {out}: is a directory, give a Markdown file name")
    if not out.parent.is_dir():
        raise OutputError(f"report --out {out}: {out.parent} is not a directory")
    text, _ = report(args.results)
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
    sweep.add_argument("--out", help="results directory (default: <output.dir>/<name>, or <name>-2, ... beside an "
                                     "earlier sweep; a --out holding another sweep or run is refused)")
    sweep.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--dry-run", action="store_true", help="list the configurations and exit")
    sweep.add_argument("--resume", action="store_true",
                       help="continue an interrupted sweep: reuse the runs finished in its results directory "
                            "(same file, --set and --out) and run the rest")
    sweep.set_defaults(func=_cmd_sweep)
    rep = sub.add_parser("report", help="Markdown tables of a sweep's results (paper layout for paper tables)")
    rep.add_argument("results", help="results directory written by `fdp-flower sweep`")
    rep.add_argument("--out", help="Markdown file (default: <results>/report.md)")
    rep.set_defaults(func=_cmd_report)


def _run_on_flower(args: argparse.Namespace, load_scenario) -> int:
    """``fdp-flower run --engine flower`` (and ``./run.sh``): see
    :func:`fdp_flower.engines.flower.run_on_simulation`.

    The scenario is the positional file, else ``scenario`` of ``--run-config``, else the app's default
    (``[tool.flwr.app.config]``); ``--run-config`` also takes the typed keys (``num-server-rounds=5
    eps=0.8``).  With ``--resume`` the ServerApp continues the checkpoint's run; without a scenario file
    the checkpoint's own scenario is written to a temporary file for the ServerApp and the clients.
    Relative paths (scenario, ``--out``, ``results-dir``) are the caller's, resolved here.
    """
    import tempfile

    from fdp_flower.algorithms.registry import any_scenario_from_run_config
    from fdp_flower.config.base import APP_DIR, ScenarioError, scenario_to_yaml
    from fdp_flower.engines.flower import (
        FLOWER_LOG,
        app_run_config,
        check_node_count,
        parse_site_config,
        run_on_simulation,
    )

    try:
        run_config = parse_site_config(args.run_config)
    except ValueError as exc:
        raise ScenarioError(f"--run-config: {exc}") from None
    unknown = sorted(set(run_config) - set(app_run_config()))
    if unknown:
        raise ScenarioError(f"--run-config: unknown key(s) {', '.join(unknown)}; the app's keys are "
                            f"{', '.join(app_run_config())}")
    if "resume" in run_config or "overrides" in run_config:
        raise ScenarioError("--run-config: give resume with --resume and overrides with --set")
    scenario_path, temporary = args.scenario or run_config.pop("scenario", None), None
    if args.resume:
        from fdp_flower.algorithms.fdp_admm.config import parse_scenario
        from fdp_flower.config.base import apply_overrides
        from fdp_flower.outputs.checkpoint import check_resumable, read_checkpoint, resolve_checkpoint_path

        checkpoint = read_checkpoint(args.resume)
        if not scenario_path:
            data = apply_overrides(checkpoint.scenario.model_dump(mode="json"), args.set)
            parse_scenario(data, "checkpoint scenario")
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="fdp-flower-resume-", delete=False) as fh:
                fh.write(scenario_to_yaml(checkpoint.scenario))
            scenario_path = temporary = fh.name
        resume = str(resolve_checkpoint_path(args.resume).resolve())
    else:
        scenario_path = scenario_path or str(APP_DIR / app_run_config()["scenario"])
        resume = None
    scenario_path = str(Path(scenario_path).expanduser().resolve())
    try:
        # the ServerApp's own parsing (file, overrides, typed keys), here first: errors surface before any process
        scenario = any_scenario_from_run_config({"scenario": scenario_path, "overrides": "; ".join(args.set),
                                                 **run_config})
        if args.resume:
            check_resumable(checkpoint, scenario)
            print(f"resuming from {resume} after round {checkpoint.round}", flush=True)
        from fdp_flower.outputs.results import check_output_dir

        # One simulated SuperNode per client by default.  A resumed simulated run names each client in
        # its messages (the server cannot tell a node's partition from a first reply once the duals are
        # non-zero) and a node with simulated data simulates the client it is named.
        supernodes = clients_of(scenario) if args.supernodes is None else args.supernodes
        if supernodes < 1:
            raise ScenarioError(f"--supernodes must be >= 1, got {supernodes}")
        check_node_count(scenario, supernodes, "--supernodes")  # node-local data: one SuperNode per client
        # checked before the SuperLink starts (and before the first release)
        results = check_output_dir(Path(args.out or run_config.pop("results-dir", None)
                                        or scenario.output.dir).resolve())
        print(f"running {scenario_path} ({scenario.algorithm.kind}) on Flower with {supernodes} simulated "
              f"SuperNodes; results under {results}", flush=True)
        print(f"equivalent command on a running SuperLink: "
              f"{flower_command(scenario_path, args.set, resume, run_config, results, supernodes)}", flush=True)
        run_id, status, out, _work = run_on_simulation(scenario_path, args.set, results, resume=resume,
                                                       num_supernodes=supernodes, run_config=run_config,
                                                       echo=lambda line: print(line, flush=True))
    finally:
        if temporary:
            Path(temporary).unlink(missing_ok=True)
    print(f"run {run_id} status: {status}")
    if status != "finished:completed" or out is None:
        print(f"error: the Flower run did not complete ({status})", file=sys.stderr)
        return 1
    summary = ResultsDir.at(out).summary
    if summary.is_file():
        final = json.loads(summary.read_text()).get("final") or {}
        shown = {k: v for k, v in final.items() if isinstance(v, (int, float)) and k != "round"}
        if shown:
            print("final: " + ", ".join(f"{k}={v:.4g}" for k, v in shown.items()))
    print(f"results: {out}")
    if not args.no_plots:  # the same figure as an in-process run
        from fdp_flower.outputs.plots import plot_results_dir

        path = plot_results_dir(out)
        if path is not None:
            print(f"plot: {path}")
    if (out / FLOWER_LOG).is_file():
        print(f"Flower's output of the run (its final-results dump included): {out / FLOWER_LOG}")
    return 0


def clients_of(scenario) -> int:
    """The number of clients (graph nodes for peer-to-peer) of a scenario of any family: one simulated
    SuperNode each, as in a deployment."""
    from fdp_flower.algorithms.registry import family

    return family(scenario.algorithm.kind).num_clients(scenario)


def extend_run(sub) -> None:
    """Add ``--engine`` and plots to ``fdp-flower run`` (its parser lives in cli.py).

    ``--engine inprocess`` (default) runs as before and then draws ``convergence.png``;
    ``--engine flower`` starts a SuperLink with Flower's simulation runtime on loopback, runs the
    same scenario and overrides with ``flwr run`` (server_app.py parses the same file), checks the
    run's status with ``flwr ls`` and stops what it started.
    """
    run = sub.choices.get("run")
    if run is None:
        return
    run.add_argument("--engine", choices=("inprocess", "flower"), default="inprocess",
                     help="inprocess: run here (fast); flower: start a local SuperLink with Flower's simulation "
                          "runtime and `flwr run` the scenario on it")
    run.add_argument("--supernodes", type=int, default=None, metavar="N",
                     help="--engine flower: simulated SuperNodes (default: one per client, with --resume one; "
                          "with fewer than clients, each simulates several clients)")
    run.add_argument("--run-config", default="", metavar="'KEY=VALUE ...'",
                     help="--engine flower: keys of the app's [tool.flwr.app.config] as `flwr run --run-config` "
                          "takes them, e.g. 'num-server-rounds=5 eps=0.8' or \"scenario='scenarios/x.yaml'\"")
    run.add_argument("--no-plots", action="store_true", help="skip convergence.png")
    inner = run.get_default("func")

    def run_with_engine(args: argparse.Namespace) -> int:
        from fdp_flower.algorithms.registry import load_any_scenario as load_scenario

        if args.engine == "flower":
            return _run_on_flower(args, load_scenario)
        if args.run_config or args.supernodes is not None:
            from fdp_flower.config.base import ScenarioError

            raise ScenarioError("--run-config and --supernodes need --engine flower")
        code = inner(args)
        if code == 0 and not args.no_plots and args.scenario:
            from fdp_flower.outputs.plots import plot_results_dir

            results = getattr(args, "results_dir", None)
            if results is None:
                scenario = load_scenario(args.scenario, args.set)
                results = args.out or f"{scenario.output.dir}/{scenario.name}"
            path = plot_results_dir(Path(results))
            if path is not None:
                print(f"plot: {path}")
        return code

    run.set_defaults(func=run_with_engine)


def register(sub) -> None:
    """The hook :func:`fdp_flower.cli.build_parser` calls: sweep, report, run --engine."""
    _register_commands(sub)
    extend_run(sub)
