"""``fdp-flower run`` in process, one function per family (the registry's ``run_inprocess``)."""
from __future__ import annotations

import argparse
import json
import sys

from fdp_flower.config.base import ScenarioError
from fdp_flower.outputs.layout import ResultsDir


def run_fdp_admm_inprocess(args: argparse.Namespace) -> int:
    """`fdp-flower run` of an FDP-ADMM scenario in process (or ``--resume`` of one of its checkpoints):
    checkpoints while it runs, then the results directory."""
    from fdp_flower.algorithms.fdp_admm.config import load_scenario, parse_scenario
    from fdp_flower.config.base import apply_overrides
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.outputs.checkpoint import CHECKPOINT_NAME, read_checkpoint, resolve_checkpoint_path
    from fdp_flower.outputs.results import (
        beside_other_runs,
        claim_output_dir,
        privacy_headline,
        rescue_run,
        write_results,
    )

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
        out_dir = args.out or beside_other_runs(f"{scenario.output.dir}/{scenario.name}")
    else:
        raise ScenarioError("fdp-flower run: give a scenario file or --resume <checkpoint or results dir>")
    from fdp_flower.algorithms.fdp_admm.plan import level_calibration, planned_rounds

    rounds = planned_rounds(scenario)
    # before the first release, not after training: writable, no other run in it, no other writer (a lock)
    claim_output_dir(out_dir, resume=resume is not None)
    args.results_dir = out_dir  # where the run writes (the plot goes there too)
    levels = f" + level calibration ({scenario.algorithm.rounds} ADMM rounds)" if level_calibration(scenario) else ""
    print(f"rule: {getattr(scenario.algorithm, 'rule', 'admm')}{levels}, {rounds} rounds", flush=True)
    if resume is None:  # what the setting can support, said before training (written to summary.json too)
        from fdp_flower.algorithms.fdp_admm.plan import partition_sizes
        from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_lines, predicted_cost_section

        for line in predicted_cost_lines(predicted_cost_section(scenario, partition_sizes(scenario))):
            print(line, flush=True)

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
    summary = json.loads(ResultsDir.at(out).summary.read_text())
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


def run_p2p_inprocess(args: argparse.Namespace) -> int:
    """`fdp-flower run` of a peer-to-peer scenario in process: the results directory."""
    from fdp_flower.engines.p2p import run_scenario, summarize
    from fdp_flower.outputs.results import write_run

    scenario, out = _scenario_and_out(args)
    rounds = scenario.algorithm.rounds

    def progress(round_: int, row: dict) -> None:
        shown = ", ".join(f"{k}={row[k]:.4g}" for k in ("released_normalized_error", "released_average_loss",
                                                         "released_test_accuracy", "eps_pld") if k in row)
        print(f"[{round_:>{len(str(rounds))}}/{rounds}] {shown}", flush=True)

    result = run_scenario(scenario, progress=progress)
    rounds = len(next(iter(result.metrics.values())))
    history = [{k: float(v[r]) for k, v in result.metrics.items()} for r in range(rounds)]
    summary = {"name": scenario.name, "engine": "inprocess",
               **summarize(result, scenario.privacy.delta, privacy=scenario.privacy)}
    write_run(out, scenario, history=history, ledger=result.ledger, summary=summary,
              iterates={"released": result.released, "duals": result.duals})
    return _finish(out, summary, "node")


def run_gradient_admm_inprocess(args: argparse.Namespace) -> int:
    """`fdp-flower run` of a DP-ADMM / DP-AccADMM scenario in process: the results directory."""
    from fdp_flower.engines.gradient_admm import run_scenario
    from fdp_flower.outputs.results import tabular_summary, write_run

    scenario, out = _scenario_and_out(args)
    result, _problem, reference = run_scenario(scenario)
    summary = tabular_summary(scenario, result.history, result.ledger, engine="inprocess",
                              stop_reason=result.stop_reason, reference_objective=reference)
    write_run(out, scenario, history=result.history, ledger=result.ledger, summary=summary,
              final={"x": result.state.x})
    return _finish(out, summary, "client")


def _scenario_and_out(args: argparse.Namespace):
    """The scenario of ``args`` and its results directory, checked writable and holding its scenario.yaml."""
    from fdp_flower.algorithms.registry import load_any_scenario
    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.results import beside_other_runs, claim_output_dir

    if args.resume:
        raise ScenarioError("--resume continues FDP-ADMM runs only (other families write no checkpoints)")
    scenario = load_any_scenario(args.scenario, args.set)
    # no other run in it (the default directory: beside an earlier run), no other writer
    out = claim_output_dir(args.out or beside_other_runs(f"{scenario.output.dir}/{scenario.name}"))
    args.results_dir = out  # where the run writes (the plot goes there too)
    ResultsDir.at(out).scenario.write_text(scenario_to_yaml(scenario))
    return scenario, out


def _finish(out, summary: dict, who: str) -> int:
    """The last lines of a tabular family's run (its results directory is written)."""
    from fdp_flower.outputs.results import privacy_headline

    print("final: " + ", ".join(f"{k}={v:.4g}" for k, v in summary["final"].items()
                                if isinstance(v, (int, float)) and k != "round"))
    print(privacy_headline(summary["privacy"], who))
    print(f"results: {out}")
    return 0


def run_protocol_inprocess(args: argparse.Namespace) -> int:
    """`fdp-flower run` in process for a family with a server protocol and a site function in its registry
    record (the generic driver :func:`fdp_flower.algorithms.protocol.run_in_process`)."""
    from fdp_flower.algorithms.protocol import run_in_process
    from fdp_flower.algorithms.registry import family, resolve
    from fdp_flower.outputs.results import privacy_headline, write_protocol_results
    from fdp_flower.privacy.mechanisms import run_noise

    scenario, out = _scenario_and_out(args)
    record = family(scenario.algorithm.kind)
    server, site = resolve(record.server)(scenario), resolve(record.site)
    noise = run_noise(scenario.seed)
    rounds = server.rounds_planned

    def progress(round_: int, row: dict) -> None:
        if round_ % max(1, rounds // 20) == 0 or round_ == rounds:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in row.items() if k != "round" and isinstance(v, float))
            print(f"[{round_:>{len(str(rounds))}}/{rounds}] {shown}", flush=True)

    run_in_process(server, lambda requests: site(requests, scenario, noise), progress=progress)
    summary = write_protocol_results(server, scenario, out)
    print(f"run {summary['stop_reason']}")
    print(privacy_headline(summary["privacy"], record.party))
    print(f"results: {out}")
    return 0 if not str(summary["stop_reason"]).startswith("stopped") else 1
