"""Residuals, residual balancing of rho and the stopping rule of F-ADMM (docs/algorithms.md, eqs. (1.15)-(1.17)).

Pure numpy, broadcasting over a leading configuration axis (the batched engine); the
in-process engine and the Flower strategy call :func:`after_round` on their scalar states,
so every engine applies one rule.  Every quantity is one the server already holds: the
released primals wt_i^l, the global iterates w^l, w^{l-1} and the duals g_i^l.

Consensus form of Boyd et al. (2011), Sec. 3.3 and 7.1, with M clients and w in R^K:

- primal residual ||r^l|| = (sum_i ||wt_i^l - w^l||^2)^(1/2)                          (1.15)
- dual residual   ||s^l|| = rho^l sqrt(M) ||w^l - w^{l-1}||                           (1.15)
- residual balancing (Sec. 3.4.1): rho^{l+1} = factor rho^l if ||r|| > mu ||s||,
  rho^l / factor if ||s|| > mu ||r||, else rho^l                                      (1.16)
- stop after round l when ||r^l|| <= eps_pri and ||s^l|| <= eps_dual (Sec. 3.3.1), with
  eps_pri = sqrt(M K) tol_abs + tol_rel max(||(wt_i^l)_i||, sqrt(M) ||w^l||),
  eps_dual = sqrt(M K) tol_abs + tol_rel ||(g_i^l)_i||                                (1.17)

The duals g_i are unscaled (the server step divides by rho^l), so a change of rho needs
no rescaling of g (Boyd's scaled u = g / rho would).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.fdp_admm.update import FDPADMMState

#: the reason a run gives when the stopping rule (1.17) ends it before the cap
CONVERGED = "converged"
#: the reason a run with the stopping rule (1.17) gives when it reaches ``algorithm.rounds`` without meeting it
CAP = "cap"


@dataclass(frozen=True)
class Residuals:
    """Eqs. (1.15) and the tolerances of (1.17); each entry broadcasts over leading axes."""

    primal: np.ndarray
    dual: np.ndarray
    primal_tol: np.ndarray
    dual_tol: np.ndarray

    @property
    def below_tolerance(self) -> np.ndarray:
        """Both residuals at or below their tolerances (the stopping test of eq. (1.17))."""
        return (self.primal <= self.primal_tol) & (self.dual <= self.dual_tol)


def residuals(*, noisy_primals, global_w, previous_global_w, duals, rho, tol_abs: float = 0.0,
              tol_rel: float = 0.0) -> Residuals:
    """Residuals (1.15) and tolerances (1.17) of one round: ``noisy_primals`` and ``duals`` (..., M, K),
    ``global_w`` and ``previous_global_w`` (..., K), ``rho`` the round's penalty (scalar or (...))."""
    noisy_primals, duals = np.asarray(noisy_primals, float), np.asarray(duals, float)
    global_w, previous_global_w = np.asarray(global_w, float), np.asarray(previous_global_w, float)
    num_clients, dim = noisy_primals.shape[-2:]
    root_m = np.sqrt(num_clients)
    primal = np.sqrt(np.sum((noisy_primals - global_w[..., None, :]) ** 2, axis=(-2, -1)))
    dual = np.asarray(rho, float) * root_m * np.linalg.norm(global_w - previous_global_w, axis=-1)
    floor = np.sqrt(num_clients * dim) * tol_abs
    primal_tol = floor + tol_rel * np.maximum(np.sqrt(np.sum(noisy_primals**2, axis=(-2, -1))),
                                              root_m * np.linalg.norm(global_w, axis=-1))
    dual_tol = floor + tol_rel * np.sqrt(np.sum(duals**2, axis=(-2, -1)))
    return Residuals(primal, dual, primal_tol, dual_tol)


def balanced_rho(rho, primal, dual, *, mu: float, factor: float) -> np.ndarray:
    """Residual balancing, eq. (1.16): rho up by ``factor`` when the primal residual exceeds ``mu`` times
    the dual one, down when the dual exceeds ``mu`` times the primal, else unchanged."""
    rho, primal, dual = (np.asarray(x, float) for x in (rho, primal, dual))
    return np.where(primal > mu * dual, rho * factor, np.where(dual > mu * primal, rho / factor, rho))


@dataclass(frozen=True)
class RoundControl:
    """What the server decides after round l: the residuals, rho^{l+1}, and whether to stop."""

    residuals: Residuals
    rho: np.ndarray  # rho^l, the penalty used in round l
    next_rho: np.ndarray  # rho^{l+1}
    stop: np.ndarray  # bool: the stopping rule (1.17) holds (never set with stopping kind 'cap')

    def row(self, index=()) -> dict[str, float]:
        """The history columns of this round (one configuration: ``index`` into the leading axes)."""
        r = self.residuals
        return {"rho": float(np.asarray(self.rho)[index]), "primal_residual": float(r.primal[index]),
                "dual_residual": float(r.dual[index]), "primal_tolerance": float(r.primal_tol[index]),
                "dual_tolerance": float(r.dual_tol[index])}


def after_round(algorithm, *, previous_global_w, global_w, noisy_primals, duals, rho) -> RoundControl:
    """The server's decision after a round, for ``algorithm`` (an FDPADMMConfig: ``rho_rule``, ``stopping``).

    ``rho`` is the penalty the round used; the arrays are the state after the round (wt_i^l, w^l, g_i^l)
    and w^{l-1}.  A fixed rule returns ``next_rho = rho``; stopping kind ``cap`` never stops."""
    stopping, rule = algorithm.stopping, algorithm.rho_rule
    tol_abs, tol_rel = (stopping.tol_abs, stopping.tol_rel) if stopping.kind == "residuals" else (0.0, 0.0)
    res = residuals(noisy_primals=noisy_primals, global_w=global_w, previous_global_w=previous_global_w,
                    duals=duals, rho=rho, tol_abs=tol_abs, tol_rel=tol_rel)
    rho = np.broadcast_to(np.asarray(rho, float), res.primal.shape)
    if rule.kind == "residual_balancing":
        next_rho = balanced_rho(rho, res.primal, res.dual, mu=rule.mu, factor=rule.factor)
    else:
        next_rho = rho.copy()
    stop = res.below_tolerance if stopping.kind == "residuals" else np.zeros(res.primal.shape, dtype=bool)
    return RoundControl(res, rho, next_rho, stop)


def server_after_round(algorithm, previous: FDPADMMState, state: FDPADMMState, rho) -> tuple[FDPADMMState, RoundControl]:
    """:func:`after_round` on the server's states before (``previous``) and after (``state``) a round that
    used ``rho``; returns ``state`` holding rho^{l+1} and the decision (the in-process engine and the
    Flower strategy call this; the batched engine calls :func:`after_round` on its stacked states)."""
    control = after_round(algorithm, previous_global_w=previous.global_w, global_w=state.global_w,
                          noisy_primals=state.noisy_primals, duals=state.duals, rho=rho)
    next_rho = control.next_rho if np.ndim(control.next_rho) else float(control.next_rho)
    return state.with_rho(next_rho), control


def stop_reason(round_: int) -> str:
    """The run's ``stop_reason`` when eq. (1.17) ends it after ``round_``."""
    return f"{CONVERGED}: primal and dual residuals below tolerance after round {round_}"


def cap_reason(rounds: int) -> str:
    """The run's ``stop_reason`` when a run with stopping kind ``residuals`` reaches its cap of ``rounds``
    without eq. (1.17) holding: the estimate is not known to have converged (raise ``algorithm.rounds``)."""
    return (f"{CAP}: algorithm.rounds = {rounds} reached before the primal and dual residuals fell below "
            "tolerance (not converged; raise algorithm.rounds)")


def ended_normally(reason: str | None) -> bool:
    """A run that ended by its schedule: ``completed`` (all planned rounds), ``converged`` or ``cap``
    (not a failure, an interruption or an exhausted budget)."""
    return reason is None or reason == "completed" or reason.startswith((CONVERGED, CAP))
