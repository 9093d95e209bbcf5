"""What one FDP-ADMM train message costs a SuperNode, apart from Flower's messaging.

    python benchmarks/message_cost.py      # writes benchmarks/results/message_cost.md

For n in {1e5, 1e6} and M in {10, 100, 1000} on 3 SuperNodes (the busiest node hosts ceil(M / 3)
clients, all in one message), two fresh processes per case emulate what a deployment's
``flwr-clientapp`` processes do with the real ClientApp entry (``fdp_flower.client_app.train``) and
the run config ``flwr run`` sends:

1. round 1: the message carries the basis; the node generates and projects its clients' slices and
   writes its feature-cache file (FLWR_HOME in a temporary directory);
2. round 2, in a new process (as a deployment starts one per message): import Flower, import the
   ClientApp, handle the message (parse the scenario, import the FDP-ADMM worker, read the node's
   cache file once, step every client, draw each client's noise, pack the reply).

Times are wall-clock seconds, BLAS one thread, one run; the machine is shared, so compare rows of
one run.  Flower's own per-message costs (FAB extraction, the SuperNode's polls) are in
benchmarks/results/scaling.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "flwr_default.yaml"
RESULTS = ROOT / "benchmarks" / "results"
ENV_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
NODES = 3


def _child(phase: str, n: int, clients: int, work: Path) -> dict:
    """One emulated ClientApp process: ``phase`` 'first' (round 1) or 'later' (round 2)."""
    import warnings

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
        from flwr.app import ConfigRecord, Context, Message, RecordDict
        from flwr.supercore.task_identity import TaskIdentity
    t_flower = time.perf_counter() - t0
    t0 = time.perf_counter()
    from fdp_flower import client_app
    t_app = time.perf_counter() - t0

    import numpy as np

    from fdp_flower.wire import BASIS_DIGEST_KEY, BASIS_PREFIX, BATCH_CLIENTS_KEY, basis_digest, pack_arrays

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 7, 1
    run_config = {"scenario": str(SCENARIO), "results-dir": str(work / "results"), "resume": "",
                  "overrides": f"data.n_samples={n}; federation.num_clients={clients}"}
    hosted = list(range(0, clients, NODES))  # node 1 of 3: clients 0, 3, 6, ... (round-robin)
    basis_file = work / "basis.npz"
    if phase == "first":  # the server's basis (computed here, outside the timed part)
        from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
        from fdp_flower.clients.common import run_scenario

        scenario = run_scenario(Context(run_id=7, node_id=1, node_config={}, state=RecordDict(),
                                        run_config=run_config))
        _sizes, basis, *_ = simulation_setup(scenario, with_reference=False)
        np.savez(basis_file, **basis.to_arrays())
    with np.load(basis_file) as stored:
        basis_arrays = {k: stored[k] for k in stored.files}
    digest = basis_digest(basis_arrays)
    rng = np.random.default_rng(0)
    from fdp_flower.functional.fpca import FunctionalBasis

    dim = FunctionalBasis.from_arrays(basis_arrays).n_components  # the scenario has no intercept coordinate
    context = Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=run_config)
    if phase == "later":  # the SuperNode hands the state (the basis) kept from round 1 to the new process
        from fdp_flower.clients.fdp_admm import node_basis

        node_basis(context, {BASIS_PREFIX + k: v for k, v in basis_arrays.items()}, digest)

    def message(round_: int, with_basis: bool) -> Message:
        arrays = {"global_w": rng.normal(size=dim), "duals": rng.normal(size=(len(hosted), dim)),
                  "noisy_primals": rng.normal(size=(len(hosted), dim))}
        if with_basis:
            arrays.update({BASIS_PREFIX + k: v for k, v in basis_arrays.items()})
        config = ConfigRecord({"round": round_, BATCH_CLIENTS_KEY: hosted, BASIS_DIGEST_KEY: digest, "rho": 0.1})
        msg = Message(RecordDict({"arrays": pack_arrays(**arrays), "config": config}), dst_node_id=1,
                      message_type="train")
        msg.metadata.__dict__["_message_id"] = "m" * 64
        return msg

    msg = message(1 if phase == "first" else 2, with_basis=phase == "first")
    t0 = time.perf_counter()
    reply = client_app.train(msg, context)
    t_handle = time.perf_counter() - t0
    if reply.has_error():
        raise RuntimeError(reply.error.reason)
    released = reply.content["arrays"]["noisy_primals"].numpy().shape[0]
    if released != len(hosted):
        raise RuntimeError(f"{released} of {len(hosted)} clients released")
    return {"import_flower_s": t_flower, "import_app_s": t_app, "handle_s": t_handle, "clients": len(hosted)}


def measure(n: int, clients: int) -> dict:
    env = {**os.environ, **ENV_ONE_THREAD, "FLWR_TELEMETRY_ENABLED": "0"}
    with tempfile.TemporaryDirectory(prefix="message-cost-") as tmp:
        env["FLWR_HOME"] = str(Path(tmp) / "flwr-home")
        out = {}
        for phase in ("first", "later"):
            done = subprocess.run([sys.executable, __file__, "--child", phase, str(n), str(clients), tmp],
                                  env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
            out[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        phase, n, clients, work = args.child
        print(json.dumps(_child(phase, int(n), int(clients), Path(work))))
        return 0
    started, load = time.monotonic(), os.getloadavg()[0]
    lines = ["# What one FDP-ADMM train message costs a SuperNode", "",
             f"`python benchmarks/message_cost.py`, one run on {platform.node()} ({os.cpu_count()} CPUs, load average "
             f"at start {load:.1f}); BLAS one thread. Each row: the busiest of 3 SuperNodes (ceil(M / 3) clients in "
             "one message), `scenarios/flwr_default.yaml` with n and M as shown. Round 1: the process that also "
             "generates and projects the node's slices and writes its feature-cache file. Round 2: a new process "
             "(as in a deployment): import Flower, import the ClientApp, handle the message (scenario, worker "
             "import, one cache-file read, every client's step and noise, the reply).", "",
             "| n | M | clients in the message | round 1: handle (s) | round 2: import Flower (s) | "
             "import ClientApp (s) | handle (s) | handle per client (ms) |", "|---|---|---|---|---|---|---|---|"]
    for n in (100_000, 1_000_000):
        for clients in (10, 100, 1000):
            r = measure(n, clients)
            print(json.dumps({"n": n, "M": clients, **r}), flush=True)
            if "error" in r:
                lines.append(f"| {n:.0e} | {clients} | - | {r['error']} | | | | |")
                continue
            first, later = r["first"], r["later"]
            lines.append(f"| {n:.0e} | {clients} | {later['clients']} | {first['handle_s']:.3f} | "
                         f"{later['import_flower_s']:.3f} | {later['import_app_s']:.3f} | {later['handle_s']:.3f} | "
                         f"{1000 * later['handle_s'] / later['clients']:.2f} |")
    lines += ["", f"{(time.monotonic() - started) / 60:.1f} min in all; load average at the end "
              f"{os.getloadavg()[0]:.1f}.", ""]
    out = RESULTS / "message_cost.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
