"""FDP-ADMM / F-ADMM update rules (Zhou & Xiang 2022, Section 3 and Section 5; docs/algorithms.md, section 1).

Consensus problem min sum_i f_i(w_i) s.t. w_i = w with
f_i(w) = (1/m_i) sum_j l(w; a_ij, y_ij) + (lam/M) P(w) and local augmented
Lagrangian L_i = f_i(w_i) - <g_i, w_i - w> + (rho/2) ||w_i - w||^2.
All functions are pure and broadcast over leading (client, repetition) axes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fdp_flower.core.losses import Loss
from fdp_flower.core.penalties import Penalty


@dataclass(frozen=True)
class Objective:
    """The penalized problem sum_i f_i(w) shared by clients, server and reference."""

    loss: Loss
    penalty: Penalty
    lam: float
    num_clients: int

    def local_subgradient(self, w, features, response, mask=None) -> np.ndarray:
        """f_i'(w) = (1/m_i) sum_j grad l(w; a_ij, y_ij) + (lam/M) P'(w)."""
        return (self.loss.mean_subgradient(w, features, response, mask)
                + (self.lam / self.num_clients) * self.penalty.subgradient(w))

    def local_value(self, w, features, response, mask=None) -> np.ndarray:
        """f_i(w)."""
        return (self.loss.mean(w, features, response, mask)
                + (self.lam / self.num_clients) * self.penalty.value(w))


def server_primal_step(*, objective: Objective, noisy_primal, global_w, dual, descent, eta, rho) -> np.ndarray:
    """The server's step from a client's released descent term d~_i, docs/algorithms.md, eq. (1.2):

    w_i^l = (g_i^{l-1} + rho w^{l-1} + wt_i^{l-1} / eta + d~_i - (lam/M) P'(wt_i^{l-1})) / (rho + 1/eta),

    d~_i = -(1/m_i) sum_j grad l(wt_i^{l-1}; a_ij, y_ij) + noise (:mod:`fdp_flower.algorithms.fdp_admm.site`,
    eq. (1.3)).  Everything but d~_i is public (the penalty's subgradient at the public point too), so this
    is post-processing.  Broadcasts over leading (configuration, client) axes like :func:`client_primal_step`.
    """
    penalty = (objective.lam / objective.num_clients) * objective.penalty.subgradient(noisy_primal)
    eta = np.asarray(eta, dtype=float)
    return (dual + rho * global_w + noisy_primal / eta + descent - penalty) / (rho + 1.0 / eta)


def client_primal_step(*, objective: Objective, noisy_primal, global_w, dual, features, response,
                       eta, rho, mask=None) -> np.ndarray:
    """The noise-free linearized local update, docs/algorithms.md, eq. (1.2) (Zhou & Xiang 2022, eq. in Sec. 5.1):

    w_i^l = (g_i^{l-1} + rho w^{l-1} + wt_i^{l-1} / eta - f_i'(wt_i^{l-1})) / (rho + 1/eta),
    i.e. :func:`server_primal_step` with the noise-free descent term.  ``eta`` broadcasts over the client
    axis (shape (..., 1) or scalar); so does ``rho``, the round's penalty rho^l (a scalar, or (..., 1, 1)
    for one rho per configuration: eq. (1.16)).  The engines never call this with data: a site releases
    its noisy descent term and the server steps; tests and the audit use it as the reference.
    """
    s = objective.loss.mean_subgradient(noisy_primal, features, response, mask)
    return server_primal_step(objective=objective, noisy_primal=noisy_primal, global_w=global_w, dual=dual,
                              descent=-s, eta=eta, rho=rho)


def primal_sensitivity(*, gradient_bound: float, m, rho: float, eta) -> np.ndarray:
    """Replace-one l2-sensitivity of w_i^l: 2 G / (m_i (rho + 1/eta_i^l)) (docs/algorithms.md, eq. (1.6);
    Zhou & Xiang 2022, Lemma 2, appendix form; the body's m_i^2 is a typo)."""
    return 2.0 * gradient_bound / (np.asarray(m, dtype=float) * (rho + 1.0 / np.asarray(eta, dtype=float)))


def server_update(noisy_primals: np.ndarray, duals: np.ndarray, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Server step, docs/algorithms.md, eqs. (1.4)-(1.5) (Zhou & Xiang 2022, Sec. 5.1):

    w^l = (1/M) sum_i wt_i^l - (1/(M rho)) sum_i g_i^{l-1};  g_i^l = g_i^{l-1} - rho (wt_i^l - w^l).
    ``noisy_primals`` and ``duals`` have shape (..., M, K); ``rho`` is a scalar or has the leading shape
    (...) (one rho^l per configuration); returns (w^l (..., K), g^l (..., M, K)).
    """
    num_clients = noisy_primals.shape[-2]
    rho = np.asarray(rho, dtype=float)[..., None]
    global_w = noisy_primals.mean(axis=-2) - duals.sum(axis=-2) / (num_clients * rho)
    new_duals = duals - rho[..., None] * (noisy_primals - global_w[..., None, :])
    return global_w, new_duals


#: Released estimators of the global model (``algorithm.estimator.kind``).
ESTIMATORS = ("last", "average", "tail_average")


def tail_start_round(rounds: int, fraction: float) -> int:
    """First round s of the tail average over the last max(1, ceil(fraction L)) of L rounds."""
    if not 0 < fraction <= 1:
        raise ValueError(f"tail fraction must be in (0, 1], got {fraction}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    return rounds - max(1, math.ceil(fraction * rounds - 1e-9)) + 1


@dataclass(frozen=True)
class FDPADMMState:
    """Everything the run depends on; held by the server (strategy).

    The global iterates may carry a leading configuration axis (batched engine).
    """

    round: int
    global_w: np.ndarray  # (K,)
    duals: np.ndarray  # (M, K)
    noisy_primals: np.ndarray  # (M, K)
    sum_global_w: np.ndarray  # sum_{l<=round} w^l, for the running average wbar
    sum_noisy_primals: np.ndarray  # (M, K) sum_{l<=round} wt_i^l
    tail_start: int = 1  # first round s summed into tail_sum_global_w
    tail_sum_global_w: np.ndarray | None = None  # sum_{s<=l<=round} w^l (None: zeros)
    #: rho^{round+1}, the penalty of the next round (eq. (1.16)); None: the scenario's algorithm.rho
    rho: float | np.ndarray | None = None

    @classmethod
    def initial(cls, num_clients: int, dim: int, *, tail_start: int = 1, rho: float | None = None) -> FDPADMMState:
        """w^0 = 0, g_i^0 = 0, wt_i^0 = 0; ``tail_start`` is the first round of the tail average, ``rho``
        the penalty of round 1."""
        z = np.zeros((num_clients, dim))
        return cls(0, np.zeros(dim), z.copy(), z.copy(), np.zeros(dim), z.copy(), int(tail_start), np.zeros(dim),
                   rho)

    def successor(self, global_w: np.ndarray, duals: np.ndarray, noisy_primals: np.ndarray) -> FDPADMMState:
        """The state of round + 1 holding these values, with every running sum updated."""
        r = self.round + 1
        tail = np.zeros_like(self.sum_global_w) if self.tail_sum_global_w is None else self.tail_sum_global_w
        if r >= self.tail_start:
            tail = tail + global_w
        return FDPADMMState(r, global_w, duals, noisy_primals, self.sum_global_w + global_w,
                            self.sum_noisy_primals + noisy_primals, self.tail_start, tail, self.rho)

    def with_rho(self, rho) -> FDPADMMState:
        """This state with rho^{round+1} = ``rho`` (the server's rule, eq. (1.16))."""
        return replace(self, rho=rho)

    def advance(self, noisy_primals: np.ndarray, rho: float) -> FDPADMMState:
        """The state after the server step on this round's released primals."""
        global_w, duals = server_update(noisy_primals, self.duals, rho)
        return self.successor(global_w, duals, noisy_primals)

    @property
    def average_global_w(self) -> np.ndarray:
        """wbar^L = (1/L) sum_l w^l."""
        return self.sum_global_w / max(self.round, 1)

    @property
    def tail_average_global_w(self) -> np.ndarray:
        """(1/(L - s + 1)) sum_{l=s}^{L} w^l; before round s, the last iterate w^L."""
        count = self.round - self.tail_start + 1
        if count < 1 or self.tail_sum_global_w is None:
            return self.global_w
        return self.tail_sum_global_w / count

    def estimate(self, kind: str) -> np.ndarray:
        """The released model of estimator ``kind`` (one of :data:`ESTIMATORS`): the last global
        iterate w^L, the running average wbar^L or the tail average.  All are functions of the
        released global iterates only, i.e. post-processing: they cost no privacy."""
        if kind == "last":
            return self.global_w
        if kind == "average":
            return self.average_global_w
        if kind == "tail_average":
            return self.tail_average_global_w
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {kind!r}")

    @property
    def average_noisy_primals(self) -> np.ndarray:
        return self.sum_noisy_primals / max(self.round, 1)

    def to_arrays(self) -> dict[str, np.ndarray]:
        tail = np.zeros_like(self.sum_global_w) if self.tail_sum_global_w is None else self.tail_sum_global_w
        return {"round": np.array(self.round), "global_w": self.global_w, "duals": self.duals,
                "noisy_primals": self.noisy_primals, "sum_global_w": self.sum_global_w,
                "sum_noisy_primals": self.sum_noisy_primals, "tail_start": np.array(self.tail_start),
                "tail_sum_global_w": tail, **({} if self.rho is None else {"rho": np.asarray(self.rho)})}

    @classmethod
    def from_arrays(cls, arrays) -> FDPADMMState:
        """Inverse of :meth:`to_arrays`; arrays written before the tail average existed load
        with tail_start = 1 (tail sum = running sum), arrays without rho with rho None."""
        keys = ("global_w", "duals", "noisy_primals", "sum_global_w", "sum_noisy_primals")
        values = [np.asarray(arrays[k], dtype=float) for k in keys]
        if "tail_start" in arrays:
            tail_start, tail = int(arrays["tail_start"]), np.asarray(arrays["tail_sum_global_w"], dtype=float)
        else:
            tail_start, tail = 1, values[3].copy()
        rho = np.asarray(arrays["rho"], dtype=float) if "rho" in arrays else None
        if rho is not None and rho.ndim == 0:
            rho = float(rho)
        return cls(int(arrays["round"]), *values, tail_start, tail, rho)
