"""The ``fdp-flower`` command line.  Subcommands register themselves here."""
from __future__ import annotations

import argparse
import logging
import sys
import warnings


def _cmd_run(args: argparse.Namespace) -> int:
    """`fdp-flower run` in process: the scenario's family runs it (the registry's ``run_inprocess``)."""
    from fdp_flower.algorithms.registry import family, resolve
    from fdp_flower.config.base import read_yaml_file

    if args.resume or not args.scenario:
        kind = "fdp_admm"  # checkpoints are FDP-ADMM's
    else:
        section = read_yaml_file(args.scenario).get("algorithm")  # a bad file: one line naming it
        kind = section.get("kind", "fdp_admm") if isinstance(section, dict) else "fdp_admm"
        for override in args.set:
            if override.startswith("algorithm.kind="):
                kind = override.split("=", 1)[1].strip()
    return resolve(family(str(kind)).run_inprocess)(args)


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
    run.add_argument("--out", help="results directory (default: <output.dir>/<name>, or <name>-2, ... beside an "
                                   "earlier run; a --out holding another run is refused, nothing is overwritten)")
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
    shown, warnings.formatwarning = warnings.formatwarning, _warning_line  # one line, not a source excerpt
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
    finally:  # the results directories this command locked (fdp_flower.outputs.results.claim_output_dir)
        warnings.formatwarning = shown
        from fdp_flower.outputs.results import release_all_output_dirs

        release_all_output_dirs()


#: what a Ctrl-C leaves behind, per subcommand
_INTERRUPT_NOTE = {
    "run": "checkpoints written so far are kept (fdp-flower run --resume <results dir>)",
    "sweep": "finished configurations are kept; continue with fdp-flower sweep --resume <sweep file>",
}


def _warning_line(message, category, filename, lineno, line=None) -> str:
    return f"warning: {' '.join(str(message).split())}\n"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
