"""Round time of one secure-aggregation round (Flower's SecAgg+, four stages) against a plain round
of the same integer vectors in clear (issue 32).

    python benchmarks/secure_sum_round.py [--nodes 10] [--dim 11] [--rounds 5]
        [--out benchmarks/results/secure_aggregation]

Flower's simulation runtime behind a real SuperLink on loopback (fdp_flower.engines.flower.
SimulationFederation), ``--nodes`` SuperNodes with one client each, the app benchmarks/secure_sum_app
(the secure sum of fdp_flower.strategies.secure_sum; the sites' Skellam shares of
fdp_flower.privacy.distributed).  One warm-up plain round, then secure and plain rounds interleaved;
each secure round's sum is checked against the in-process sum of the same shares.  Two runs: the
project's short poll (0.01-0.1 s) and Flower's own send_and_receive (0.1 s between pulls in the
simulation runtime, 3 s in a deployment).  ``--deployment`` repeats both on a loopback deployment
(a SuperLink and one SuperNode per node, ClientApps in subprocesses).  Times are
the ServerApp's wall clock around the whole round; the ratio is taken within one run.

Output: ``round_time.md`` (table, then the hand-written ``round_time_note.md``) and ``round_time.json``
(every round) in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "benchmarks" / "secure_sum_app"


def run(nodes: int, dim: int, rounds: int, short_poll: bool, deployment: bool = False) -> dict:
    from fdp_flower.engines.flower import LoopbackFederation, SimulationFederation

    sys.path.insert(0, str(APP))
    from secure_sum_app.apps import expected_sum

    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cfg = {"num-nodes": nodes, "dim": dim, "secure-rounds": rounds, "plain-rounds": rounds, "tolerated": 1,
               "short-poll": short_poll, "out": str(out)}
        if deployment:  # real SuperNodes on loopback; the app reads no data file (the paths only fill the node config)
            federation = LoopbackFederation(Path(tmp), app_dir=APP, connection="secure-sum",
                                            data_paths=[Path(tmp) / f"unused-{i}" for i in range(nodes)])
        else:
            federation = SimulationFederation(Path(tmp), app_dir=APP, connection="secure-sum", num_supernodes=nodes)
        with federation as fed:
            started = time.monotonic()
            _run_id, status = fed.run(cfg, timeout=3600)
            if status != "finished:completed":
                raise RuntimeError(f"{status}\n{fed.logs()[-4000:]}")
            wall = time.monotonic() - started
        result = json.loads(out.read_text())
    full = {"secure-rounds": rounds, "plain-rounds": rounds, "num-nodes": nodes, "dim": dim, "tolerated": 1,
            "seed": 7, "records": 200, "eps": 1.0}
    for r in result["secure"]:
        if "refused" in r:
            raise RuntimeError(f"secure round {r['round']} refused: {r['refused']}")
        if r["total"] != expected_sum(full, r["round"], range(nodes)):
            raise RuntimeError(f"secure round {r['round']}: Flower's sum differs from the in-process sum")
    result["wall_seconds"] = wall
    result["short_poll"] = short_poll
    result["runtime"] = "deployment" if deployment else "simulation"
    for r in result["secure"]:
        r.pop("wire", None)
    return result


def summary_row(result: dict) -> str:
    sec = [r["seconds"] for r in result["secure"]]
    pl = [r["seconds"] for r in result["plain"]]
    ratios = [s / p for s, p in zip(sec, pl)]
    poll = ("project short poll (0.01-0.1 s)" if result["short_poll"] else
            "Flower's send_and_receive (" + ("0.1 s pulls)" if result["runtime"] == "simulation" else "3 s pulls)"))
    return (f"| {result['runtime']} | {poll} | {len(result['nodes'])} | {len(result['secure'][0]['total'])} | {len(sec)} "
            f"| {statistics.median(sec):.2f} ({min(sec):.2f}-{max(sec):.2f}) "
            f"| {statistics.median(pl):.3f} ({min(pl):.3f}-{max(pl):.3f}) "
            f"| {statistics.median(ratios):.0f} | yes |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--dim", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--deployment", action="store_true",
                        help="also run on a loopback deployment (SuperLink + one SuperNode per node)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "secure_aggregation"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = [run(args.nodes, args.dim, args.rounds, short_poll=poll, deployment=dep)
               for dep in ((False, True) if args.deployment else (False,)) for poll in (True, False)]
    (out / "round_time.json").write_text(json.dumps(results, indent=1, default=str))
    lines = [
        "# Round time: secure aggregation (SecAgg+) vs a plain round",
        "",
        f"`python benchmarks/secure_sum_round.py --nodes {args.nodes} --dim {args.dim} --rounds {args.rounds}` "
        f"({time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores shared with other jobs; "
        "see the script's docstring). Flower's simulation runtime behind a real SuperLink on loopback, one client "
        "per SuperNode (deployment: a SuperLink and --nodes SuperNodes on loopback); one warm-up plain round, then secure and plain rounds interleaved. Secure round = the four "
        "SecAgg+ stages of fdp_flower.strategies.secure_sum (setup, share keys, masked vectors, unmask) with "
        "t = 1; plain round = one message out and the share back in clear, summed by the server. Every secure "
        "sum equals the in-process sum of the same shares bit for bit.",
        "",
        "| runtime | reply collection | nodes M | vector K | rounds | secure round, s: median (min-max) "
        "| plain round, s: median (min-max) | median ratio secure / plain (same run) | sums exact |",
        "|---|---|---|---|---|---|---|---|---|",
        *[summary_row(r) for r in results],
        "",
    ]
    note = out / "round_time_note.md"  # hand-written reading of the numbers, kept under the table
    if note.is_file():
        lines += [note.read_text()]
    (out / "round_time.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
