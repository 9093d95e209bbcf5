"""The ``fdp-flower`` command line.  Subcommands register themselves here."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from fdp_flower.config.base import ScenarioError


def _run_other_family(args: argparse.Namespace) -> int | None:
    """`fdp-flower run` for peer-to-peer and gradient-ADMM scenarios (in process); None for FDP-ADMM."""
    import json

    import numpy as np

    from fdp_flower.algorithms.registry import family_of
    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.results import LEDGER_COLUMNS, check_output_dir, privacy_headline, privacy_section, write_csv

    if not args.scenario or args.resume:
        return None
    from fdp_flower.config.base import read_yaml_file

    section = read_yaml_file(args.scenario).get("algorithm")  # a bad file: one line naming it
    kind = section.get("kind", "fdp_admm") if isinstance(section, dict) else "fdp_admm"
    for override in args.set:
        if override.startswith("algorithm.kind="):
            kind = override.split("=", 1)[1].strip()
    family = family_of(str(kind))
    if family == "fdp_admm":
        return None
    from fdp_flower.algorithms.registry import load_any_scenario

    scenario = load_any_scenario(args.scenario, args.set)
    out = check_output_dir(args.out or f"{scenario.output.dir}/{scenario.name}")
    (out / "scenario.yaml").write_text(scenario_to_yaml(scenario))
    if family == "p2p":
        from fdp_flower.engines.p2p import run_scenario, summarize

        steps = scenario.algorithm.steps

        def progress(step: int, row: dict) -> None:
            shown = ", ".join(f"{k}={row[k]:.4g}" for k in ("released_normalized_error", "released_average_loss",
                                                             "released_test_accuracy", "eps_pld") if k in row)
            print(f"[{step:>{len(str(steps))}}/{steps}] {shown}", flush=True)

        result = run_scenario(scenario, progress=progress)
        rounds = len(next(iter(result.metrics.values())))
        write_csv(out / "history.csv", [{k: float(v[r]) for k, v in result.metrics.items()} for r in range(rounds)])
        np.savez(out / "iterates.npz", released=result.released, duals=result.duals)
        summary = summarize(result, scenario.privacy.delta, privacy=scenario.privacy)
        who = "node"
    else:
        from fdp_flower.engines.gradient_admm import run_scenario

        result, _problem, reference = run_scenario(scenario)
        write_csv(out / "history.csv", result.history)
        np.savez(out / "final.npz", x=result.state.x)
        p = scenario.privacy
        summary = {"final": result.history[-1] if result.history else {}, "reference_objective": reference,
                   "privacy": privacy_section(result.ledger, p.delta, mode="total" if p.enabled else None,
                                              eps_budget=p.eps if p.enabled else None)}
        who = "client"
    write_csv(out / "ledger.csv", result.ledger.to_rows(), LEDGER_COLUMNS)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print("final: " + ", ".join(f"{k}={v:.4g}" for k, v in summary["final"].items()
                                if isinstance(v, (int, float)) and k != "round"))
    print(privacy_headline(summary["privacy"], who))
    print(f"results: {out}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    other = _run_other_family(args)
    if other is not None:
        return other
    from fdp_flower.algorithms.fdp_admm.config import load_scenario, parse_scenario
    from fdp_flower.config.base import apply_overrides
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.outputs.checkpoint import CHECKPOINT_NAME, read_checkpoint, resolve_checkpoint_path
    from fdp_flower.outputs.results import check_output_dir, privacy_headline, rescue_run, write_results

    resume = None
    if args.resume:
        resume = read_checkpoint(args.resume)
        if args.scenario:
            scenario = load_scenario(args.scenario, args.set)
        else:  # the checkpoint's own scenario (overrides may change only output settings)
            scenario = parse_scenario(apply_overrides(resume.scenario.model_dump(mode="json"), args.set),
                                      "checkpoint scenario")
        out_dir = args.out or str(resolve_checkpoint_path(args.resume).parent)
        print(f"resuming from {resolve_checkpoint_path(args.resume)} after round {resume.round}", flush=True)
    elif args.scenario:
        scenario = load_scenario(args.scenario, args.set)
        out_dir = args.out or f"{scenario.output.dir}/{scenario.name}"
    else:
        raise ScenarioError("fdp-flower run: give a scenario file or --resume <checkpoint or results dir>")
    rounds = scenario.algorithm.rounds
    check_output_dir(out_dir)  # before the first release, not after training

    def progress(round_: int, row: dict) -> None:
        if round_ % max(1, rounds // 20) == 0 or round_ == rounds:
            shown = ", ".join(f"{k}={row[k]:.4g}" for k in ("mise", "objective_gap", "eps_pld") if k in row)
            print(f"[{round_:>{len(str(rounds))}}/{rounds}] {shown}", flush=True)

    from fdp_flower.outputs.release_journal import journal_path

    result = run_fdp_admm(scenario, progress=progress, resume=resume,
                          checkpoint_path=f"{out_dir}/{CHECKPOINT_NAME}",
                          resume_journal=journal_path(resolve_checkpoint_path(args.resume)) if resume else None)
    try:
        out = write_results(result, out_dir)
    except OSError as exc:  # a full disk or a directory removed during the run: keep what was released
        print(f"error: {rescue_run(result, out_dir, exc)}", file=sys.stderr)
        return 1
    summary = json.loads((out / "summary.json").read_text())
    if result.stop_reason != "completed":
        print(f"run {result.stop_reason}")
    if result.failures:
        print(f"client failures: {len(result.failures)} (see failures.csv)")
    # the released model's MISE (algorithm.estimator); None when the true beta is unknown (node files, real data)
    mise = summary["final"].get("mise_estimate", summary["final"].get("mise"))
    print(f"final MISE ({scenario.algorithm.estimator.kind}) = {mise:.5f}" if mise is not None else
          f"final objective = {summary['final'].get('objective', float('nan')):.5g} (no true beta: no MISE)")
    print(privacy_headline(summary["privacy"]))
    if summary["privacy"].get("note"):
        print(f"note: {summary['privacy']['note']}")
    print(f"results: {out}")
    return 0


def _package_version() -> str:
    """The installed distribution's version, or the package's own when running from a source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fdp-flower")
    except PackageNotFoundError:
        from fdp_flower import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fdp-flower", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario (in process, or on Flower with --engine flower)")
    run.add_argument("scenario", nargs="?", help="scenario YAML file (optional with --resume)")
    run.add_argument("--resume", metavar="CHECKPOINT", help="continue from a checkpoint file or a results "
                                                            "directory holding checkpoint.npz")
    run.add_argument("--set", action="append", default=[], metavar="A.B=VALUE", help="override a field")
    run.add_argument("--out", help="results directory (default: <output.dir>/<name>)")
    run.set_defaults(func=_cmd_run)
    for register in _registered():
        register(sub)
    return parser


def _registered():
    """Subcommands contributed by other modules (privacy calculator, sweeps, ...)."""
    hooks = []
    for module in ("fdp_flower.cli.privacy", "fdp_flower.cli.sweep", "fdp_flower.cli.partition",
                   "fdp_flower.cli.audit", "fdp_flower.cli.site"):
        try:
            hooks.append(__import__(module, fromlist=["register"]).register)
        except ImportError:
            continue
    return hooks


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:  # ScenarioError, DataValidationError, NodeDataError, CheckpointError, ...
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)" + (f"; {_INTERRUPT_NOTE[args.command]}" if args.command in _INTERRUPT_NOTE
                                         else ""), file=sys.stderr)
        return 130
    except MemoryError:
        print(f"error: fdp-flower {args.command}: out of memory (reduce data.n_samples, data.grid_points or "
              "federation.num_clients)", file=sys.stderr)
        return 1
    except OSError as exc:  # a file that cannot be read or written
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"error: {where}{exc.strerror or _one_line(exc)}", file=sys.stderr)
        return 1


#: what a Ctrl-C leaves behind, per subcommand
_INTERRUPT_NOTE = {
    "run": "checkpoints written so far are kept (fdp-flower run --resume <results dir>)",
    "sweep": "finished configurations are kept; continue with fdp-flower sweep --resume <sweep file>",
}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
