"""Diagnosis of the Brownian tau = 0.9 cells (STATUS.md): the non-private band of repetitions 0-2 with the
benchmark's fit at ``rounds`` rounds (default schedule: 80).  Run from the repository root:

    PYTHONPATH=$PWD nice -n 10 python benchmarks/results/confidence_bands/diagnose_rounds.py 400

Prints: rounds, rep, pointwise / simultaneous / intercept coverage, beta RMSE, mean sampling sd, ||A||,
intercept error in sds, seconds.
"""
import sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks")); sys.path.insert(0, str(ROOT))
import numpy as np
import fdp_flower, fdp_flower.api
import confidence_bands as cb
cb._init_worker()
rounds = int(sys.argv[1])
orig = fdp_flower.api.fit
def fit(*a, **k):
    if k.get("rounds") is None:
        k["rounds"] = rounds
    return orig(*a, **k)
fdp_flower.api.fit = fit
cb.EPSILONS = (None,)
for rep in range(3):
    t = time.time()
    for r in cb.run_job(("brownian", 0.9, rep, 100)):
        print(rounds, rep, r["cover_pointwise"], r["cover_simultaneous"], r["cover_intercept"], round(r["beta_rmse"], 4),
              round(r["sd_sampling"], 4), round(r["transient"], 3), round(r["intercept_error"] / r["intercept_sd"], 2),
              round(time.time() - t, 1), flush=True)
