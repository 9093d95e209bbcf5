"""Tuning grid of issue 9 on seeds disjoint from the evaluation seeds (public simulation design only).

    python benchmarks/privacy_utility_tuning.py M PENALTY SEEDS [K] [C1] [ROUNDS_JSON] [STEPS_JSON] [SCHEDULES_JSON]
    e.g. python benchmarks/privacy_utility_tuning.py 50 l2 1000,1001 10 3 '[20,40,80]' \
         '[{"kind":"constant","eta0":1.5},{"kind":"constant","eta0":3.0}]'

Total eps = 1, delta = 1e-5 per client; every configuration is run once per seed by the batched
engine with its trace of global iterates w^1..w^L, from which four released estimators are read
(last iterate, full average, tail averages of the last half and last quarter: post-processing of
one run).  Prints the configurations sorted by mean ratio to the exact non-private estimator
(K = 10, c1 = 3; cached in ``--cache``, default /tmp/privacy_utility_tuning_cache.json).
The evaluation (benchmarks/privacy_utility.py) uses seeds 0 .. 19.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import privacy_utility as pu

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.engines.batched import run_batched, shared_setup
from fdp_flower.functional import design


def scenario(M, pen, seed, rounds, step, sched, K, c1, eps=1.0):
    return parse_scenario({
        "seed": seed, "data": {"n_samples": 100000}, "federation": {"num_clients": M},
        "basis": {"kind": "pooled", "n_components": K},
        "model": {"loss": {"kind": "quantile", "tau": 0.5}, "penalty": {"kind": pen}, "clip_c1": c1},
        "algorithm": {"rounds": rounds, "step": step},
        "privacy": {"enabled": True, "mode": "total", "eps": eps, "delta": pu.DELTA, "schedule": sched}})


def estimators(trace):
    L = len(trace)
    out = {"last": trace[-1], "avg": trace.mean(0)}
    for f in (0.5, 0.25):
        out[f"tail{f}"] = trace[int(np.floor((1 - f) * L)):].mean(0)
    return out


def main() -> None:
    M, pen, seeds = int(sys.argv[1]), sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
    K = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    c1 = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
    rounds_grid = json.loads(sys.argv[6]) if len(sys.argv) > 6 else [40, 80, 160]
    steps = json.loads(sys.argv[7]) if len(sys.argv) > 7 else [{"kind": "constant", "eta0": 3.0}]
    scheds = json.loads(sys.argv[8]) if len(sys.argv) > 8 else [{"kind": "constant"}]
    if min(seeds) < 1000:
        raise SystemExit("tuning seeds must be >= 1000 (0 .. 999 are evaluation seeds)")
    configs = []
    for seed in seeds:
        for rounds in rounds_grid:
            for step in steps:
                for sched in scheds:
                    sch = dict(sched)
                    if sch.get("period") == "half":
                        sch["period"] = rounds // 2
                    configs.append((seed, rounds, json.dumps(step) + json.dumps(sch),
                                    scenario(M, pen, seed, rounds, step, sch, K, c1)))
    t0 = time.time()
    results = run_batched([c[-1] for c in configs], history=False, trace=True)
    print(f"{len(configs)} runs in {time.time() - t0:.0f} s", flush=True)
    cache_path = Path("/tmp/privacy_utility_tuning_cache.json")
    cache, pooled, refs = pu.load_cache(cache_path), {}, {}
    for seed in seeds:
        data = shared_setup(configs[[c[0] for c in configs].index(seed)][-1])
        refs[seed] = (pu.exact_mise(M, pen, seed, cache, cache_path, pooled), data)
    table: dict = {}
    for (seed, rounds, setting, _), res in zip(configs, results):
        exact, data = refs[seed]
        for name, w in estimators(res.trace).items():
            mise = float(design.mise(data.basis.function(w), data.beta, data.basis.grid))
            table.setdefault((rounds, setting, name), []).append(mise / exact)
    for key, ratios in sorted(table.items(), key=lambda kv: np.mean(kv[1])):
        print(f"{np.mean(ratios):8.3f}  rounds={key[0]} {key[1]} estimator={key[2]}")


if __name__ == "__main__":
    main()
