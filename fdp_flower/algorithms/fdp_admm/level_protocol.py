"""The ADMM rule's level calibration (``algorithm.level_calibration``; docs/algorithms.md, "Level calibration"):
FDP-ADMM's server state machine with 13 rounds after the ADMM rounds that place the fitted quantile's level.

A private ADMM fit at hospital-sized sites has slopes close enough to use but an intercept far from its level
(at eps = 1 and 5 sites of 500, 1% of held-out responses fall below the fitted 0.1-quantile): the noise of the
linearized steps moves the intercept like any other coordinate, and the step sizes are in the response's units.
The calibration keeps the ADMM model's slopes and sets the intercept from the residuals r = y - a.w of that model:

1. rounds L + 1 .. L + 8: each site releases the shares of its residuals at the named model w below 6 named
   thresholds, (1/m_i) #{r_ij <= t} (sensitivity sqrt(6) / m_i); the server runs the warped quartile search of the
   Newton rule on them (7-ary splits in u = asinh(t) over |t| <= 1e7; :func:`~fdp_flower.algorithms.fdp_admm.newton.quartile_brackets`)
   and takes the residuals' location q and scale s (midhinge, IQR / 1.349);
2. rounds L + 9 .. L + 13: the intercept moves by b = q + s Phi^-1(tau), then by averaged one-shot Newton steps
   b <- mean_k (b_k - (share_k - tau) / f), f = phi(Phi^-1(tau)) / s, where share_k is the released share
   (1/m_i) #{y_ij <= a_ij.w + b_k} (sensitivity 1 / m_i; the Newton rule's calibration, N.4).

Every release is a record-mean of bounded terms plus Gaussian noise at public values the server names; the
schedule (:func:`~fdp_flower.algorithms.fdp_admm.newton.level_schedule`) splits the same mu^2 as the ADMM plan
without the calibration, so the run spends the same total budget.  The released model is the ADMM estimator with
the calibrated intercept; the server's state after round L holds it for every estimator kind.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from fdp_flower.algorithms.fdp_admm import newton as N
from fdp_flower.algorithms.fdp_admm.plan import privacy_columns
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer, _close
from fdp_flower.algorithms.fdp_admm.site import NEWTON_MECHANISMS, newton_release_event
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.algorithms.protocol import ReleaseRejected, RoundPlan, SiteRelease, SiteRequest
from fdp_flower.privacy.ledger import GaussianRelease

_SHAPES = {N.RESIDUAL_QUARTILES: len(N.LEVELS) * N.THRESHOLDS_PER_LEVEL, N.SHARE: 1}


def held_state(state: FDPADMMState, model: np.ndarray, round_: int) -> FDPADMMState:
    """``state`` at ``round_`` with every released estimator (last, average, tail average) equal to ``model``: the
    running sums are set to round_ (or the tail's count) times it."""
    model = np.asarray(model, dtype=float)
    count = round_ - state.tail_start + 1
    return replace(state, round=int(round_), global_w=model.copy(), sum_global_w=model * round_,
                   tail_sum_global_w=model * count if count >= 1 else np.zeros_like(model))


class LevelledADMMServer(FDPADMMServer):
    """FDP-ADMM's server under the ADMM rule with a level calibration (module docstring); same parameters as
    :class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`."""

    def __init__(self, scenario, basis, sizes, **kwargs) -> None:
        super().__init__(scenario, basis, sizes, **kwargs)
        if self.trust != "site":
            raise ValueError("algorithm.level_calibration runs with privacy.trust 'site' only")
        self.schedule = self.calibration.schedule
        self.admm_rounds = int(scenario.algorithm.rounds)
        m = scenario.model
        self.c0 = m.intercept_share * m.clip_c1
        self.tau = float(m.loss.tau)
        self.estimator = scenario.algorithm.estimator.kind
        self.brackets = N.unbounded_brackets()
        self.base: np.ndarray | None = None  # the ADMM model whose intercept the calibration moves
        self.offset = 0.0  # the intercept's move, response units
        self.residual_scale: float | None = None
        self.intercepts: list[float] = []

    @property
    def rounds_planned(self) -> int:
        return self.schedule.rounds

    def _level_round(self, round_: int) -> bool:
        return round_ > self.admm_rounds

    @property
    def current_model(self) -> np.ndarray:
        """The released model: the ADMM estimator, with the intercept moved by the calibration so far."""
        if self.base is None:
            return self.state.estimate(self.estimator)
        w = self.base.copy()
        w[0] += self.offset / self.c0
        return w

    # ------------------------------------------------------------------ checkpoints
    _SCALARS = ("offset", "residual_scale")
    _ARRAYS = ("brackets", "base")

    def checkpoint_state(self) -> dict:
        """The calibration's state (public post-processing of the releases so far), as JSON."""
        out: dict = {"rule": "admm_levels", "intercepts": [float(v) for v in self.intercepts]}
        out.update({k: getattr(self, k) for k in self._SCALARS})
        out.update({k: None if getattr(self, k) is None else np.asarray(getattr(self, k), float).tolist()
                    for k in self._ARRAYS})
        return out

    def resume(self, state, ledger_releases, history, failures, server_state: dict | None = None) -> None:
        if isinstance(server_state, dict) and server_state.get("rule") == "admm_levels":
            try:
                for k in self._SCALARS:
                    setattr(self, k, None if server_state[k] is None else float(server_state[k]))
                for k in self._ARRAYS:
                    value = server_state[k]
                    setattr(self, k, None if value is None else np.asarray(value, dtype=float))
                self.intercepts = [float(v) for v in server_state["intercepts"]]
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"the checkpoint's level-calibration state is incomplete ({exc})") from None
        elif state.round > self.admm_rounds:
            raise ValueError("this checkpoint is inside the level calibration but has no calibration state; start "
                             "the run again")
        super().resume(state, ledger_releases, history, failures)

    # ------------------------------------------------------------------ calibration of the releases
    def planned_release(self, round_: int, client: int, m: float | None = None):
        if not self._level_round(round_):
            return super().planned_release(round_, client, m)
        m = self.sizes[client] if m is None else m
        return newton_release_event(self.schedule.kind(round_), int(client), int(round_), float(m), self.calibration)

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float):
        if not self._level_round(round_):
            return super().release_event(client, round_, sensitivity, sigma)
        if sigma == 0:
            return None
        return GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma),
                               mechanism=NEWTON_MECHANISMS[self.schedule.kind(round_)])

    # ------------------------------------------------------------------ the state machine
    def request_values(self, kind: str) -> dict:
        """The public values of a level round's request (no side effect): the ADMM model and the search's
        thresholds sinh(u), or the calibrated model."""
        if kind == N.RESIDUAL_QUARTILES:
            return {"point": self.base.copy(), "thresholds": np.sinh(N.quartile_thresholds(self.brackets, shared=True))}
        return {"point": self.current_model}

    def _plan(self, clients=None) -> RoundPlan | None:
        round_ = self.state.round + 1
        if not self._level_round(round_):
            return super()._plan(clients)
        self._secure_total = None
        if round_ > self.rounds_planned:
            return None
        public = self.request_values(self.schedule.kind(round_))
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = self._guarded_releases(round_, asked)
        requests = tuple(SiteRequest(i, round_, {k: np.array(v) for k, v in public.items()}) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _check(self, release: SiteRelease) -> None:
        round_ = self.current_plan.round
        if not self._level_round(round_):
            super()._check(release)
            return
        client, kind = int(release.client), self.schedule.kind(round_)
        value = np.asarray(release.value, dtype=float) if isinstance(release.value, np.ndarray) else None
        if value is None or value.shape != (_SHAPES[kind],):
            raise ReleaseRejected(f"client {client}: {kind} release has shape {np.shape(release.value)}, "
                                  f"expected ({_SHAPES[kind]},)")
        if not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"client {client}: release contains NaN or infinite values")
        if int(release.num_examples) != int(self.sizes[client]):
            raise ReleaseRejected(f"client {client}: reports m_i = {int(release.num_examples)}, the run's plan has "
                                  f"{int(self.sizes[client])}")
        planned, event = self.planned_release(round_, client), release.event
        if event is None or event.mechanism != planned.mechanism:
            raise ReleaseRejected(f"client {client}: {kind} release without its calibration")
        if not _close(event.sensitivity, planned.sensitivity) or not _close(event.sigma, planned.sigma):
            raise ReleaseRejected(f"client {client}: {kind} release's sensitivity / sigma differ from the schedule's")

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        round_ = plan.round
        if not self._level_round(round_):
            row = super()._close(plan, accepted)
            if round_ == self.admm_rounds and self.stop_reason is None:
                self.base = np.array(self.state.estimate(self.estimator), dtype=float)
                self.state = held_state(self.state, self.base, round_)
            return row
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        self.apply(round_, {i: np.asarray(r.value, float) for i, r in accepted.items()})
        row = {"round": round_, "level_offset": self.offset,
               "residual_scale": float("nan") if self.residual_scale is None else self.residual_scale}
        if self.evaluator is not None:
            row.update(self.evaluator(self.state))
        row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        return row

    def apply(self, round_: int, values: dict) -> None:
        """The server's step on level round ``round_``'s releases ``{client: value}``, and the successor state
        holding the calibrated model."""
        sizes = np.array([self.sizes[i] for i in values])
        pooled = np.sum([m * np.asarray(v, float) for m, v in zip(sizes, values.values())], axis=0) / sizes.sum()
        if self.schedule.kind(round_) == N.RESIDUAL_QUARTILES:
            self.brackets = N.quartile_brackets(self.brackets, pooled, shared=True)
            if self.schedule.kind(round_ + 1) != N.RESIDUAL_QUARTILES:
                from scipy import stats

                location, self.residual_scale = N.location_and_scale(np.sinh(self.brackets))
                self.offset = location + self.residual_scale * float(stats.norm.ppf(self.tau))
        else:
            density = N.normal_density_at_quantile(self.tau) / self.residual_scale
            self.intercepts.append(self.offset - (float(pooled[0]) - self.tau) / density)
            self.offset = float(np.mean(self.intercepts))
        self.state = held_state(self.state, self.current_model, round_)
