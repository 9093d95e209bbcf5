"""FDP-ADMM / F-ADMM update rules (paper 000, Section 3 and Section 5; spec section 1).

Consensus problem min sum_i f_i(w_i) s.t. w_i = w with
f_i(w) = (1/m_i) sum_j l(w; a_ij, y_ij) + (lam/M) P(w) and local augmented
Lagrangian L_i = f_i(w_i) - <g_i, w_i - w> + (rho/2) ||w_i - w||^2.
All functions are pure and broadcast over leading (client, repetition) axes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdp_flower.losses import Loss
from fdp_flower.penalties import Penalty


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


def client_primal_step(*, objective: Objective, noisy_primal, global_w, dual, features, response,
                       eta, rho: float, mask=None) -> np.ndarray:
    """Linearized local update, spec section 1 step 1 (paper 000, eq. in Sec. 5.1):

    w_i^l = (g_i^{l-1} + rho w^{l-1} + wt_i^{l-1} / eta - f_i'(wt_i^{l-1})) / (rho + 1/eta).
    ``eta`` broadcasts over the client axis (shape (..., 1) or scalar).
    """
    s = objective.local_subgradient(noisy_primal, features, response, mask)
    eta = np.asarray(eta, dtype=float)
    return (dual + rho * global_w + noisy_primal / eta - s) / (rho + 1.0 / eta)


def primal_sensitivity(*, gradient_bound: float, m, rho: float, eta) -> np.ndarray:
    """Replace-one l2-sensitivity of w_i^l: 2 G / (m_i (rho + 1/eta_i^l)) (paper 000, Lemma 2,
    appendix form; the body's m_i^2 is a typo)."""
    return 2.0 * gradient_bound / (np.asarray(m, dtype=float) * (rho + 1.0 / np.asarray(eta, dtype=float)))


def server_update(noisy_primals: np.ndarray, duals: np.ndarray, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Server step, spec section 1 step 2 (paper 000, Sec. 5.1):

    w^l = (1/M) sum_i wt_i^l - (1/(M rho)) sum_i g_i^{l-1};  g_i^l = g_i^{l-1} - rho (wt_i^l - w^l).
    ``noisy_primals`` and ``duals`` have shape (..., M, K); returns (w^l (..., K), g^l (..., M, K)).
    """
    num_clients = noisy_primals.shape[-2]
    global_w = noisy_primals.mean(axis=-2) - duals.sum(axis=-2) / (num_clients * rho)
    new_duals = duals - rho * (noisy_primals - global_w[..., None, :])
    return global_w, new_duals


@dataclass(frozen=True)
class FDPADMMState:
    """Everything the run depends on; held by the server (strategy)."""

    round: int
    global_w: np.ndarray  # (K,)
    duals: np.ndarray  # (M, K)
    noisy_primals: np.ndarray  # (M, K)
    sum_global_w: np.ndarray  # sum_{l<=round} w^l, for the running average wbar
    sum_noisy_primals: np.ndarray  # (M, K) sum_{l<=round} wt_i^l

    @classmethod
    def initial(cls, num_clients: int, dim: int) -> "FDPADMMState":
        """w^0 = 0, g_i^0 = 0, wt_i^0 = 0."""
        z = np.zeros((num_clients, dim))
        return cls(0, np.zeros(dim), z.copy(), z.copy(), np.zeros(dim), z.copy())

    def advance(self, noisy_primals: np.ndarray, rho: float) -> "FDPADMMState":
        """The state after the server step on this round's released primals."""
        global_w, duals = server_update(noisy_primals, self.duals, rho)
        return FDPADMMState(self.round + 1, global_w, duals, noisy_primals,
                            self.sum_global_w + global_w, self.sum_noisy_primals + noisy_primals)

    @property
    def average_global_w(self) -> np.ndarray:
        """wbar^L = (1/L) sum_l w^l."""
        return self.sum_global_w / max(self.round, 1)

    @property
    def average_noisy_primals(self) -> np.ndarray:
        return self.sum_noisy_primals / max(self.round, 1)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"round": np.array(self.round), "global_w": self.global_w, "duals": self.duals,
                "noisy_primals": self.noisy_primals, "sum_global_w": self.sum_global_w,
                "sum_noisy_primals": self.sum_noisy_primals}

    @classmethod
    def from_arrays(cls, arrays) -> "FDPADMMState":
        return cls(int(arrays["round"]), *(np.asarray(arrays[k], dtype=float) for k in (
            "global_w", "duals", "noisy_primals", "sum_global_w", "sum_noisy_primals")))
