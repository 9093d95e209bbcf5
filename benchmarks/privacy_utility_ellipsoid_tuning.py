"""Tuning of the ellipsoid clip for l2 (issue 9) on seeds disjoint from the evaluation seeds.

    python benchmarks/privacy_utility_ellipsoid_tuning.py     # about 5 minutes on 2 shared cores

Zhou & Xiang (2022) design (n = 100000, K = 10, tau = 0.5), total eps = 1, delta = 1e-5 per client, l2 penalty,
``model.clip_shape: ellipsoid`` with Mahalanobis radius gamma (``clip_c1``), tail average of the last half,
seeds 1000-1003 (the evaluation in benchmarks/privacy_utility.py uses seeds 0-19).  Prints the mean ratio
private MISE / exact non-private MISE per (M, gamma, rounds, constant step).  Output recorded in
benchmarks/results/privacy_utility/tuning.md.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)
import privacy_utility as pu  # noqa: E402

from fdp_flower.engines.batched import run_batched  # noqa: E402

SEEDS = (1000, 1001, 1002, 1003)
GRIDS = ([(4.0, r, e) for r, e in ((80, 3.0), (80, 5.0), (120, 3.0), (160, 3.0), (120, 5.0))],
         [(g, r, e) for g in (3.5, 4.0, 5.0) for r, e in ((120, 5.0), (120, 8.0), (200, 5.0), (200, 8.0), (80, 8.0))])


def main() -> None:
    cache_path = Path("/tmp/privacy_utility_tuning_cache.json")
    cache = pu.load_cache(cache_path)
    for grid in GRIDS:
        for num_clients in pu.CLIENTS:
            exact = {s: pu.exact_mise(num_clients, "l2", s, cache, cache_path) for s in SEEDS}
            cells = []
            for gamma, rounds, eta0 in grid:
                runs = run_batched([pu.ellipsoid_scenario(num_clients, "l2", s, 1.0, clip_c1=gamma, rounds=rounds,
                                                          eta0=eta0) for s in SEEDS], history=False)
                ratio = np.mean([r.final["mise_estimate"] / exact[s] for r, s in zip(runs, SEEDS)])
                cells.append(f"g={gamma} R={rounds} eta={eta0}: {ratio:.3f}")
            print(num_clients, " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
