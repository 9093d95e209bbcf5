"""The server state machine of FDP-ADMM's Newton rule (``algorithm.rule: newton``; the math:
:mod:`fdp_flower.algorithms.fdp_admm.newton`; docs/algorithms.md, "The Newton rule").

Each round the server names one public value per site of the schedule's kind -- thresholds, the point x,
(x, h), or the calibrated model -- checks every release against its public calibration, and does every
other step itself: the quartile search, the Newton steps in the public metric, the dual average, the
empirical-Bayes shrinkage and the intercept calibration.  It is a :class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`
for the drivers (the same ledger, budget guard, journal, history, ``state.global_w`` = the current model
in the fit's units), so every engine that drives FDP-ADMM's protocol drives it unchanged.
"""
from __future__ import annotations

import numpy as np

from fdp_flower.algorithms.fdp_admm import newton as N
from fdp_flower.algorithms.fdp_admm.plan import build_objective, noise_scales, privacy_columns
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer, _close
from fdp_flower.algorithms.fdp_admm.site import MECHANISM, NEWTON_MECHANISMS, newton_release_event
from fdp_flower.algorithms.protocol import ReleaseRejected, RoundPlan, SiteRelease, SiteRequest
from fdp_flower.privacy.ledger import GaussianRelease

#: the shape of each release kind's value (K: the model's dimension)
_SHAPES = {N.RANGE: 2, N.QUARTILES: len(N.LEVELS) * N.THRESHOLDS_PER_LEVEL, N.DENSITY: 1, N.SHARE: 1}


def check_schedule_release(release: SiteRelease, kind: str, shape: tuple, m: float, planned) -> None:
    """Refuse (:class:`ReleaseRejected`) a release of a scheduled ``kind`` that is not what the site's schedule
    makes: a value of another ``shape`` or not finite, another m_i than the plan's ``m``, or an event other than the
    ``planned`` one (None: privacy off, so no event)."""
    client, event = int(release.client), release.event
    value = np.asarray(release.value, dtype=float) if isinstance(release.value, np.ndarray) else None
    if value is None or value.shape != shape:
        raise ReleaseRejected(f"client {client}: {kind} release has shape {np.shape(release.value)}, "
                              f"expected {shape}")
    if not np.all(np.isfinite(value)):
        raise ReleaseRejected(f"client {client}: release contains NaN or infinite values")
    if int(release.num_examples) != int(m):
        raise ReleaseRejected(f"client {client}: reports m_i = {int(release.num_examples)}, the run's plan has "
                              f"{int(m)}")
    if planned is None:
        if event is not None:
            raise ReleaseRejected(f"client {client}: released with noise in a run without privacy")
        return
    if event is None or event.mechanism != planned.mechanism:
        raise ReleaseRejected(f"client {client}: {kind} release without its calibration")
    if not _close(event.sensitivity, planned.sensitivity) or not _close(event.sigma, planned.sigma):
        raise ReleaseRejected(f"client {client}: {kind} release's sensitivity / sigma differ from the schedule's")


class NewtonServer(FDPADMMServer):
    """FDP-ADMM's server under the Newton rule (module docstring); same parameters as
    :class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`."""

    def __init__(self, scenario, basis, sizes, **kwargs) -> None:
        super().__init__(scenario, basis, sizes, **kwargs)
        if self.trust != "site":
            raise ValueError("algorithm.rule 'newton' runs with privacy.trust 'site' only")
        self.schedule = self.calibration.schedule
        m = scenario.model
        self.free = int(m.intercept)
        self.c0 = m.intercept_share * m.clip_c1 if m.intercept else 1.0
        eig = basis.eigenvalues
        #: a basis without score variances: the metric is the sites' released second moments (a MOMENTS round,
        #: N.1'; noised with privacy), a (d, d) matrix once released
        self.moment_metric = N.MOMENTS in self.schedule.kinds
        if self.moment_metric:
            self.moments = None
            self.active = np.ones(self.dim, dtype=bool)
        else:
            if eig is None or np.size(eig) < self.dim - self.free or not np.all(np.asarray(eig, float) > 0):
                raise ValueError("algorithm.rule 'newton' steps in the metric of the basis's score variances; this "
                                 "basis publishes none (give a provided basis its eigenvalues, or use 'pooled' / "
                                 "'federated_dp')")
            self.moments = np.r_[[self.c0**2] if self.free else [], np.asarray(eig, float)[: self.dim - self.free]]
            #: the components the fit uses (N.5): with a private federated DP-FPCA basis, those whose released
            #: eigenvalue clears the noise edge of the summaries (at least the leading one); the others stay at 0
            from fdp_flower.functional.federated_fpca import noise_edge

            scores = np.asarray(eig, float)[: self.dim - self.free] > noise_edge(scenario.basis, sizes)
            scores[0] = True
            self.active = np.r_[[True] * self.free, scores]
        shape = noise_scales(scenario, basis)
        self.noise_shape = np.ones(self.dim) if shape is None else np.asarray(shape, float)
        objective = build_objective(scenario)
        self.penalty = m.penalty.kind
        self.lam_site = float(objective.lam) / self.num_clients
        self.tau = float(m.loss.tau)
        bounds = scenario.algorithm.response_bounds
        #: the search without declared bounds (privacy on) keeps its brackets in u = asinh(y) (newton.py, step 1)
        self.warped = bounds is None and N.QUARTILES in self.schedule.kinds and N.RANGE not in self.schedule.kinds
        if self.warped:
            self.brackets = N.unbounded_brackets()
        else:
            self.brackets = None if bounds is None else np.array([bounds, bounds], dtype=float)
        self.location, self.scale = 0.0, 1.0
        self.f0 = N.normal_density_at_quantile(self.tau)
        self.curvature = self.f0
        self.densities = 0
        self.x = np.zeros(self.dim)  # the fit's iterate, standardized units
        self.term_index = 0
        self.v_sum, self.v_count = np.zeros(self.dim), 0
        #: the private second-moments metric's projector onto its directions above the noise floor (N.2'); None
        #: for every other metric
        self.above_floor: np.ndarray | None = None
        self.averaged_z: list[float] = []
        self.pending_gradient: np.ndarray | None = None
        self.metric: N.PublicMetric | N.MomentMetric | None = None
        self.model: np.ndarray | None = None  # the released model after the fit (the fit's units)
        self.intercepts: list[float] = []
        self._bandwidth: float | None = None

    # ------------------------------------------------------------------ units
    def raw(self, x: np.ndarray) -> np.ndarray:
        """A standardized iterate in the fit's units: s x, the intercept coordinate plus location / c0."""
        out = self.scale * np.asarray(x, float)
        if self.free:
            out[0] += self.location / self.c0
        return out

    @property
    def current_model(self) -> np.ndarray:
        if self.model is not None:
            return self.model.copy()
        return self.raw(self.x)

    def _calibration_point(self) -> np.ndarray:
        w = self.model.copy()
        w[0] = (np.mean(self.intercepts) if self.intercepts else self.c0 * self.model[0]) / self.c0
        return w

    # ------------------------------------------------------------------ calibration of the releases
    #: the server's own state a checkpoint keeps (floats, ints, arrays; JSON round-trips each exactly)
    _SCALARS = ("location", "scale", "curvature", "densities", "term_index", "v_count", "_bandwidth")
    _ARRAYS = ("brackets", "x", "v_sum", "pending_gradient", "model", "moments", "above_floor")
    _LISTS = ("averaged_z", "intercepts")

    def checkpoint_state(self) -> dict:
        """Everything :meth:`_close` carries between rounds beyond :class:`FDPADMMState` (public post-processing
        of the releases so far), as JSON: brackets, location/scale, curvature, the dual average, the pending
        gradient, the released model, the calibration's intercepts and the current metric."""
        out: dict = {"rule": "newton", **self._dump_fields()}
        m = self.metric
        if m is None:
            out["metric"] = None
        elif isinstance(m, N.MomentMetric):
            out["metric"] = {"matrix": m.matrix.tolist(), "step": m.step, "l1": m.l1, "free": m.free}
        else:
            out["metric"] = {"diagonal": m.diagonal.tolist(), "step": m.step, "l1": m.l1, "free": m.free}
        return out

    def resume(self, state, ledger_releases, history, failures, server_state: dict | None = None) -> None:
        if not isinstance(server_state, dict) or server_state.get("rule") != "newton":
            raise ValueError("this checkpoint has no Newton-rule server state (written by a version that could not "
                             "resume algorithm.rule 'newton'); start the run again")
        try:
            self._load_fields(server_state)
            m = server_state["metric"]
            if m is None:
                self.metric = None
            elif "matrix" in m:
                self.metric = N.MomentMetric(np.asarray(m["matrix"], float), float(m["step"]), float(m["l1"]),
                                             int(m["free"]))
            else:
                self.metric = N.PublicMetric(np.asarray(m["diagonal"], float), float(m["step"]), float(m["l1"]),
                                             int(m["free"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the checkpoint's Newton-rule server state is incomplete ({exc})") from None
        super().resume(state, ledger_releases, history, failures)

    def planned_release(self, round_: int, client: int, m: float | None = None):
        m = self.sizes[client] if m is None else m
        kind = self.schedule.kind(round_)
        if kind == N.RANGE:
            return None
        return newton_release_event(kind, int(client), int(round_), float(m), self.calibration,
                                    self._bandwidth if kind == N.DENSITY else None)

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float):
        """The event of a release as a site reported it (None for sigma 0), under the mechanism the schedule
        has for that round (checked against the planned event in :meth:`_check`)."""
        if sigma == 0:
            return None
        kind = self.schedule.kind(round_)
        mechanism = MECHANISM if kind == N.TERM else NEWTON_MECHANISMS.get(kind, "gaussian")
        return GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma), mechanism=mechanism)

    # ------------------------------------------------------------------ the state machine
    def request_values(self, kind: str) -> dict:
        """The public values of a ``kind`` request at the current state (no side effect): the thresholds of the
        quartile search, the point (and for a density its bandwidth) of the fit, the calibration's point."""
        if kind in (N.RANGE, N.MOMENTS):
            return {}
        if kind == N.QUARTILES:
            thresholds = N.quartile_thresholds(self.brackets, shared=self.warped)
            return {"thresholds": np.sinh(thresholds) if self.warped else thresholds}
        if kind == N.TERM:
            return {"point": self.raw(self.x)}
        if kind == N.DENSITY:
            h = N.DENSITY_BANDWIDTHS[0] if self.densities == 0 else N.DENSITY_BANDWIDTHS[1] / self.curvature
            return {"point": self.raw(self.x), "bandwidth": np.array([float(h * self.scale)])}
        return {"point": self._calibration_point()}

    def _public(self, kind: str) -> dict:
        values = self.request_values(kind)
        if kind == N.DENSITY:
            self._bandwidth = float(values["bandwidth"][0])
        return values

    def _plan(self, clients=None) -> RoundPlan | None:
        round_ = self.state.round + 1
        if round_ > self.schedule.rounds:
            return None
        kind = self.schedule.kind(round_)
        public = self._public(kind)
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = self._guarded_releases(round_, asked)
        requests = tuple(SiteRequest(i, round_, dict(public)) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _check(self, release: SiteRelease) -> None:
        client, round_ = int(release.client), self.current_plan.round
        kind = self.schedule.kind(round_)
        shape = (self.dim,) if kind == N.TERM else (self.dim * self.dim,) if kind == N.MOMENTS else (_SHAPES[kind],)
        check_schedule_release(release, kind, shape, self.sizes[client], self.planned_release(round_, client))

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        round_ = plan.round
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        self.apply(round_, {i: np.asarray(r.value, float) for i, r in accepted.items()})
        row = {"round": round_, "curvature": self.curvature / self.scale,
               "location": self.location, "scale": self.scale,
               "components_used": int(self.active.sum() - self.free)}
        if self.evaluator is not None:
            row.update(self.evaluator(self.state))
        if self.scenario.privacy.enabled:
            row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        return row

    def apply(self, round_: int, values: dict) -> None:
        """The server's step on round ``round_``'s releases ``{client: value}`` (its kind's step below), and the
        successor state with the current model."""
        kind = self.schedule.kind(round_)
        {N.RANGE: self._range, N.QUARTILES: self._quartiles, N.MOMENTS: self._moments, N.TERM: self._term,
         N.DENSITY: self._density, N.SHARE: self._share}[kind](round_, values)
        w = self.current_model
        self.state = self.state.successor(w, np.zeros((self.num_clients, self.dim)),
                                          np.broadcast_to(w, (self.num_clients, self.dim)).copy())

    # ------------------------------------------------------------------ each kind's server step
    def _range(self, round_: int, values: dict) -> None:
        lo = min(float(v[0]) for v in values.values())
        hi = max(float(v[1]) for v in values.values())
        hi = hi if hi > lo else lo + 1.0
        self.brackets = np.array([[lo, hi], [lo, hi]])

    def _quartiles(self, round_: int, values: dict) -> None:
        sizes = np.array([self.sizes[i] for i in values])
        pooled = np.sum([m * v for m, v in zip(sizes, values.values())], axis=0) / sizes.sum()
        self.brackets = N.quartile_brackets(self.brackets, pooled, shared=self.warped)
        if round_ >= self.schedule.rounds or self.schedule.kind(round_ + 1) != N.QUARTILES:
            location, self.scale = N.location_and_scale(np.sinh(self.brackets) if self.warped else self.brackets)
            self.location = location if self.free else 0.0

    def _moments(self, round_: int, values: dict) -> None:
        """The metric's G (N.1'): the mean over the sites of their released second moments, symmetrized -- the
        gradient is the mean of the sites' terms, so its curvature is f G.  With privacy: the public c0^2 in the
        intercept's corner, the eigenvalues floored at the noise's spectral edge, and the projector onto the
        directions above it (:func:`N.floor_moments_split`, from the planned sigmas of the sites that replied).  A singular G without privacy (a coordinate no row spans)
        stops the run in one line."""
        d = self.dim
        mean = np.mean([np.asarray(v, float).reshape(d, d) for v in values.values()], axis=0)
        if self.scenario.privacy.enabled:
            sigmas = np.array([self.planned_release(round_, i).sigma for i in values])
            noise_sd = float(np.sqrt(np.sum(sigmas**2))) / len(values)
            c0 = self.c0 if self.free else None
            self.moments, self.above_floor = N.floor_moments_split(mean, noise_sd, c0=c0, tau=self.tau)
            return
        mean = (mean + mean.T) / 2.0
        if np.linalg.eigvalsh(mean)[0] <= 1e-12 * max(float(np.trace(mean)), 1e-300):
            raise ValueError("the sites' feature rows do not span every coordinate (their second-moment matrix is "
                             "singular): use fewer basis components")
        self.moments = mean

    def _term(self, round_: int, values: dict) -> None:
        gradient = -np.mean(list(values.values()), axis=0)  # the releases are descent terms -g_i + noise
        gradient = np.where(self.active, gradient, 0.0)  # components below the noise edge stay at 0 (N.5)
        if self.penalty == "l2":
            gradient = gradient + self._ridge() * self.x
        self.term_index += 1
        if self.term_index > N.TRANSIENT_ROUNDS and self.schedule.multipliers is not None:
            self.averaged_z.append(float(self.schedule.multipliers[round_ - 1]))
        if round_ < self.schedule.rounds and self.schedule.kind(round_ + 1) == N.DENSITY:
            self.pending_gradient = gradient  # the step waits for the density at the same point
            return
        self._step(gradient)

    def _density(self, round_: int, values: dict) -> None:
        density = float(np.mean([v[0] for v in values.values()])) * self.scale  # standardized units
        f = self.curvature
        self.curvature = float(np.clip(density, max(f / N.CURVATURE_CLAMP, self.f0), f * N.CURVATURE_CLAMP))
        self.densities += 1
        gradient, self.pending_gradient = self.pending_gradient, None
        self._step(gradient)

    def _ridge(self) -> np.ndarray:
        """lam / M on the penalized coordinates for l2 (in standardized units: lam s / M)."""
        return np.where(np.arange(self.dim) >= self.free, self.lam_site * self.scale, 0.0)

    def _step(self, gradient: np.ndarray) -> None:
        """One Newton step in the public metric (N.1)-(N.2); after the last term round, the released model.
        With the private second-moments metric (N.2'): the transient rounds step only along the directions above
        its noise floor, and the estimate is the mean of the iterates prox_H(x - H^-1 g) after them, weighted by
        their index, instead of the dual average."""
        step = N.FIRST_STEP if self.densities == 0 else N.STEP
        lam = self.lam_site * (self.scale if self.penalty == "l2" else 1.0)
        metric = N.MomentMetric if self.moment_metric else N.PublicMetric
        self.metric = metric.of(self.moments, self.curvature, step, penalty=self.penalty, lam_site=lam,
                                free=self.free)
        if self.above_floor is not None:
            averaging = self.term_index - N.TRANSIENT_ROUNDS
            self.x = self.metric.prox(self.x - self.metric.newton(
                gradient if averaging > 0 else self.above_floor @ gradient))
            if averaging > 0:
                self.v_sum, self.v_count = self.v_sum + averaging * self.x, self.v_count + averaging
            if self.term_index == self.schedule.term_rounds:
                self._release_fit()
            return
        v = self.x - self.metric.newton(gradient)
        if self.term_index > N.TRANSIENT_ROUNDS:
            self.v_sum, self.v_count = self.v_sum + v, self.v_count + 1
            self.x = self.metric.prox(self.v_sum / self.v_count)
        else:
            self.x = self.metric.prox(v)
        if self.term_index == self.schedule.term_rounds:
            self._release_fit()

    def _release_fit(self) -> None:
        """prox_H(mean of the averaged one-shot Newton estimates), shrunk by empirical Bayes (privacy on), in
        the fit's units (N.2)-(N.3)."""
        if not self.v_count:
            estimate = self.x
        elif self.above_floor is not None:
            estimate = self.v_sum / self.v_count  # the weighted mean of prox_H iterates (N.2')
        else:
            estimate = self.metric.prox(self.v_sum / self.v_count)
        if self.averaged_z and self.moment_metric:
            # the full metric's noise is correlated: shrink the slopes in the eigenbasis of their noise covariance
            weights = None if self.above_floor is None else np.arange(1, len(self.averaged_z) + 1)
            covariance = N.averaged_noise_covariance(self.averaged_z, self.sizes, self.calibration.gradient_bound,
                                                     self.noise_shape, self.metric.matrix / self.metric.step,
                                                     weights)
            slopes = slice(self.free, None)
            estimate = estimate.copy()
            estimate[slopes] = N.eb_shrinkage_rotated(estimate[slopes], covariance[slopes, slopes],
                                                      self.moments[slopes, slopes])
        elif self.averaged_z:
            variance = N.averaged_noise_variance(self.averaged_z, self.sizes, self.calibration.gradient_bound,
                                                 self.noise_shape, self.metric.diagonal / self.metric.step)
            factor = np.ones(self.dim)
            used = np.flatnonzero(self.active[self.free:]) + self.free  # the components at 0 inform no prior
            factor[used] = N.eb_shrinkage(estimate[used], variance[used], self.moments[used])
            estimate = estimate * factor
        self.x = estimate
        self.model = self.raw(estimate)

    def _share(self, round_: int, values: dict) -> None:
        share = float(np.mean([v[0] for v in values.values()]))
        b = self.c0 * float(self._calibration_point()[0])
        self.intercepts.append(b - (share - self.tau) / (self.curvature / self.scale))
        if round_ >= self.schedule.rounds or self.schedule.kind(round_ + 1) != N.SHARE:
            self.model = self._calibration_point()


def make_server(scenario, basis, sizes, **kwargs) -> FDPADMMServer:
    """FDP-ADMM's server of ``scenario``'s rule: :class:`NewtonServer` for ``algorithm.rule: newton``, else the
    ADMM rule's :class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer` (with a private
    ``algorithm.level_calibration``: :class:`~fdp_flower.algorithms.fdp_admm.level_protocol.LevelledADMMServer`;
    every driver builds it here)."""
    from fdp_flower.algorithms.fdp_admm.plan import level_calibration

    if getattr(scenario.algorithm, "rule", "admm") == "newton":
        return NewtonServer(scenario, basis, sizes, **kwargs)
    if level_calibration(scenario):
        from fdp_flower.algorithms.fdp_admm.level_protocol import LevelledADMMServer

        return LevelledADMMServer(scenario, basis, sizes, **kwargs)
    return FDPADMMServer(scenario, basis, sizes, **kwargs)
