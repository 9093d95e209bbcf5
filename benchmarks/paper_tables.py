"""Reproduce Zhou & Xiang's (2022) Tables 1-6 (MISE of FDP-ADMM) with the batched sweep engine.

On demand, not in CI.  For every table it runs ``scenarios/paper_table<N>.yaml`` (10500 runs
at 100 repetitions: 5 quantile levels x 21 privacy settings), writes the sweep results to
``benchmarks/results/paper_tables/table<N>/`` and the report, the paper's numbers beside
ours, to ``benchmarks/results/paper_tables/table<N>.md`` with the wall time and machine.

    python benchmarks/paper_tables.py                       # all six tables, 100 repetitions
    python benchmarks/paper_tables.py --tables 1 --workers 2
    python benchmarks/paper_tables.py --tables 2 3 4 5 6 --repetitions 20
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per process (see fdp_flower.engines.sweep)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import time
from pathlib import Path

from fdp_flower.engines.sweep import load_sweep, run_sweep, write_sweep_results
from fdp_flower.outputs.report import report

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "paper_tables"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--repetitions", type=int, help="override sweep.repetitions (default: the file's, 100)")
    parser.add_argument("--workers", type=int, help="worker processes (default: CPU count)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for table in args.tables:
        path = ROOT / "scenarios" / f"paper_table{table}.yaml"
        overrides = [f"sweep.repetitions={args.repetitions}"] if args.repetitions else []
        spec = load_sweep(path, overrides)
        t0 = time.perf_counter()
        result = run_sweep(spec, workers=args.workers, progress=True)
        wall = time.perf_counter() - t0
        res_dir = write_sweep_results(result, args.out / f"table{table}")
        text, counts = report(res_dir)
        command = ("python benchmarks/paper_tables.py --tables " + str(table)
                   + (f" --repetitions {args.repetitions}" if args.repetitions else "")
                   + (f" --workers {args.workers}" if args.workers else ""))
        footer = [
            "",
            (f"Command: `{command}`; wall time {wall:.0f} s with {result.workers} worker process(es) on "
             f"{os.cpu_count()} CPU(s) ({platform.processor() or platform.machine()}, Python "
             f"{platform.python_version()}); {len(result.runs)} runs."),
        ]
        if spec.sweep.repetitions < 100:
            footer.append(f"Reduced run: {spec.sweep.repetitions} repetitions instead of the paper's 100; "
                          f"the full run is `python benchmarks/paper_tables.py --tables {table}`.")
        (args.out / f"table{table}.md").write_text(text + "\n".join(footer) + "\n")
        print(f"Table {table}: {counts['at_or_below']}/{counts['cells']} cells at or below the paper, "
              f"{wall:.0f} s -> {args.out / f'table{table}.md'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
