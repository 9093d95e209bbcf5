"""Step-size schedules eta_i^l (docs/algorithms.md, section 1)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STEP_SCHEDULES = ("theorem2", "constant", "inv_sqrt", "inv")


@dataclass(frozen=True)
class StepSchedule:
    """eta^l for round l >= 1.

    kind : theorem2 | constant | inv_sqrt (eta0 / sqrt(l)) | inv (eta0 / l)
    eta0 : base step of constant / inv_sqrt / inv (default: 1.0)
    scale : multiplier of the Theorem 2 step (default: 1.0)
    """

    kind: str = "theorem2"
    eta0: float = 1.0
    scale: float = 1.0

    def __post_init__(self):
        if self.kind not in STEP_SCHEDULES:
            raise ValueError(f"unknown step schedule {self.kind!r}; choose one of {', '.join(STEP_SCHEDULES)}")
        if not (self.eta0 > 0 and self.scale > 0):
            raise ValueError("eta0 and scale must be > 0")

    def __call__(self, round_: int, *, theorem2_base: float | np.ndarray = 1.0):
        """Step size at round ``round_``; ``theorem2_base`` is eta of Theorem 2 at l = 1/2."""
        if round_ < 1:
            raise ValueError(f"rounds start at 1, got {round_}")
        if self.kind == "theorem2":
            return self.scale * np.asarray(theorem2_base) / np.sqrt(round_)
        if self.kind == "constant":
            return self.eta0
        if self.kind == "inv_sqrt":
            return self.eta0 / np.sqrt(round_)
        return self.eta0 / round_


def theorem2_base(
    *, c_w: float, c1: float, c2: float, lam: float, num_clients: int, dim: int,
    m: np.ndarray | float, noise_multiplier: float | None,
) -> np.ndarray:
    """c_w / sqrt(2) * ((c1 + lam c2 / M)^2 + K (2 c1 z / m)^2)^(-1/2).

    Zhou & Xiang (2022), Theorem 2 with the 1/sqrt(l) factor left out.  With the paper's
    per-round rule z = sqrt(2 ln(1.25/delta)) / eps the noise term is exactly its
    8 K c1^2 ln(1.25/delta) / (m^2 eps^2); in total-budget mode z is the
    calibrated multiplier.  ``noise_multiplier=None`` (privacy off) drops it.
    """
    m = np.asarray(m, dtype=float)
    first = (c1 + lam * c2 / num_clients) ** 2
    noise = 0.0 if noise_multiplier is None else dim * (2.0 * c1 * noise_multiplier / m) ** 2
    return c_w / np.sqrt(2.0) / np.sqrt(first + noise)
