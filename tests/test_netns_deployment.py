"""A deployment tested the way sites run it: a SuperLink and five SuperNodes in separate network
namespaces (tests/netns_harness.py), each SuperNode behind an emulated wide-area link (50 ms one way,
1% segment loss costing a 200 ms retransmission timeout), TLS with a CA made in the test, node
authentication with SSH-format ECDSA P-384 keys registered by ``flwr supernode register``, node-local
data files and each site's default privacy policy (noise from OS entropy, a site ledger each).

The private FDP-ADMM fit must complete while one site's SuperNode is killed after round 2 and started
again (same key, same data, same ledger) after the round that failed without it: the site is marked
failed only in the rounds it missed and releases again after it rejoined; a SuperNode with an
unregistered key is never let in.  Skips, saying why, where network namespaces cannot be made.

The relay's own test (not slow) checks the emulated latency and loss on a plain echo connection.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fdp_flower.functional.node_files import load_dataset, partition, write_partitions
from fdp_flower.outputs.checkpoint import read_checkpoint
from tests.netns_harness import (
    LINK_IP,
    PUBLIC_IP,
    LinkProfile,
    NetnsFederation,
    WanRelay,
    call_in_netns,
    make_node_key,
    netns_unavailable,
    site_ip,
)

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_demo.yaml"
NODES, ROUNDS = 5, 8
DROPPED = 2  # the site whose SuperNode is killed ...
DROP_AFTER = 2  # ... once this round is checkpointed, and restarted once the next round is
OVERRIDES = (f"federation.num_clients={NODES}; algorithm.rounds={ROUNDS}; output.checkpoint_every=1; "
             "faults.reply_timeout=45; faults.quorum=0.5")
WAN = LinkProfile(delay_s=0.05, loss=0.01, rto_s=0.2)
FAST_TMPDIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None

HAVE_FLOWER = shutil.which("flower-superlink") is not None or (Path(sys.executable).parent / "flower-superlink").exists()


@pytest.fixture(scope="module")
def netns():
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")


def _checkpoint_round(results: Path) -> int:
    for ck in results.glob("*/checkpoint.npz"):
        try:
            return read_checkpoint(ck).round
        except ValueError:  # being written
            return 0
    return 0


def _wait_round(results: Path, round_: int, runner: threading.Thread, fed: NetnsFederation, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _checkpoint_round(results) < round_:
        assert runner.is_alive() and time.monotonic() < deadline, fed.logs()
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_FLOWER, reason="flower-superlink not installed")
def test_a_private_fit_over_an_emulated_wide_area_network_survives_a_site_dropping_out(tmp_path, netns):
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=2500), NODES), tmp_path / "data", "npz")
    results = tmp_path / "results"
    fed = NetnsFederation(tmp_path, data_paths=paths, profile=WAN, tmpdir=FAST_TMPDIR)
    outcome: dict = {}
    try:
        fed.start()
        # a SuperNode whose key the operator never registered, in site 0's network
        rogue_key, _ = make_node_key(tmp_path / "keys", "unregistered")
        rogue_args = list(fed._node_args[0])
        rogue_args[rogue_args.index("--auth-supernode-private-key") + 1] = str(rogue_key)
        rogue_args[rogue_args.index("--port") + 1] = "9095"
        rogue = fed._spawn("supernode-0-unregistered", rogue_args)

        started = time.monotonic()
        runner = threading.Thread(target=lambda: outcome.update(zip(("run_id", "status"), fed.run(
            {"scenario": str(SCENARIO), "overrides": OVERRIDES, "results-dir": str(results)}, timeout=900))))
        runner.start()
        _wait_round(results, DROP_AFTER, runner, fed, 400)
        fed.kill_node(DROPPED)
        killed_after = _checkpoint_round(results)
        _wait_round(results, killed_after + 1, runner, fed, 400)
        starts = fed.restart_node_until_accepted(DROPPED)
        restarted_after = _checkpoint_round(results)
        runner.join(900)
        assert not runner.is_alive()
        elapsed = time.monotonic() - started
        assert outcome.get("status") == "finished:completed", fed.logs()
        listed = fed._flwr("supernode", "ls", fed.connection, "--format", "json", timeout=60)
        rogue_log = (tmp_path / "supernode-0-unregistered.log").read_text()
        rogue_exit = rogue.poll()
        stats = {site: vars(s).copy() for site, s in fed.relay.stats.items()}
    finally:
        fed.stop()
    assert killed_after < restarted_after < ROUNDS, "the run outpaced the drop-out; make it longer"

    # the fit: completed, private (every release charged, on the server and at each site)
    (out,) = list(results.glob(f"*run{outcome['run_id']}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["rounds_completed"] == ROUNDS
    assert summary["sample_sizes"] == [500] * NODES
    sites = {s["client"]: s for s in summary["privacy"]["sites"]}
    assert sorted(sites) == list(range(NODES))
    assert all(s["noise_source"] == "os_entropy" for s in sites.values())
    ledger = list(csv.DictReader(open(out / "ledger.csv")))
    failures = list(csv.DictReader(open(out / "failures.csv")))
    for i in range(NODES):  # each site's own ledger holds every release it made, as its last reply reported
        rows = [json.loads(line) for line in (tmp_path / f"site-{i}" / "site-ledger.jsonl").read_text().splitlines()]
        site_ledger = [r for r in rows if r["kind"] == "release"]  # after the chain's "open" record
        assert len(site_ledger) == sites[i]["run_releases"] == sites[i]["releases"]
        charged = sum(int(r["client"]) == i for r in ledger)  # the server's ledger: releases + charged failures
        lost = sum(int(f["client"]) == i and f["charged"] == "1" for f in failures)
        assert charged - lost <= len(site_ledger) <= charged, (i, len(site_ledger), charged, lost)

    # the drop-out: client DROPPED failed from the round in flight at the kill until it rejoined, only then
    assert {int(f["client"]) for f in failures} == {DROPPED}, failures
    failed = sorted({int(f["round"]) for f in failures})
    assert failed == list(range(failed[0], failed[-1] + 1)), failed
    assert killed_after <= failed[0] - 1 and failed[-1] < ROUNDS, (killed_after, failed)
    released = sorted(int(r["round"]) for r in ledger if int(r["client"]) == DROPPED)
    after = [r for r in released if r > failed[-1]]
    assert after == list(range(failed[-1] + 1, ROUNDS + 1)), released  # back in every round after it rejoined
    others = [sorted(int(r["round"]) for r in ledger if int(r["client"]) == i) for i in range(NODES) if i != DROPPED]
    assert all(rounds == list(range(1, ROUNDS + 1)) for rounds in others)

    # node authentication: five registered nodes; the unregistered one was never let in
    nodes = json.loads(listed.stdout)["nodes"]
    assert sorted(int(n["node-id"]) for n in nodes) == sorted(fed.node_ids.values()), nodes
    assert rogue_exit is not None and "Failed to activate SuperNode" in rogue_log, rogue_log[-2000:]
    assert "No SuperNode found with the given public key" in (tmp_path / "superlink.log").read_text()
    # TLS end to end through the relay, and the emulated WAN carried (and lost) traffic of every site
    for site, s in stats.items():
        assert s["connections"] > 0 and s["tls_connections"] == s["connections"], (site, s)
    assert sum(s["lost_segments"] for s in stats.values()) > 0, stats
    rounds = [float(t) for t in re.findall(r"fdp-flower: round \d+/\d+ done in ([\d.]+)s",
                                           (tmp_path / "flwr_run.log").read_text())]
    print(f"{NODES} SuperNodes over a {WAN.delay_s * 1e3:.0f} ms / {WAN.loss:.0%} WAN: {ROUNDS} rounds in "
          f"{elapsed:.0f} s (round times {', '.join(f'{t:.1f}' for t in rounds)} s); site {DROPPED} killed after "
          f"round {killed_after}, accepted again after round {restarted_after} ({starts} starts), failed in rounds "
          f"{failed}; "
          f"unregistered node exit code {rogue_exit}; relay: "
          + "; ".join(f"{k} {v['connections']} TLS connections, {v['bytes'] / 1e6:.2f} MB, {v['lost_segments']} "
                      f"of {v['segments']} segments lost" for k, v in stats.items()))


def _echo_server(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


def test_the_relay_delays_each_chunk_and_charges_lost_segments_a_timeout(tmp_path, netns):
    """Echo through the relay: a round trip takes at least 2 x delay; with loss 0.5 a chunk of 10 segments
    is almost surely hit and waits rto more; at 1 Mbit/s 14480 bytes take 0.116 s each way; the per-site
    counters add up."""
    fed = NetnsFederation(tmp_path, data_paths=[tmp_path / "unused"] * 2)  # the network only
    try:
        fed._build_network()
        server = call_in_netns(fed.link_ns, lambda: socket.create_server((LINK_IP, 7000)))
        threading.Thread(target=_echo_server, args=(server,), daemon=True).start()
        slow = LinkProfile(delay_s=0.1, loss=0.5, rto_s=0.3)
        narrow = LinkProfile(delay_s=0.01, loss=0.0, rate_mbit=1.0)
        relay = WanRelay(fed.wan_ns, (PUBLIC_IP, 7000), (LINK_IP, 7000),
                         {site_ip(0): ("site0", slow), site_ip(1): ("site1", narrow)}, seed=1).start()
        fed.relay = relay

        def exchange(payload: bytes) -> float:
            with socket.create_connection((PUBLIC_IP, 7000), timeout=10) as s:
                start = time.monotonic()
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    got += s.recv(65536)
                assert got == payload
                return time.monotonic() - start
        small = call_in_netns(fed.site_ns(0), exchange, b"x")
        large = call_in_netns(fed.site_ns(0), exchange, os.urandom(10 * 1448))
        rated = call_in_netns(fed.site_ns(1), exchange, os.urandom(10 * 1448))
        def connect_directly() -> int:
            with socket.socket() as s:
                s.settimeout(2.0)
                return s.connect_ex((LINK_IP, 7000))
        direct = call_in_netns(fed.site_ns(0), connect_directly)
        stats = relay.stats["site0"]
    finally:
        server.close()
        fed.stop()
    assert small >= 2 * slow.delay_s
    assert large >= 2 * slow.delay_s + slow.rto_s  # P(no loss in 10 + 10 segments at 0.5) = 1e-6
    assert rated >= 2 * (narrow.delay_s + 10 * 1448 * 8 / 1e6)
    assert relay.stats["site1"].lost_segments == 0 and relay.stats["site1"].bytes == 2 * 10 * 1448
    assert direct != 0  # no route around the relay: the wan namespace does not forward packets
    assert stats.connections == 2 and stats.tls_connections == 0 and stats.lost_segments > 0
    assert stats.bytes == 2 * (1 + 10 * 1448)
    assert not any(name.startswith(fed.prefix) for name in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
