"""The ADMM rule's location/scale search and level calibration (``algorithm.level_calibration``; docs/algorithms.md,
section 1.4): FDP-ADMM's server state machine with 8 rounds before the ADMM rounds and 13 after them.

A private ADMM fit takes its steps in the response's units: at a response centred far from 0 or with a spread far
from 1 its slopes are noise and its level is wrong, and even a standardized fit at hospital-sized sites leaves its
intercept off its level (at eps = 1 and 5 sites of 500, 1% of held-out responses fall below the fitted
0.1-quantile).  The schedule (:func:`~fdp_flower.algorithms.fdp_admm.newton.level_schedule`):

1. rounds 1 .. 8: each site releases the shares of its responses below 6 named thresholds (sensitivity
   sqrt(6) / m_i); the server runs the Newton rule's warped quartile search (7-ary splits in u = asinh(y) over
   |y| <= 1e7; :func:`~fdp_flower.algorithms.fdp_admm.newton.quartile_brackets`): location = midhinge, scale s =
   IQR / 1.349;
2. rounds 9 .. 8 + L: the ADMM rule (eqs. (1.2)-(1.5)) on the standardized coefficients x: the server names each
   site the point s x_i + location / c0 in the intercept (the data term depends on y only through signs, so the
   release is the standardized one), and its step's l2 penalty weight is lam s (the objective in standardized units);
3. rounds 9 + L .. 16 + L: the shares of the residuals r = y - a.w of the ADMM estimator w below 6 named thresholds
   (sqrt(6) / m_i), searched as in 1: their location q and scale s_r;
4. rounds 17 + L .. 21 + L: the intercept moves by b = q + s_r Phi^-1(tau), then by averaged one-shot Newton steps
   b <- mean_k (b_k - (share_k - tau) / f), f = phi(Phi^-1(tau)) / s_r, share_k the released share
   (1/m_i) #{y_ij <= a_ij.w + b_k} (sensitivity 1 / m_i; the Newton rule's N.4).

Every release is a record-mean of bounded terms plus Gaussian noise at public values the server names; the
schedule splits the same mu^2 as the ADMM plan without them, so the run spends the same total budget.  The released
model is the ADMM estimator in the response's units with the calibrated intercept; the server's ``state`` (what
the drivers read) holds the current model for every estimator kind, the ADMM iterates in standardized units stay
in ``admm``.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from fdp_flower.algorithms.fdp_admm import newton as N
from fdp_flower.algorithms.fdp_admm.plan import initial_state, privacy_columns, round_rho
from fdp_flower.algorithms.fdp_admm.newton_protocol import check_schedule_release
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer, server_round
from fdp_flower.algorithms.fdp_admm.site import MECHANISM, NEWTON_MECHANISMS, newton_release_event
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, server_primal_step
from fdp_flower.algorithms.protocol import RoundPlan, SiteRelease, SiteRequest
from fdp_flower.privacy.ledger import GaussianRelease

#: a residual search whose scale or location exceeds this many of the responses' scales was misled by its noise
MISLED = 10.0
_SHAPES = {N.QUARTILES: len(N.LEVELS) * N.THRESHOLDS_PER_LEVEL,
           N.RESIDUAL_QUARTILES: len(N.LEVELS) * N.THRESHOLDS_PER_LEVEL, N.SHARE: 1}


def held_state(state: FDPADMMState, model: np.ndarray, round_: int) -> FDPADMMState:
    """``state`` at ``round_`` with every released estimator (last, average, tail average) equal to ``model``: the
    running sums are set to round_ (or the tail's count) times it."""
    model = np.asarray(model, dtype=float)
    count = round_ - state.tail_start + 1
    return replace(state, round=int(round_), global_w=model.copy(), sum_global_w=model * round_,
                   tail_sum_global_w=model * count if count >= 1 else np.zeros_like(model))


def standardized_objective(objective, scale: float):
    """The objective of the standardized coefficients x = (w - location e_0 / c0) / s: the check loss of
    (y - location) / s is the loss of y over s, so the penalty's l2 weight becomes lam s (its l1 weight stays)."""
    p = objective.penalty
    if p.kind == "l2":
        return replace(objective, lam=objective.lam * scale)
    if p.kind == "elastic_net":
        return replace(objective, penalty=replace(p, lam2=p.lam2 * scale))
    return objective


class LevelledADMMServer(FDPADMMServer):
    """FDP-ADMM's server under the ADMM rule with a location/scale search and a level calibration (module
    docstring); same parameters as :class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`."""

    def __init__(self, scenario, basis, sizes, **kwargs) -> None:
        super().__init__(scenario, basis, sizes, **kwargs)
        if self.trust != "site":
            raise ValueError("algorithm.level_calibration runs with privacy.trust 'site' only")
        self.schedule = self.calibration.schedule
        self.first_term = self.schedule.kinds.index(N.TERM) + 1  # the global round of ADMM round 1
        self.admm_rounds = int(scenario.algorithm.rounds)
        m = scenario.model
        self.c0 = m.intercept_share * m.clip_c1
        self.tau = float(m.loss.tau)
        self.estimator = scenario.algorithm.estimator.kind
        self.admm = initial_state(scenario, self.dim)  # the ADMM iterates, standardized units
        self.location, self.scale = 0.0, 1.0
        self.brackets = N.unbounded_brackets()  # the search of the responses, then of the residuals
        self.base: np.ndarray | None = None  # the ADMM estimator, response units, once the ADMM rounds end
        self.offset = 0.0  # the intercept's move, response units
        self.residual_scale: float | None = None
        self.intercepts: list[float] = []

    @property
    def rounds_planned(self) -> int:
        return self.schedule.rounds

    def kind(self, round_: int) -> str:
        return self.schedule.kind(round_)

    # ------------------------------------------------------------------ units
    def raw(self, x: np.ndarray) -> np.ndarray:
        """Standardized coefficients in the response's units: s x, the intercept plus location / c0."""
        out = self.scale * np.asarray(x, dtype=float)
        out[..., 0] += self.location / self.c0
        return out

    @property
    def current_model(self) -> np.ndarray:
        """The released model: the ADMM estimator in the response's units, its intercept moved by the
        calibration so far."""
        if self.base is None:
            return self.raw(self.admm.estimate(self.estimator))
        w = self.base.copy()
        w[0] += self.offset / self.c0
        return w

    def _view(self, round_: int) -> FDPADMMState:
        return held_state(self.admm, self.current_model, round_)

    # ------------------------------------------------------------------ checkpoints
    _SCALARS = ("location", "scale", "offset", "residual_scale")
    _ARRAYS = ("brackets", "base")
    _LISTS = ("intercepts",)

    def checkpoint_state(self) -> dict:
        """The server's own state (public post-processing of the releases so far), as JSON: the search, the ADMM
        iterates in standardized units and the calibration."""
        return {"rule": "admm_levels", **self._dump_fields(),
                "admm": {k: np.asarray(v, float).tolist() for k, v in self.admm.to_arrays().items()}}

    def resume(self, state, ledger_releases, history, failures, server_state: dict | None = None) -> None:
        if not isinstance(server_state, dict) or server_state.get("rule") != "admm_levels":
            raise ValueError("this checkpoint has no state of the ADMM rule's location/scale search and level "
                             "calibration (written by a version without it); start the run again")
        try:
            self._load_fields(server_state)
            arrays = {k: np.asarray(v, dtype=float) for k, v in server_state["admm"].items()}
            arrays["round"], arrays["tail_start"] = int(arrays["round"]), int(arrays["tail_start"])
            self.admm = FDPADMMState.from_arrays(arrays)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the checkpoint's level-calibration state is incomplete ({exc})") from None
        super().resume(state, ledger_releases, history, failures)

    # ------------------------------------------------------------------ calibration of the releases
    def planned_release(self, round_: int, client: int, m: float | None = None):
        if self.kind(round_) == N.TERM:
            return super().planned_release(round_, client, m)
        m = self.sizes[client] if m is None else m
        return newton_release_event(self.kind(round_), int(client), int(round_), float(m), self.calibration)

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float):
        if sigma == 0:
            return None
        mechanism = MECHANISM if self.kind(round_) == N.TERM else NEWTON_MECHANISMS[self.kind(round_)]
        return GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma), mechanism=mechanism)

    # ------------------------------------------------------------------ the state machine
    def request_values(self, kind: str, client: int = 0) -> dict:
        """The public values of a ``kind`` request to ``client`` at the current state (no side effect)."""
        if kind == N.QUARTILES:
            return {"thresholds": np.sinh(N.quartile_thresholds(self.brackets, shared=True))}
        if kind == N.TERM:
            return {"point": self.raw(self.admm.noisy_primals[client])}
        if kind == N.RESIDUAL_QUARTILES:
            base = self.base if self.base is not None else self.current_model
            return {"point": base.copy(), "thresholds": np.sinh(N.quartile_thresholds(self.brackets, shared=True))}
        return {"point": self.current_model}

    def admm_round(self, round_: int) -> int:
        """The ADMM round (1..L) of global round ``round_``: its step size and rho rule count from it."""
        return round_ - self.first_term + 1

    def _plan(self, clients=None) -> RoundPlan | None:
        self._secure_total = None
        round_ = self.state.round + 1
        if round_ > self.rounds_planned:
            return None
        kind = self.kind(round_)
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = self._guarded_releases(round_, asked)
        requests = tuple(SiteRequest(i, round_, self.request_values(kind, i)) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _primal(self, client: int, descent: np.ndarray) -> np.ndarray:
        """Client ``client``'s primal in the response's units (the ADMM step in standardized units, eq. (1.2))."""
        k = self.admm_round(self.current_plan.round)
        primal = server_primal_step(objective=self.objective, noisy_primal=self.admm.noisy_primals[client],
                                    global_w=self.admm.global_w, dual=self.admm.duals[client], descent=descent,
                                    eta=self.steps.step_size(k, self.sizes[client]),
                                    rho=round_rho(self.scenario, self.admm))
        return self.raw(primal)

    def _check(self, release: SiteRelease) -> None:
        round_ = self.current_plan.round
        kind = self.kind(round_)
        if kind == N.TERM:
            super()._check(release)
            return
        client = int(release.client)
        check_schedule_release(release, kind, (_SHAPES[kind],), self.sizes[client],
                               self.planned_release(round_, client))

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        round_ = plan.round
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        control = self.apply(round_, {i: np.asarray(r.value, float) for i, r in accepted.items()})
        row = {"round": round_, **control, "location": self.location, "scale": self.scale,
               "level_offset": self.offset,
               "residual_scale": float("nan") if self.residual_scale is None else self.residual_scale}
        if self.evaluator is not None:
            row.update(self.evaluator(self.state))
        row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        return row

    def apply(self, round_: int, values: dict) -> dict:
        """The server's step on round ``round_``'s releases ``{client: value}`` (missing clients failed), and the
        state holding the current model; returns the round's ADMM controls (empty for the other kinds)."""
        kind, control = self.kind(round_), {}
        if kind == N.TERM:
            control = self._admm_step(round_, values)
        else:
            sizes = np.array([self.sizes[i] for i in values])
            pooled = np.sum([m * np.asarray(v, float) for m, v in zip(sizes, values.values())], axis=0) / sizes.sum()
            if kind in (N.QUARTILES, N.RESIDUAL_QUARTILES):
                self._search(round_, kind, pooled)
            else:
                density = N.normal_density_at_quantile(self.tau) / self.residual_scale
                self.intercepts.append(self.offset - (float(pooled[0]) - self.tau) / density)
                self.offset = float(np.mean(self.intercepts))
        self.state = self._view(round_)
        return control

    def _search(self, round_: int, kind: str, pooled: np.ndarray) -> None:
        """One round of the warped quartile search; after its last, the location and scale (of the responses:
        the ADMM rounds' units and objective; of the residuals: the intercept's start)."""
        from scipy import stats

        self.brackets = N.quartile_brackets(self.brackets, pooled, shared=True)
        if round_ < self.rounds_planned and self.kind(round_ + 1) == kind:
            return
        location, scale = N.location_and_scale(np.sinh(self.brackets))
        self.brackets = N.unbounded_brackets()
        if kind == N.QUARTILES:
            self.location, self.scale = location, scale
            self.objective = standardized_objective(self.objective, scale)
        elif scale > MISLED * self.scale or abs(location) > MISLED * self.scale:
            # a search the noise misled (the residuals of a fit in standardized units spread like the responses):
            # the share rounds start from the ADMM fit's own level, in the responses' scale
            self.residual_scale, self.offset = self.scale, 0.0
        else:
            self.residual_scale = scale
            self.offset = location + scale * float(stats.norm.ppf(self.tau))

    def _admm_step(self, round_: int, values: dict) -> dict:
        """The ADMM server step (eqs. (1.2), (1.4)-(1.5)) in standardized units on the released terms; after the
        last ADMM round, the estimator in the response's units becomes the model the calibration moves."""
        k = self.admm_round(round_)
        replied = np.array([i in values for i in range(self.num_clients)])
        descent = np.stack([values[i] if i in values else np.full(self.dim, np.nan) for i in range(self.num_clients)])
        eta = self.steps.step_size(k, self.sizes)
        self.admm, control = server_round(self.scenario, self.objective, self.admm, descent, eta=eta[:, None],
                                          rho=round_rho(self.scenario, self.admm), replied=replied)
        if k == self.admm_rounds:
            self.base = self.raw(self.admm.estimate(self.estimator))
        return {"eta_mean": float(np.mean(eta)), **control.row()}
