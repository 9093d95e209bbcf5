"""Scaling benchmark: setup time, wall time per round and peak memory of FDP-ADMM in process, in
Flower's simulation runtime (2 and 10 SuperNodes) and in a loopback deployment (3 SuperNodes),
next to a plain-Flower app with the same messages and no work (benchmarks/floor_app), all in one run.

    python benchmarks/scaling.py            # writes benchmarks/results/scaling.md
    python benchmarks/scaling.py --quick    # a small smoke version (scaling_quick.md)
    python benchmarks/scaling.py --loopback-only   # loopback rows n = 1e5, M = 10 and 100 (scaling_batched.md)
    python benchmarks/scaling.py --netns [--repeats 2]   # 5 SuperNodes in network namespaces, emulated WAN (scaling_netns.md)
    python benchmarks/scaling.py --trust-modes [--repeats 2]   # loopback, privacy.trust site vs secure_aggregation
                                                               # (scaling_secure_aggregation.md)

Both apps send one message per SuperNode and round, carrying every client the node hosts (fdp-flower's
FDP-ADMM strategy with fewer nodes than clients; the floor app mirrors it with the same payload sizes).

Every measurement runs in its own process(es); BLAS is limited to one thread (on a shared 2-core
machine OpenBLAS's spinning threads make a dense product 10-60 times slower, which measures the
neighbours, not this code).  In process: setup = time to the first round minus one round, peak =
the process's maximum RSS.  Flower: round = Flower's "Strategy execution finished in" time (our
app) or the floor app's own loop time, divided by the rounds; setup = time from ``flwr run`` to
the first round's log line (both include Flower's own run start); peak memory = the maximum over
samples every 0.2 s (from /proc) of the summed RSS of the federation's whole process tree (SuperLink,
SuperNodes, flower-superexec, ServerApp and ClientApp processes, Ray's processes in simulation).  In a
loopback deployment the same sampler records every ``flwr-clientapp`` process's lifetime (one message
each).  Every Flower run has ``TMPDIR=/dev/shm`` (a tmpfs: the per-message FAB extraction; both
apps; the loopback case n = 1e5, M = 10 also without it) and Flower's default task poll of flower-superexec (1 s; the
floor with ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.2`` is shown once).  The goals compare with the
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR_APP = ROOT / "benchmarks" / "floor_app"
SCENARIO = ROOT / "scenarios" / "flwr_default.yaml"
RESULTS = ROOT / "benchmarks" / "results"
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: flower-superexec's pause between task polls tried against Flower's default (1 s) on the floor app
#: (docs/deployment.md, "Round time and the SuperNode's task poll")
SUPEREXEC_POLL = "0.2"
#: TMPDIR of every Flower process here (both apps): a ClientApp process extracts and verifies the whole app
#: bundle (FAB) in a new temporary directory per message; on a tmpfs instead of this machine's ext4 that
#: takes 0.04 s instead of 0.2 s for fdp-flower's 125 files (docs/deployment.md)
FAST_TMPDIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
DISK_TMPDIR = tempfile.gettempdir()
#: --netns: a deployment the way sites run it (tests/netns_harness.py): the SuperLink and NETNS_NODES SuperNodes
#: in network namespaces, TLS, node authentication, node-local files of NETNS_N curves in all for fdp-flower
NETNS_NODES, NETNS_ROUNDS, NETNS_N = 5, 6, 100_000
NETNS_SCENARIO = ROOT / "scenarios" / "deploy_demo.yaml"
#: --trust-modes: the one small scenario run on a loopback deployment of TRUST_NODES SuperNodes, node-local files of
#: TRUST_N curves in all (NETNS_SCENARIO, one client per node), in privacy.trust site and in secure_aggregation
#: (total budget eps = 1; secure aggregation needs the total mode)
TRUST_NODES, TRUST_N, TRUST_ROUNDS = 3, 10_000, 4
TRUST_OVERRIDES = "privacy.mode=total; privacy.eps=1.0; privacy.delta=1.0e-5"
#: every SuperNode's node config in --trust-modes (both modes: the same federation; docs/privacy.md, section 7.1)
TRUST_SITE_CONFIG = {"accept-trust": "site,secure_aggregation"}
#: the per-round line of both apps' ServerApps ("fdp-flower: round 2/3 done in 0.812s", "floor: round 2/3 ...")
ROUND_LINE = re.compile(r"(?:fdp-flower|floor): round (\d+)/\d+ done in ([\d.]+)s")


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
class TreeSampler(threading.Thread):
    """Every ``interval`` s: the summed RSS of ``roots()`` and all their descendants (from /proc), and
    the first and last time each ``flwr-clientapp`` process among them was seen (with its parent, the
    flower-superexec of one SuperNode)."""

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, roots, interval: float = 0.2):
        super().__init__(daemon=True)
        self.roots, self.interval = roots, interval
        self.peak_bytes = 0
        self.clientapps: dict[tuple[int, str], list] = {}  # (pid, start tick) -> [first, last seen, parent]
        self._names: dict[tuple[int, str], bool] = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        parent, start = {}, {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            pid = int(stat.parent.name)
            if fields[0] != "Z":  # a zombie (exited, not yet reaped) holds no memory and does no work
                parent[pid], start[pid] = int(fields[1]), fields[19]
        tree, frontier = set(), {p for p in self.roots() if p in parent}
        while frontier:
            tree |= frontier
            frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree}
        total, now = 0, time.monotonic()
        for pid in tree:
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self.PAGE
                key = (pid, start[pid])
                if key not in self._names:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
                    self._names[key] = any(arg.endswith(b"flwr-clientapp") for arg in argv)
            except (OSError, IndexError, ValueError):
                continue
            if self._names[key]:
                self.clientapps.setdefault(key, [now, now, parent[pid]])[1] = now
        self.peak_bytes = max(self.peak_bytes, total)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        out = {"peak_gb": self.peak_bytes / 1e9}
        if self.clientapps:  # a process alive for one sample only counts as interval/2
            lives = [max(last - first, self.interval / 2) for first, last, _ in self.clientapps.values()]
            out.update(clientapps=len(lives), clientapp_s=sum(lives) / len(lives))
            gaps = []  # on one SuperNode: from one process's last sample to the next one's first
            for node in {parent for _, _, parent in self.clientapps.values()}:
                spans = sorted((first, last) for first, last, parent in self.clientapps.values() if parent == node)
                gaps += [b[0] - a[1] for a, b in zip(spans, spans[1:])]
            if gaps:  # the median is a gap inside a round (a round's last message is followed by the next round)
                out["gap_s"] = sorted(gaps)[len(gaps) // 2]
        return out


def netns_profile(variant: str):
    """The link profile of a --netns row: ``wan`` 50 ms one way per chunk and 1% of the TCP segments lost (each
    costing a 200 ms retransmission timeout); ``lan`` the same relay without delay or loss."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.netns_harness import LinkProfile

    return LinkProfile(delay_s=0.05, loss=0.01, rto_s=0.2) if variant == "wan" else LinkProfile(0.0, 0.0, 0.0)


def flower(kind: str, app: str, n: int, clients: int, rounds: int, nodes: int, poll: str = "short",
           superexec_poll: str | None = None, tmpdir: str | None = FAST_TMPDIR, profile=None,
           trust: str | None = None) -> dict:
    """One Flower run: ``kind`` simulation | loopback | netns, ``app`` fdp | floor (``poll``: short | flower);
    ``superexec_poll``: FLWR_SUPEREXEC_TASK_POLL_INTERVAL of the SuperNodes (None: Flower's default, 1 s);
    ``tmpdir``: TMPDIR of the Flower processes (None: this machine's default); ``profile``: the emulated link
    of every SuperNode (netns); ``trust``: run fdp-flower with that ``privacy.trust`` (and :data:`TRUST_OVERRIDES`,
    every site accepting it: :data:`TRUST_SITE_CONFIG`; loopback only)."""
    from fdp_flower.engines.flower import LoopbackFederation, SimulationFederation

    os.environ.update(ENV_ONE_THREAD, FLWR_SUPEREXEC_TASK_POLL_INTERVAL=superexec_poll or "1.0",
                      TMPDIR=tmpdir or DISK_TMPDIR)
    app_dir = ROOT if app == "fdp" else FLOOR_APP
    work = Path(tempfile.mkdtemp(prefix=f"scaling-{kind}-{app}-"))
    if app == "fdp":
        config = {"scenario": str(SCENARIO), "results-dir": str(work / "results"), "resume": "",
                  "overrides": f"data.n_samples={n}; federation.num_clients={clients}; algorithm.rounds={rounds}"}
    else:
        config = {"num-clients": clients, "dim": 10, "grid-points": 100, "rounds": rounds, "poll": poll}
    if trust is not None:
        if app != "fdp" or kind != "loopback":
            raise ValueError("trust: fdp-flower on a loopback deployment only")
        config.update(scenario=str(NETNS_SCENARIO), overrides=f"federation.num_clients={clients}; "
                      f"algorithm.rounds={rounds}; {TRUST_OVERRIDES}; privacy.trust={trust}")
    if kind == "simulation":
        fed = SimulationFederation(work, app_dir=app_dir, num_supernodes=nodes)
    elif kind == "netns":
        from tests.netns_harness import NetnsFederation  # netns_profile put the repository on the path

        if app == "fdp":  # node-local files, each site's default privacy policy (noise from OS entropy)
            from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

            paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=n), nodes), work / "data")
            config.update(scenario=str(NETNS_SCENARIO),
                          overrides=f"federation.num_clients={clients}; algorithm.rounds={rounds}")
        else:
            paths = [work / "unused-data-path"] * nodes
        fed = NetnsFederation(work, app_dir=app_dir, data_paths=paths, profile=profile, tmpdir=tmpdir)
    elif trust is not None:  # node-local files, each site's default policy but for accept-trust (noise: OS entropy)
        from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

        paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=n), nodes), work / "data")
        fed = LoopbackFederation(work, app_dir=app_dir, data_paths=paths, site_config=TRUST_SITE_CONFIG)
    else:  # simulated data: the node names no data-path (a site that names its own file serves only that file)
        dummy = work / "unused-data-path"
        fed = LoopbackFederation(work, app_dir=app_dir, data_paths=[dummy] * nodes, site_config={"data-path": ""})
    lines: list[tuple[float, str]] = []
    sampler = TreeSampler(lambda: [p.pid for p in fed.processes])
    try:
        with fed:
            sampler.start()
            start = time.monotonic()
            run_id, status = fed.run(config, timeout=1800, echo=lambda line: lines.append((time.monotonic(), line)))
    except Exception as exc:  # a failed case is reported, the benchmark goes on
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    finally:
        measured = sampler.stop() if sampler.is_alive() else {}
    if getattr(fed, "relay", None) is not None:  # netns: what the emulated WAN carried
        stats = fed.relay.stats.values()
        measured.update(wan_mb=sum(x.bytes for x in stats) / 1e6, wan_segments=sum(x.segments for x in stats),
                        wan_lost=sum(x.lost_segments for x in stats), wan_connections=sum(x.connections for x in stats),
                        wan_tls=sum(x.tls_connections for x in stats))
    if status != "finished:completed":
        return {"error": status}
    shutil.rmtree(work, ignore_errors=True)  # kept (with the logs) only when the run failed
    text = "\n".join(line for _t, line in lines)
    found = re.search(r"Strategy execution finished in ([\d.]+)s", text) or \
        re.search(r"floor: \d+ rounds finished in ([\d.]+)s", text)
    first = next((t for t, line in lines if "[ROUND 1/" in line), None)
    if found is None or first is None:
        return {"error": "no timing lines in the run's log"}
    # each round's time on the ServerApp's own clock (both apps log it): round 1, in which fdp-flower's nodes
    # also generate and project their clients' slices, apart from rounds 2..L
    per_round = {int(k): float(v) for k, v in ROUND_LINE.findall(text)}
    times = [per_round[k] for k in sorted(per_round)]
    later = {"round1_s": times[0], **({"later_round_s": sum(times[1:]) / len(times[1:])} if len(times) > 1 else {})} \
        if len(times) == rounds else {}
    return {"round_s": float(found.group(1)) / rounds, "setup_s": first - start, "rounds": rounds, **later,
            **measured}


# ---------------------------------------------------------------------------------------------- report
FLOOR = "plain Flower (floor, short poll)"
LABELS = {("inprocess", "fdp", ""): "in process",
          ("simulation", "fdp", ""): "Flower simulation",
          ("simulation", "floor", ""): f"{FLOOR}, simulation",
          ("simulation", "floor", "send_and_receive"): "plain Flower (floor, send_and_receive), simulation",
          ("loopback", "fdp", ""): "loopback deployment",
          ("loopback", "floor", ""): f"{FLOOR}, loopback",
          ("loopback", "floor", "send_and_receive"): "plain Flower (floor, send_and_receive), loopback",
          ("loopback", "floor", "superexec-0.2"): f"{FLOOR}, loopback, superexec task poll {SUPEREXEC_POLL} s",
          ("loopback", "fdp", "disk-tmp"): f"loopback deployment, TMPDIR {DISK_TMPDIR} (ext4)",
          ("loopback", "floor", "disk-tmp"): f"{FLOOR}, loopback, TMPDIR {DISK_TMPDIR} (ext4)"}


def find(rows: list[dict], kind: str, app: str, n: int, m: int, nodes=None, variant: str = "") -> dict:
    for r in rows:
        if (r["kind"], r["app"], r["variant"], r["n"], r["M"], r.get("nodes")) == (kind, app, variant, n, m, nodes):
            return r["result"]
    return {}


def verdict(value: float, bound: float) -> str:
    return "met" if value <= bound else f"missed by {value - bound:.3f} s ({value / bound:.2f} x the bound)"


def fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def goals_of(rows: list[dict]) -> list[str]:
    goals = []
    for r in rows:
        ours, n, m, nodes = r["result"], r["n"], r["M"], r.get("nodes")
        if r["app"] != "fdp" or r["kind"] == "inprocess" or "round_s" not in ours:
            continue
        floor = find(rows, r["kind"], "floor", n, m, nodes, r["variant"])
        if "round_s" not in floor:
            continue
        if r["kind"] == "simulation":
            base = find(rows, "inprocess", "fdp", n, m)
            if "round_s" not in base:
                continue
            bound = 2 * base["round_s"] + floor["round_s"]
            goals.append(f"simulation, n = {n:.0e}, M = {m}, {nodes} SuperNodes: round {ours['round_s']:.3f} s vs "
                         f"bound 2 x {base['round_s']:.3f} + {floor['round_s']:.3f} = {bound:.3f} s: "
                         f"{verdict(ours['round_s'], bound)}")
            if "later_round_s" in ours and "later_round_s" in floor:
                later = 2 * base["round_s"] + floor["later_round_s"]
                goals.append(f"simulation, n = {n:.0e}, M = {m}, {nodes} SuperNodes, rounds 2-{r['rounds']} only: "
                             f"{ours['later_round_s']:.3f} s vs bound 2 x {base['round_s']:.3f} + "
                             f"{floor['later_round_s']:.3f} = {later:.3f} s: {verdict(ours['later_round_s'], later)}")
        else:
            bound = floor["round_s"] + 1.0
            where = f" (both with TMPDIR {DISK_TMPDIR})" if r["variant"] == "disk-tmp" else ""
            goals.append(f"loopback{where}, n = {n:.0e}, M = {m}, {nodes} SuperNodes: round {ours['round_s']:.3f} s vs "
                         f"bound {floor['round_s']:.3f} + 1 = {bound:.3f} s: {verdict(ours['round_s'], bound)}")
            if "later_round_s" in ours and "later_round_s" in floor:
                later = floor["later_round_s"] + 1.0
                goals.append(f"loopback{where}, n = {n:.0e}, M = {m}, rounds 2-{r['rounds']} only: "
                             f"{ours['later_round_s']:.3f} s vs bound {floor['later_round_s']:.3f} + 1 = {later:.3f} s: "
                             f"{verdict(ours['later_round_s'], later)}")
    big = find(rows, "inprocess", "fdp", 1_000_000, 1000)
    if "total_s" in big:
        goals.append(f"in process, n = 1e6, M = 1000, {big['rounds']} rounds: {big['total_s']:.1f} s (goal <= 60 s: "
                     f"{'met' if big['total_s'] <= 60 else 'missed'}), peak {big['peak_gb']:.2f} GB "
                     f"(goal <= 1.5 GB: {'met' if big['peak_gb'] <= 1.5 else 'missed'})")
    return goals


def notes_of(rows: list[dict]) -> list[str]:
    notes = [
        "Round times of the Flower runs (column `round (s)`) are the mean over their rounds (column `rounds`), "
        "round 1 included: for fdp-flower that round also generates and projects each client's slice on its node "
        "(cached afterwards), so its steady-state round is the column `round 2+ (s)`.",
        "The floor app is not a tight lower bound in simulation: with the same short poll it is often slower than "
        "fdp-flower there (probably because its first round also pays the start of Flower's simulation workers, "
        "which our ServerApp's setup overlaps; not verified); the goal ratios are computed against it as the "
        "issue defines them.",
        "Loopback deployment (Flower 1.41): a SuperNode pulls one message, waits for its reply (polled every "
        "0.5 s), pushes it, pulls the next, and sleeps 3 s when a pull finds nothing; flower-superexec starts one "
        "new `flwr-clientapp` process per message (FAB install, app load) at its next task poll. Both apps send "
        "one message per SuperNode and round carrying every client the node hosts (ceil(M / 3) on the busiest "
        "node), so a round costs one message cycle per node whatever M; the column `ClientApp (s)` is the mean "
        "lifetime of those processes (sampled every 0.2 s): the per-message cost plus, for fdp-flower, the "
        "updates of the node's clients.",
    ]
    for n in (100_000, 1_000_000):
        ours, floor = find(rows, "loopback", "fdp", n, 10, 3), find(rows, "loopback", "floor", n, 10, 3)
        if "clientapp_s" in ours and "clientapp_s" in floor:
            notes.append(f"Per message, n = {n:.0e}, M = 10: a `flwr-clientapp` process lived {ours['clientapp_s']:.2f} "
                         f"s (fdp-flower, {ours['clientapps']} processes) vs {floor['clientapp_s']:.2f} s (floor, "
                         f"{floor['clientapps']}), one message a node a round, against a measured round "
                         f"difference of {ours['round_s'] - floor['round_s']:+.2f} s.")
    notes.append(
        "What a message costs fdp-flower on top of the floor: its ClientApp's own part (importing the ClientApp; "
        "handling the message: the scenario, the worker's import, one read of the node's feature-cache file, every "
        "hosted client's step as one stacked array operation and each client's noise) is measured apart, in "
        "emulated `flwr-clientapp` processes, by `python benchmarks/message_cost.py` "
        "([message_cost.md](message_cost.md)). Flower's part, measured apart earlier (load ~1): importing Flower "
        "0.41 s for both apps; extracting and checking the app bundle 0.014 s vs 0.001 s on a tmpfs (0.2 s on the "
        "ext4 disk). Three costs this issue removed: the node's features no longer travel in `context.state`, "
        "which Flower copies into and out of every ClientApp process (3.5 MB a message at n = 1e5, M = 10 and "
        "35 MB at n = 1e6, whose serialization alone took 0.53 s a copy at load ~9); a node simulating its slice "
        "no longer imports scipy.stats (1.5-3.5 s per process under load) for the t(3) quantile; and a node "
        "hosting hundreds of clients reads one cache file and steps them together (334 clients at n = 1e5: "
        "0.21 s a message with one file and one step per client, 0.012 s now, in one emulated process at load "
        "~0.5).")
    notes.append(
        "Rows ran in the order listed, each fdp-flower row right before its floor (the same load); between such "
        "a pair a loopback round still varies by seconds on a shared machine.")
    notes.append(
        "Both apps collect a round's replies with the same short poll (pulls 0, 0.01, 0.03, 0.07, 0.15, 0.25, ... s "
        "after the push, then every 0.1 s), so a simulation round's time is quantized: replies that arrive 0.08 s "
        "after the push are collected at 0.15 s. fdp-flower's log line for each round says when its replies were "
        "collected (\"round 3/30 done in 0.177s (replies collected after 0.152s)\"). A finer poll (0.005 s "
        "doubling to 0.04 s) was tried on n = 1e6, M = 100, 10 SuperNodes: the floor's rounds took 0.08-0.12 s instead of 0.07-0.15 "
        "s, fdp-flower's 0.18-0.23 s instead of 0.10-0.19 s (the extra pulls compete with the "
        "ClientApp workers for the 2 cores); not adopted.")
    slow = find(rows, "loopback", "floor", 100_000, 10, 3)
    fast = find(rows, "loopback", "floor", 100_000, 10, 3, "superexec-0.2")
    if "round_s" in slow and "round_s" in fast:
        notes.append(f"`FLWR_SUPEREXEC_TASK_POLL_INTERVAL={SUPEREXEC_POLL}` (flower-superexec's task poll; Flower's "
                     f"default 1 s is used everywhere else): the floor's loopback round (n = 1e+05, M = 10) took "
                     f"{fast['round_s']:.2f} s with it and {slow['round_s']:.2f} s with the default in this run; the gap between two "
                     f"messages on a SuperNode was {fast.get('gap_s', float('nan')):.2f} s vs "
                     f"{slow.get('gap_s', float('nan')):.2f} s (negative: the next message's process starts "
                     f"before the previous one has exited). It starts each process earlier, but on 2 busy "
                     f"cores the overlapping processes only compete for the CPU (lifetime "
                     f"{fast.get('clientapp_s', float('nan')):.2f} s vs {slow.get('clientapp_s', float('nan')):.2f} "
                     f"s); in earlier pairs at load ~10 the floor's round was 20.4 and 20.0 s with it, 19.1 and "
                     f"19.8 s without.")
    ours_disk, floor_disk = (find(rows, "loopback", app, 100_000, 10, 3, "disk-tmp") for app in ("fdp", "floor"))
    ours, floor = find(rows, "loopback", "fdp", 100_000, 10, 3), find(rows, "loopback", "floor", 100_000, 10, 3)
    if all("round_s" in r for r in (ours_disk, floor_disk, ours, floor)):
        notes.append(f"TMPDIR (n = 1e+05, M = 10): before it runs the app, each `flwr-clientapp` process extracts the "
                     f"whole app bundle into a new temporary directory, checks every file's hash and deletes it again; "
                     f"fdp-flower's bundle has 125 files in 19 directories, the floor's 3. With TMPDIR on this "
                     f"machine's disk the rounds were {ours_disk['round_s']:.2f} s (fdp-flower) and "
                     f"{floor_disk['round_s']:.2f} s (floor), difference {ours_disk['round_s'] - floor_disk['round_s']:+.2f} s; "
                     f"on a tmpfs {ours['round_s']:.2f} s and {floor['round_s']:.2f} s, difference "
                     f"{ours['round_s'] - floor['round_s']:+.2f} s.")
    return notes


def write_report(path: Path, rows: list[dict], meta: dict) -> None:
    flag = (" --quick" if meta["quick"] else " --loopback-only" if meta.get("loopback_only") else
            f" --select {' '.join(meta['select'])}" if meta.get("select") else "")
    lines = [f"# Scaling benchmark{f' ({flag.strip()})' if flag else ''}", "",
             f"`python benchmarks/scaling.py{flag}`, one run on {meta['host']} "
             f"({meta['cpus']} CPUs, load average at start {meta['load']:.1f}, at the end {meta['load_end']:.1f}; "
             f"shared with other jobs, so absolute times are noisy and the ratios within this run are what "
             f"counts); BLAS one thread; {meta['elapsed'] / 60:.1f} min in all. Every Flower process, both apps', "
             f"runs with `TMPDIR={FAST_TMPDIR}` (a tmpfs) and Flower's default superexec task poll (1 s) unless "
             f"the row says otherwise.",
             "",
             "Scenario: `scenarios/flwr_default.yaml` (paper design, K = 10, 100 grid points, l1 quantile "
             "regression, per-round eps = 0.5) with n and M as below. Peak RSS: in process the process's maximum; "
             "Flower runs the maximum of the summed RSS of the federation's whole process tree (SuperLink, "
             "SuperNodes, superexec, ServerApp/ClientApp processes, Ray), sampled every 0.2 s. `ClientApp (s)`: "
             "mean lifetime of a deployment's `flwr-clientapp` processes (one per message); `gap (s)`: median "
             "time from one such process's end to the next one's start on the same SuperNode (both as seen by "
             f"the 0.2 s sampler). The run's rows: `benchmarks/results/{path.stem}_rows.jsonl` (this report is "
             f"re-written from them by `python benchmarks/scaling.py{flag} --rows "
             f"benchmarks/results/{path.stem}_rows.jsonl`).",
             "`round 1 (s)` and `round 2+ (s)`: round 1 and the mean of rounds 2 to L, each round as the "
             "ServerApp's own log line times it (fdp-flower: from sending the round's messages to the round's "
             "aggregate and evaluation; floor: its messages' send and collect); fdp-flower's nodes also generate "
             "and project their clients' slices in round 1.",
             "", "| engine | n | M | SuperNodes | rounds | setup (s) | round (s) | round 1 (s) | round 2+ (s) | "
             "peak RSS (GB) | ClientApp (s) | gap (s) | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["result"]
        lines.append(f"| {LABELS[r['kind'], r['app'], r['variant']]} | {r['n']:.0e} | {r['M']} | "
                     f"{r.get('nodes') or '-'} | {r['rounds']} | {fmt(res.get('setup_s'), 2)} | "
                     f"{fmt(res.get('round_s'))} | {fmt(res.get('round1_s'))} | {fmt(res.get('later_round_s'))} | "
                     f"{fmt(res.get('peak_gb'), 2)} | {fmt(res.get('clientapp_s'), 2)} | "
                     f"{fmt(res.get('gap_s'), 2)} | {res.get('error', '')} |")
    lines += ["", "## Goals", ""] + [f"- {g}" for g in goals_of(rows)]
    lines += ["", "## Notes", ""] + [f"- {note}" for note in notes_of(rows)] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


NETNS_LABELS = {("fdp", "lan"): "namespace deployment (fdp-flower), relay without delay or loss",
                ("floor", "lan"): "plain Flower (floor, short poll), same network",
                ("fdp", "wan"): "namespace deployment (fdp-flower), WAN 50 ms / 1%",
                ("floor", "wan"): "plain Flower (floor, short poll), same WAN"}


def write_netns_report(path: Path, rows: list[dict], meta: dict) -> None:
    """benchmarks/results/scaling_netns.md: the --netns rows, the difference to the floor in each network and
    what the WAN added to each app."""
    flag = f" --repeats {meta['repeats']}" if meta.get("repeats", 1) > 1 else ""
    lines = ["# Scaling benchmark (--netns): a deployment over network namespaces and an emulated WAN", "",
             f"`python benchmarks/scaling.py --netns{flag}`, one run on {meta['host']} ({meta['cpus']} CPUs, load average "
             f"at start {meta['load']:.1f}, at the end {meta['load_end']:.1f}; shared with other jobs, so absolute "
             f"times are noisy and the differences within a pair of rows are what counts); Flower "
             f"{meta.get('flwr', '?')}; {meta['elapsed'] / 60:.1f} min in all. The run's rows: "
             f"`benchmarks/results/{path.stem}_rows.jsonl` (this report is re-written from them by "
             f"`python benchmarks/scaling.py --netns --rows benchmarks/results/{path.stem}_rows.jsonl`).", "",
             f"The federation of tests/netns_harness.py: a SuperLink and {NETNS_NODES} SuperNodes, each in its own "
             "network namespace; every SuperNode dials the SuperLink's public address over its own veth link, "
             "through a TCP relay in a router namespace that emulates the site's wide-area link (the kernel has no "
             "`netem`): `WAN 50 ms / 1%` delays every chunk 50 ms one way and loses each 1448-byte segment with "
             "probability 1%, a lost segment delaying its chunk (and, in order, everything behind it) by a 200 ms "
             "retransmission timeout; `relay without delay or loss` is the same path with neither. TLS (a test CA) "
             "and node authentication (ssh-keygen ECDSA P-384 keys registered with `flwr supernode register`) are "
             "on in every row; TMPDIR of every Flower process is /dev/shm, the superexec task poll Flower's default "
             "(1 s).", "",
             f"fdp-flower: `scenarios/deploy_demo.yaml` with federation.num_clients = {NETNS_NODES} on node-local "
             f"files (n = {NETNS_N:.0e} curves of the paper design split evenly, K = 10 fixed cosine basis, "
             "per-round eps = 0.5, every site's default policy: noise from OS entropy, a site ledger each). Floor: "
             "benchmarks/floor_app, the same messages (one per SuperNode and round, the same array sizes) and no "
             "work, replies collected by the same short poll. Round times as in scaling.md: `round (s)` the mean "
             "over all rounds, `round 1` and `round 2+` from the ServerApp's per-round log line; `WAN MB` the bytes "
             "the relay carried both ways, `lost` the emulated lost segments of all sites.", "",
             "| engine | rep | n | M | SuperNodes | rounds | setup (s) | round (s) | round 1 (s) | round 2+ (s) | "
             "peak RSS (GB) | ClientApp (s) | WAN MB | lost / segments | TLS conns | load | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["result"]
        lost = f"{res['wan_lost']} / {res['wan_segments']}" if "wan_lost" in res else "n/a"
        tls = f"{res['wan_tls']} of {res['wan_connections']}" if "wan_tls" in res else "n/a"
        lines.append(f"| {NETNS_LABELS[r['app'], r['variant']]} | {r.get('rep', 0) + 1} | {r['n']:.0e} | {r['M']} | "
                     f"{r['nodes']} | "
                     f"{r['rounds']} | {fmt(res.get('setup_s'), 2)} | {fmt(res.get('round_s'))} | "
                     f"{fmt(res.get('round1_s'))} | {fmt(res.get('later_round_s'))} | {fmt(res.get('peak_gb'), 2)} | "
                     f"{fmt(res.get('clientapp_s'), 2)} | {fmt(res.get('wan_mb'), 2)} | {lost} | {tls} | "
                     f"{r['load']:.1f} | {res.get('error', '')} |")
    lines += ["", "## Round time next to the plain-Flower floor", ""]

    def result(app: str, variant: str, rep: int) -> dict:
        return next((r["result"] for r in rows if (r["app"], r["variant"], r.get("rep", 0)) == (app, variant, rep)), {})

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    reps = sorted({r.get("rep", 0) for r in rows})
    for variant in ("lan", "wan"):
        pairs = [(result("fdp", variant, k), result("floor", variant, k)) for k in reps]
        pairs = [(o, f) for o, f in pairs if "round_s" in o and "round_s" in f]
        if not pairs:
            continue
        ours, floor = mean([o["round_s"] for o, _ in pairs]), mean([f["round_s"] for _, f in pairs])
        diffs = [o["round_s"] - f["round_s"] for o, f in pairs]
        later = [o["later_round_s"] - f["later_round_s"] for o, f in pairs if "later_round_s" in o and "later_round_s" in f]
        lines.append(f"- {NETNS_LABELS['fdp', variant].split(', ', 1)[1]}: fdp-flower {ours:.3f} s a round vs the floor's "
                     f"{floor:.3f} s (mean of {len(pairs)} back-to-back pair(s)); fdp-flower minus floor per pair "
                     f"{', '.join(f'{d:+.2f}' for d in diffs)} s (mean {mean(diffs):+.3f} s)"
                     + (f", rounds 2+ only {', '.join(f'{d:+.2f}' for d in later)} s (mean {mean(later):+.3f} s)"
                        if later else "")
                     + f"; the loopback goal of scaling.md (floor + 1 s) {verdict(ours, floor + 1.0)}.")
    for app in ("fdp", "floor"):
        lan = [result(app, "lan", k)["round_s"] for k in reps if "round_s" in result(app, "lan", k)]
        wan = [result(app, "wan", k)["round_s"] for k in reps if "round_s" in result(app, "wan", k)]
        if lan and wan:
            lines.append(f"- What the WAN added to a round of {'fdp-flower' if app == 'fdp' else 'the floor'}: "
                         f"{mean(wan) - mean(lan):+.3f} s ({mean(lan):.3f} -> {mean(wan):.3f} s, means over the "
                         f"repetitions; these rows ran minutes apart, so the load differs more than within a pair).")
    lines += ["", "## Notes", "",
              "- A message costs a SuperNode several HTTP requests to the SuperLink (pull the message and its "
              "objects, push the reply and its objects, heartbeats), each a round trip through the relay: with 100 "
              "ms of round-trip time added, the message cycle grows by a number of round trips, the same for both "
              "apps, since both send one message per SuperNode and round.",
              "- The relay terminates TCP on both sides: the kernels' flow control runs between each party and the "
              "relay, so the emulation adds latency and loss stalls but does not limit a transfer by the "
              "bandwidth-delay product (the messages here are small).",
              "- Rows ran in the order listed, each fdp-flower row right before its floor (the same load).", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def write_trust_report(path: Path, rows: list[dict], meta: dict) -> None:
    """--trust-modes: per-round time of the loopback deployment in privacy.trust site and secure_aggregation, and
    their ratio within each repetition (the two modes run back to back, in one benchmark run)."""
    lines = ["# Loopback deployment: round time with per-site noise vs secure aggregation (issue 32)", "",
             f"`python benchmarks/scaling.py --trust-modes --repeats {meta['repeats']}` on {meta['host']} "
             f"({meta['cpus']} CPUs shared with other work, load {meta['load']:.1f} at the start, "
             f"{meta.get('load_end', float('nan')):.1f} at the end), flwr {meta['flwr']}, "
             f"{meta.get('elapsed', 0.0) / 60:.1f} min.", "",
             f"Scenario: `{NETNS_SCENARIO.relative_to(ROOT)}` (node-local files of {TRUST_N} curves of the paper's "
             f"design in all, `fdp-flower partition`), one client on each of {TRUST_NODES} SuperNodes (a SuperLink and "
             f"{TRUST_NODES} SuperNodes on 127.0.0.1), {TRUST_ROUNDS} rounds, `{TRUST_OVERRIDES}`, and `privacy.trust` "
             "site or secure_aggregation (t = 0); every site's default policy (noise from OS entropy) but for "
             "`accept-trust = \"site,secure_aggregation\"` in both modes. In secure_aggregation every round is one "
             "SecAgg+ round (setup, share keys, collect masked vectors, unmask: four message exchanges instead of "
             "one). Round time on the ServerApp's clock (its "
             "\"round l/L done in s\" lines): all rounds, round 1 (the ClientApps' imports and the data), and the "
             "mean of rounds 2..L. Flower's default superexec task poll (1 s) and `TMPDIR=/dev/shm` in both modes.", "",
             "| rep | privacy.trust | s / round (all) | round 1 (s) | rounds 2..L (s / round) | setup (s) "
             "| ClientApp processes | peak RSS of the federation (GB) |",
             "|---|---|---|---|---|---|---|---|"]
    by_rep: dict[int, dict[str, dict]] = {}
    for r in rows:
        mode = r["variant"].removeprefix("trust-")
        res = r["result"]
        by_rep.setdefault(r.get("rep", 0), {})[mode] = res
        if "error" in res:
            lines.append(f"| {r.get('rep', 0)} | {mode} | failed: {res['error']} | | | | | |")
            continue
        lines.append(f"| {r.get('rep', 0)} | {mode} | {fmt(res['round_s'])} | {fmt(res.get('round1_s'))} | "
                     f"{fmt(res.get('later_round_s'))} | {fmt(res.get('setup_s'), 1)} | "
                     f"{res.get('clientapps', 'n/a')} | {fmt(res.get('peak_gb'), 2)} |")
    lines += ["", "Ratio secure_aggregation / site, each repetition's two runs back to back:", "",
              "| rep | all rounds | rounds 2..L |", "|---|---|---|"]
    for rep, modes in sorted(by_rep.items()):
        site, secure = modes.get("site", {}), modes.get("secure_aggregation", {})
        if "round_s" not in site or "round_s" not in secure:
            lines.append(f"| {rep} | n/a (a run failed) | |")
            continue
        later = (secure["later_round_s"] / site["later_round_s"]
                 if site.get("later_round_s") and secure.get("later_round_s") else None)
        lines.append(f"| {rep} | {secure['round_s'] / site['round_s']:.2f} | {fmt(later, 2)} |")
    failed = sum("error" in r["result"] for r in rows)
    lines += ["", f"Rows: `{path.with_name(path.stem + '_rows.jsonl').name}`. "
              + (f"All {len(rows)} runs completed the private fit (run status finished:completed)." if not failed
                 else f"{failed} of {len(rows)} runs did not complete (shown as failed above).")]
    path.write_text("\n".join(lines) + "\n")


def plan_cases(quick: bool, loopback_only: bool = False) -> list[tuple]:
    """(kind, app, variant, n, M, nodes, rounds) in the order they run, ours next to its floor (the same
    load).  Flower rounds: 30 in simulation and 6 in a loopback deployment (round 1 and the mean of the
    later rounds are reported apart: a later round's time is quantized by Flower's own polls -- the
    simulation runtime's, and a SuperNode's 3 s sleep after an empty pull -- so it takes several to average).
    ``loopback_only``: the loopback rows n = 1e5, M = 10 and 100 alone (4 rounds)."""
    if loopback_only:
        return [("loopback", app, "", 100_000, m, 3, 4) for m in (10, 100) for app in ("fdp", "floor")]
    if quick:
        return [("inprocess", "fdp", "", 10_000, 10, None, 10),
                ("loopback", "fdp", "", 10_000, 10, 3, 3), ("loopback", "floor", "", 10_000, 10, 3, 3),
                ("simulation", "fdp", "", 10_000, 10, 2, 3), ("simulation", "floor", "", 10_000, 10, 2, 3)]
    sizes, sim, loop = (100_000, 1_000_000), 30, 6
    cases = [("inprocess", "fdp", "", n, m, None, 30) for n in sizes for m in (10, 100, 1000)]
    cases += [("loopback", "fdp", "", 100_000, 10, 3, loop), ("loopback", "floor", "", 100_000, 10, 3, loop),
              ("loopback", "floor", "superexec-0.2", 100_000, 10, 3, loop),
              ("loopback", "fdp", "disk-tmp", 100_000, 10, 3, loop),
              ("loopback", "floor", "disk-tmp", 100_000, 10, 3, loop),
              ("loopback", "fdp", "", 1_000_000, 10, 3, loop), ("loopback", "floor", "", 1_000_000, 10, 3, loop)]
    for m in (10, 100, 1000):
        for n in sizes:
            for nodes in (2, 10):
                cases += [("simulation", "fdp", "", n, m, nodes, sim), ("simulation", "floor", "", n, m, nodes, sim)]
        if m > 10:
            for n in sizes:
                cases += [("loopback", "fdp", "", n, m, 3, loop), ("loopback", "floor", "", n, m, 3, loop)]
    return cases


def select_cases(cases: list[tuple], patterns: list[str]) -> list[tuple]:
    """The cases named by ``patterns`` (``kind:n:M``, e.g. ``loopback:1e5:1000``; ``*`` for any part)."""
    def matches(case, pattern):
        kind, n, m = (pattern.split(":") + ["*", "*"])[:3]
        return (kind in ("*", case[0]) and (n == "*" or int(float(n)) == case[3])
                and (m == "*" or int(m) == case[4]))
    return [c for c in cases if any(matches(c, p) for p in patterns)]


def goal_ratios(rows: list[dict]) -> dict[tuple, tuple[float, float]]:
    """(kind, n, M, nodes) -> (all rounds, later rounds) of fdp-flower's round over its goal's bound."""
    out = {}
    for r in rows:
        ours, n, m, nodes = r["result"], r["n"], r["M"], r.get("nodes")
        if r["app"] != "fdp" or r["kind"] == "inprocess" or r["variant"] or "round_s" not in ours:
            continue
        floor = find(rows, r["kind"], "floor", n, m, nodes)
        base = find(rows, "inprocess", "fdp", n, m) if r["kind"] == "simulation" else {"round_s": 0.5}
        if "round_s" not in floor or "round_s" not in base:
            continue
        extra = 2 * base["round_s"]  # simulation: 2 x the in-process round; loopback: 1 s
        later = (ours.get("later_round_s", float("nan")) / (extra + floor["later_round_s"])
                 if "later_round_s" in floor else float("nan"))
        out[r["kind"], n, m, nodes] = (ours["round_s"] / (extra + floor["round_s"]), later)
    return out


def write_ratios(path: Path, runs: list[Path]) -> None:
    """One table of every goal's ratio (fdp-flower's round / its bound; <= 1 meets it) over several runs."""
    tables = []
    for run in runs:
        records = [json.loads(line) for line in run.read_text().splitlines() if line.startswith("{")]
        tables.append(goal_ratios([r for r in records if "result" in r]))
    cells = sorted(set().union(*tables), key=lambda c: (c[0] != "simulation", c[2], c[1], c[3]))
    lines = ["# Scaling goals over several runs", "",
             f"`python benchmarks/scaling.py --ratios {' '.join(str(r.relative_to(ROOT)) for r in runs)}`: each goal "
             "as fdp-flower's round divided by its bound (simulation: 2 x the in-process round + the floor's round; "
             "loopback: the floor's round + 1 s), all rounds / rounds 2 to L; <= 1 meets the goal. Each run is one "
             "full `python benchmarks/scaling.py` (the rows files), on the same shared 2-core machine.", "",
             "| runtime | n | M | SuperNodes | " + " | ".join(f"{r.name} (all / 2+)" for r in runs) + " | mean of the runs (all / 2+) |",
             "|---|---|---|---|" + "---|" * (len(runs) + 1)]
    for cell in cells:
        kind, n, m, nodes = cell
        values = [t.get(cell) for t in tables]
        shown = [f"{v[0]:.2f} / {v[1]:.2f}" if v else "-" for v in values]
        got = [v for v in values if v]
        mean = (sum(v[0] for v in got) / len(got), sum(v[1] for v in got) / len(got)) if got else None
        lines.append(f"| {kind} | {n:.0e} | {m} | {nodes} | " + " | ".join(shown) +
                     (f" | {mean[0]:.2f} / {mean[1]:.2f} |" if mean else " | - |"))
    over = [(cell, i) for cell in cells for i, t in enumerate(tables) if cell in t and max(t[cell]) > 1]
    lines += ["", f"Ratios above 1: {len(over)} of {2 * sum(len(t) for t in tables)}"
              + ("" if not over else " (" + "; ".join(f"{runs[i].name}: {c[0]} n = {c[1]:.0e}, M = {c[2]}, {c[3]} nodes"
                                                        for c, i in over) + ")") + ".", ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke version")
    parser.add_argument("--loopback-only", action="store_true",
                        help="only the loopback rows n = 1e5, M = 10 and 100 (benchmarks/results/scaling_batched.md)")
    parser.add_argument("--budget-min", type=float, default=60.0,
                        help="start no new case after this many minutes (the rest is reported as skipped)")
    parser.add_argument("--netns", action="store_true",
                        help=f"a deployment in network namespaces ({NETNS_NODES} SuperNodes, TLS, node authentication) "
                             "with and without an emulated WAN, next to the floor app (scaling_netns.md; needs root)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="--netns: run the four rows this many times; --trust-modes: the two rows")
    parser.add_argument("--trust-modes", action="store_true",
                        help=f"a loopback deployment ({TRUST_NODES} SuperNodes) in privacy.trust site and "
                             "secure_aggregation, round times and their ratio (scaling_secure_aggregation.md)")
    parser.add_argument("--rows", type=Path, help="re-write the report from a run's printed rows (JSON lines)")
    parser.add_argument("--select", nargs="+", metavar="KIND:N:M",
                        help="run only these cases, e.g. loopback:1e5:1000 simulation:*:1000 (report: scaling_selected.md)")
    parser.add_argument("--ratios", nargs="+", type=Path, metavar="ROWS",
                        help="the goals' ratios over several runs' rows files (benchmarks/results/scaling_runs.md)")
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_inprocess(*args.child)
        return 0
    out = RESULTS / ("scaling_quick.md" if args.quick else "scaling_batched.md" if args.loopback_only
                     else "scaling_netns.md" if args.netns
                     else "scaling_secure_aggregation.md" if args.trust_modes
                     else "scaling_selected.md" if args.select else "scaling.md")
    report = write_netns_report if args.netns else write_trust_report if args.trust_modes else write_report
    if args.ratios:
        write_ratios(RESULTS / "scaling_runs.md", [r.resolve() for r in args.ratios])
        print(f"wrote {RESULTS / 'scaling_runs.md'}")
        return 0
    if args.rows:
        records = [json.loads(line) for line in args.rows.read_text().splitlines() if line.startswith("{")]
        meta = next(r["meta"] for r in records if "meta" in r)
        report(out, [r for r in records if "result" in r], meta)
        print(f"wrote {out}")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the running federation on SIGTERM too
    from importlib.metadata import version

    meta = {"quick": args.quick, "loopback_only": args.loopback_only, "select": args.select, "netns": args.netns,
            "trust_modes": args.trust_modes,
            "repeats": args.repeats,
            "host": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg()[0], "flwr": version("flwr")}
    print(json.dumps({"start": meta}), flush=True)
    started = time.monotonic()
    rows: list[dict] = []
    cases = ([("netns", app, variant, NETNS_N, NETNS_NODES, NETNS_NODES, NETNS_ROUNDS, rep)
              for rep in range(args.repeats) for variant in ("lan", "wan") for app in ("fdp", "floor")] if args.netns
             else [("loopback", "fdp", f"trust-{mode}", TRUST_N, TRUST_NODES, TRUST_NODES, TRUST_ROUNDS, rep)
                   for rep in range(args.repeats) for mode in ("site", "secure_aggregation")] if args.trust_modes
             else [(*case, 0) for case in plan_cases(args.quick, args.loopback_only)])
    for kind, app, variant, n, m, nodes, rounds, rep in select_cases(cases, args.select) if args.select else cases:
        if time.monotonic() - started > 60 * args.budget_min:
            result = {"error": f"skipped: the run's {args.budget_min:.0f} min budget was used up"}
        elif kind == "inprocess":
            result = inprocess(n, m, rounds)
        elif kind == "netns":
            result = flower(kind, app, n, m, rounds, nodes, profile=netns_profile(variant))
        elif variant.startswith("trust-"):
            result = flower(kind, app, n, m, rounds, nodes, trust=variant.removeprefix("trust-"))
        else:
            result = flower(kind, app, n, m, rounds, nodes, poll="flower" if variant == "send_and_receive" else "short",
                            superexec_poll=SUPEREXEC_POLL if variant == "superexec-0.2" else None,
                            tmpdir=None if variant == "disk-tmp" else FAST_TMPDIR)
        row = {"kind": kind, "app": app, "variant": variant, "n": n, "M": m, "nodes": nodes, "rounds": rounds,
               "load": os.getloadavg()[0], "result": result,
               **({"rep": rep} if kind == "netns" or args.trust_modes else {})}
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta.update(elapsed=time.monotonic() - started, load_end=os.getloadavg()[0])
    print(json.dumps({"meta": meta}), flush=True)
    rows_file = out.with_name(f"{out.stem}_rows.jsonl")  # the file the report names, so --rows can re-write it
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {"meta": meta}]))
    report(out, rows, meta)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
