"""Scaling benchmark: setup time, wall time per round and peak memory of FDP-ADMM in process, in
Flower's simulation runtime (2 and 10 SuperNodes) and in a loopback deployment (3 SuperNodes),
next to a plain-Flower app with the same messages and no work (benchmarks/floor_app), all in one run.

    python benchmarks/scaling.py            # writes benchmarks/results/scaling.md
    python benchmarks/scaling.py --quick    # a small smoke version (scaling_quick.md)

Every measurement runs in its own process(es); BLAS is limited to one thread (on a shared 2-core
machine OpenBLAS's spinning threads make a dense product 10-60 times slower, which measures the
neighbours, not this code).  In process: setup = time to the first round minus one round, peak =
the process's maximum RSS.  Flower: round = Flower's "Strategy execution finished in" time (our
app) or the floor app's own loop time, divided by the rounds; setup = time from ``flwr run`` to
the first round's log line (both include Flower's own run start).  The goals compare with the
floor app collecting replies by the same short poll as our strategies; the floor with Flower's own
``Grid.send_and_receive`` (3 s between pulls) is shown once per runtime.  Goals (issue 15): Flower
simulation round <= 2 x in-process round + floor round; loopback round <= floor round + 1 s;
n = 1e6, M = 1000, 30 rounds in process <= 60 s and <= 1.5 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR_APP = ROOT / "benchmarks" / "floor_app"
SCENARIO = ROOT / "scenarios" / "flwr_default.yaml"
RESULTS = ROOT / "benchmarks" / "results"
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------- in process
def _child_inprocess(n: int, clients: int, rounds: int) -> None:
    """Run one in-process case in this (fresh) process and print its timings as JSON."""
    import resource

    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.config.base import read_yaml_file
    from fdp_flower.engines.inprocess import run_fdp_admm

    data = read_yaml_file(SCENARIO)
    data["data"]["n_samples"], data["federation"]["num_clients"] = n, clients
    data["algorithm"]["rounds"] = rounds
    scenario = parse_scenario(data)
    stamps: list[float] = []
    start = time.perf_counter()
    result = run_fdp_admm(scenario, with_reference=False, progress=lambda _r, _row: stamps.append(time.perf_counter()))
    total = time.perf_counter() - start
    per_round = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    print(json.dumps({"total_s": total, "setup_s": stamps[0] - start - per_round, "round_s": per_round,
                      "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                      "rounds": len(stamps), "mise": result.history[-1]["mise"]}))


def inprocess(n: int, clients: int, rounds: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(n), str(clients), str(rounds)], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, **ENV_ONE_THREAD}, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- Flower
def flower(kind: str, app: str, n: int, clients: int, rounds: int, nodes: int, poll: str = "short") -> dict:
    """One Flower run: ``kind`` simulation | loopback, ``app`` fdp | floor (``poll``: short | flower)."""
    from fdp_flower.engines.flower import LoopbackFederation, SimulationFederation

    os.environ.update(ENV_ONE_THREAD)
    app_dir = ROOT if app == "fdp" else FLOOR_APP
    work = Path(tempfile.mkdtemp(prefix=f"scaling-{kind}-{app}-"))
    if app == "fdp":
        config = {"scenario": str(SCENARIO), "results-dir": str(work / "results"), "resume": "",
                  "overrides": f"data.n_samples={n}; federation.num_clients={clients}; algorithm.rounds={rounds}"}
    else:
        config = {"num-clients": clients, "dim": 10, "grid-points": 100, "rounds": rounds, "poll": poll}
    if kind == "simulation":
        fed = SimulationFederation(work, app_dir=app_dir, num_supernodes=nodes)
    else:
        dummy = work / "unused-data-path"  # simulated data: the node's data-path is not read
        fed = LoopbackFederation(work, app_dir=app_dir, data_paths=[dummy] * nodes)
    lines: list[tuple[float, str]] = []
    try:
        with fed:
            start = time.monotonic()
            run_id, status = fed.run(config, timeout=1800, echo=lambda line: lines.append((time.monotonic(), line)))
    except Exception as exc:  # a failed case is reported, the benchmark goes on
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    if status != "finished:completed":
        return {"error": status}
    shutil.rmtree(work, ignore_errors=True)  # kept (with the logs) only when the run failed
    text = "\n".join(line for _t, line in lines)
    found = re.search(r"Strategy execution finished in ([\d.]+)s", text) or \
        re.search(r"floor: \d+ rounds finished in ([\d.]+)s", text)
    first = next((t for t, line in lines if "[ROUND 1/" in line), None)
    if found is None or first is None:
        return {"error": "no timing lines in the run's log"}
    return {"round_s": float(found.group(1)) / rounds, "setup_s": first - start, "rounds": rounds}


# ---------------------------------------------------------------------------------------------- report
NOTES = [
    "Round times of the Flower runs are the mean over their rounds, round 1 included: for fdp-flower that "
    "round also generates and projects each client's slice on its node (cached afterwards), so its "
    "steady-state round is shorter than shown.",
    "The floor app is not a tight lower bound in simulation: with the same short poll it is slower than "
    "fdp-flower there (probably because its first round also pays the start of Flower's simulation workers, which our "
    "ServerApp's setup overlaps; not verified); the goal ratios are computed against it as the issue defines them.",
    "Loopback deployment: a SuperNode runs one message at a time, each in a new `flwr-clientapp` process, "
    "and sleeps 3 s whenever a pull finds nothing; with M = 10 clients on 3 SuperNodes each node runs 3-4 "
    "processes a round, so the round is set by Flower's SuperNode, not by the strategy's poll. The difference "
    "to the floor (fdp-flower's ClientApp import: pydantic scenario schema and our modules, ~0.15 s warm and "
    "~1 s on a loaded machine per process, plus round 1's data generation) is within this machine's noise: "
    "in a `--quick` run (n = 1e4) the same comparison came out 55.5 s (ours) vs 56.1 s (floor).",
]


def verdict(value: float, bound: float) -> str:
    return "met" if value <= bound else f"missed by {value - bound:.3f} s ({value / bound:.1f} x the bound)"


def fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def write_report(path: Path, rows: list[dict], goals: list[str], args, elapsed: float) -> None:
    lines = [f"# Scaling benchmark{' (--quick)' if args.quick else ''}", "",
             f"`python benchmarks/scaling.py{' --quick' if args.quick else ''}`, one run on {platform.node()} "
             f"({os.cpu_count()} CPUs, load average at start {args.load:.1f}; shared with other jobs, so absolute "
             f"times are noisy and the ratios within this run are what counts); BLAS one thread; "
             f"{elapsed / 60:.1f} min in all.", "",
             "Scenario: `scenarios/flwr_default.yaml` (paper design, K = 10, 100 grid points, l1 quantile "
             "regression, per-round eps = 0.5) with n and M as below. Rounds: in process "
             f"{args.rounds_inprocess}, Flower {args.rounds_flower} (the round time is the mean). Peak memory "
             "is measured for the in-process engine only (a Flower run's memory is spread over several processes).",
             "", "| engine | n | M | SuperNodes | setup (s) | round (s) | peak RSS (GB) | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["result"]
        lines.append(f"| {r['engine']} | {r['n']:.0e} | {r['M']} | {r.get('nodes', '-')} | "
                     f"{fmt(res.get('setup_s'), 2)} | {fmt(res.get('round_s'))} | {fmt(res.get('peak_gb'), 2)} | "
                     f"{res.get('error', '')} |")
    lines += ["", "## Goals", ""] + [f"- {g}" for g in goals]
    lines += ["", "## Notes", ""] + [f"- {note}" for note in NOTES] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke version")
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_inprocess(*args.child)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the running federation on SIGTERM too
    args.load = os.getloadavg()[0]
    started = time.monotonic()
    if args.quick:
        inproc_cases = [(10_000, 10)]
        flower_cases = [(10_000, 10)]
        args.rounds_inprocess, args.rounds_flower = 10, 3
        sims, out = [2], RESULTS / "scaling_quick.md"
    else:
        inproc_cases = [(n, m) for n in (100_000, 1_000_000) for m in (10, 100, 1000)]
        flower_cases = [(100_000, 10), (100_000, 100), (1_000_000, 10)]
        args.rounds_inprocess, args.rounds_flower = 30, 3
        sims, out = [2, 10], RESULTS / "scaling.md"
    rows: list[dict] = []

    def record(row: dict) -> dict:
        rows.append(row)
        print(json.dumps(row), flush=True)
        return row["result"]

    inproc = {}
    for n, m in inproc_cases:
        inproc[n, m] = record({"engine": "in process", "n": n, "M": m,
                               "result": inprocess(n, m, args.rounds_inprocess)})
    goals = []
    for n, m in flower_cases:
        base = inproc.get((n, m)) or inprocess(n, m, args.rounds_inprocess)
        for nodes in sims:
            ours = record({"engine": "Flower simulation", "n": n, "M": m, "nodes": nodes,
                           "result": flower("simulation", "fdp", n, m, args.rounds_flower, nodes)})
            floor = record({"engine": "plain Flower (floor, short poll), simulation", "n": n, "M": m, "nodes": nodes,
                            "result": flower("simulation", "floor", n, m, args.rounds_flower, nodes)})
            if (n, m) == flower_cases[0]:
                record({"engine": "plain Flower (floor, send_and_receive), simulation", "n": n, "M": m,
                        "nodes": nodes, "result": flower("simulation", "floor", n, m, args.rounds_flower, nodes,
                                                         poll="flower")})
            if "round_s" in ours and "round_s" in floor and "round_s" in base:
                bound = 2 * base["round_s"] + floor["round_s"]
                goals.append(f"simulation, n = {n:.0e}, M = {m}, {nodes} SuperNodes: round {ours['round_s']:.3f} s "
                             f"vs bound 2 x {base['round_s']:.3f} + {floor['round_s']:.3f} = {bound:.3f} s: "
                             f"{verdict(ours['round_s'], bound)}")
        if (n, m) != flower_cases[0]:
            continue  # loopback only for the first case: a SuperNode runs one message at a time, each in a new
            # ClientApp process after a pull that sleeps 3 s when it finds nothing (M = 100: minutes a round)
        ours = record({"engine": "loopback deployment", "n": n, "M": m, "nodes": 3,
                       "result": flower("loopback", "fdp", n, m, args.rounds_flower, 3)})
        floor = record({"engine": "plain Flower (floor, short poll), loopback", "n": n, "M": m, "nodes": 3,
                        "result": flower("loopback", "floor", n, m, args.rounds_flower, 3)})
        if (n, m) == flower_cases[0]:
            record({"engine": "plain Flower (floor, send_and_receive), loopback", "n": n, "M": m, "nodes": 3,
                    "result": flower("loopback", "floor", n, m, args.rounds_flower, 3, poll="flower")})
        if "round_s" in ours and "round_s" in floor:
            bound = floor["round_s"] + 1.0
            goals.append(f"loopback, n = {n:.0e}, M = {m}: round {ours['round_s']:.3f} s vs bound "
                         f"{floor['round_s']:.3f} + 1 = {bound:.3f} s: "
                         f"{verdict(ours['round_s'], bound)}")
    big = inproc.get((1_000_000, 1000))
    if big is not None and "total_s" in big:
        goals.append(f"in process, n = 1e6, M = 1000, 30 rounds: {big['total_s']:.1f} s (goal <= 60 s: "
                     f"{'met' if big['total_s'] <= 60 else 'missed'}), peak {big['peak_gb']:.2f} GB "
                     f"(goal <= 1.5 GB: {'met' if big['peak_gb'] <= 1.5 else 'missed'})")
    write_report(out, rows, goals, args, time.monotonic() - started)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
