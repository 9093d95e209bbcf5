"""Empirical privacy audit of every algorithm (``fdp-flower audit``; statistics in
:mod:`fdp_flower.privacy.audit`).

The audited party is one client (node) of a scenario.  Its neighbouring datasets D, D' are run
through the real client code of its family -- :func:`fdp_flower.algorithms.fdp_admm.update.client_primal_step`,
:func:`fdp_flower.algorithms.gradient_admm.site.answer`,
:func:`fdp_flower.algorithms.p2p.site.answer`,
:func:`fdp_flower.functional.federated_fpca.client_summary` -- on the *same* transcript: every step,
both noise-free releases are computed from the public state of the run so far, one of them is
released with the calibrated noise (the real noise function), the other parties release theirs
(real code, own data, own noise) and the public state advances.

Neighbouring pairs (the audited party's data is D, a neighbour D'):

- ``canary replace-one``: a worst-case D built from the party's largest row r = (a, y): m - 1 copies
  of r and one canary r' = (-a, y') (y' chosen among a few candidates to maximize the step-1 change);
  D' replaces the canary by r.  At the public starting point this attains the calibrated
  sensitivity of a mean of bounded per-record terms, so the audit is tight there;
- ``canary add`` / ``canary remove``: the same D with one more canary, resp. without it;
- ``random replace-one`` / ``random remove``: the party's real data, one random row replaced by a
  random row of another party, resp. removed.

A pair is compared with the ledger's sensitivity under its relation (replace-one, or add/remove
through :meth:`fdp_flower.privacy.ledger.GaussianRelease.under`).  m_i stays the public count of D
(the bookkeeping of the others does not change with D'), as in the ledger.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fdp_flower.privacy.audit import (
    KLEstimate,
    LikelihoodRatioTest,
    epsilon_lower_bound,
    gaussian_llr,
    kl_estimate,
)
from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon
from fdp_flower.privacy.mechanisms import add_gaussian_noise

#: |a.x| at the adversarial public states (the logistic derivative is then within 1e-13 of 1).
PROBE_MARGIN = 30.0

#: Angle between the bent canary rows and the probe direction (89 degrees): their difference is
#: 2 sin(89 deg) = 0.99985 x the largest possible, and both have a.w = -PROBE_MARGIN at the probe.
BEND_ANGLE = np.deg2rad(89.0)

#: Variants the audit can select that the library does not run (documented as NOT DP).
VARIANTS = ("private_anchor",)


@dataclass(frozen=True)
class PartyData:
    """The audited party's rows as its release function sees them (clipped), and responses."""

    features: np.ndarray
    response: np.ndarray | None

    @property
    def size(self) -> int:
        return int(self.features.shape[0])

    def replace(self, index: int, row: np.ndarray, value) -> "PartyData":
        f = self.features.copy()
        f[index] = row
        r = None if self.response is None else self.response.copy()
        if r is not None:
            r[index] = value
        return PartyData(f, r)

    def remove(self, index: int) -> "PartyData":
        r = None if self.response is None else np.delete(self.response, index)
        return PartyData(np.delete(self.features, index, axis=0), r)

    def add(self, row: np.ndarray, value) -> "PartyData":
        r = None if self.response is None else np.r_[self.response, value]
        return PartyData(np.vstack([self.features, row[None, :]]), r)


# ------------------------------------------------------------------ protocols (one per family)
class _Protocol:
    """What the audit needs of an algorithm; subclasses call the real client and server code."""

    name: str
    steps: int
    mechanism: str = "gaussian"  # ledger mechanism (its add/remove conversion)
    relation: str = "replace_one"  # the relation the noise is calibrated for
    delta: float
    scales: np.ndarray | None = None
    logistic: bool = False

    def mechanism_at(self, step: int) -> str:
        """The ledger mechanism of the release at ``step`` (its add/remove conversion)."""
        return self.mechanism

    def party(self) -> PartyData:
        """The audited party's real rows."""
        raise NotImplementedError

    def donors(self) -> PartyData:
        """Rows of the other parties (random neighbours draw replacements from them)."""
        raise NotImplementedError

    def start(self) -> Any:
        """The public state before step 1."""
        raise NotImplementedError

    def release(self, public, hidden, data: PartyData, step: int) -> tuple[np.ndarray, Any]:
        """The audited party's noise-free release at ``step`` given the public state, and its
        carried state (``hidden``: what the party keeps between steps under this dataset)."""
        raise NotImplementedError

    def calibration(self, step: int) -> tuple[float, float]:
        """(sensitivity under ``relation``, sigma) of the audited party's release at ``step``."""
        raise NotImplementedError

    def add_noise(self, value: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
        return add_gaussian_noise(value, sigma, rng, self.scales)

    def advance(self, public, released: np.ndarray, hidden, step: int, rng: np.random.Generator):
        """The other parties' releases (their data, noise from ``rng``) and the public update,
        given the audited party's noisy ``released`` value and its carried state."""
        raise NotImplementedError

    #: False when rows carry a public constant column (an intercept): only the reflection is tried
    free_rows: bool = True

    def _frame(self, row: np.ndarray):
        """(s, n, e, x): noise shape s, whitened norm n = ||row / s||, the unit direction e of
        row / s and a unit x orthogonal to it (whitened coordinates)."""
        s = np.ones_like(row) if self.scales is None else np.asarray(self.scales, dtype=float)
        u = row / s
        n = float(np.linalg.norm(u))
        e = u / n
        k = int(np.argmin(np.abs(e)))
        x = -e[k] * e
        x[k] += 1.0
        return s, n, e, x / np.linalg.norm(x)

    def feature_pairs(self, row: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Candidate (r, r') feature rows of the canary, both as far out as ``row`` in the noise
        metric: r and its reflection -r; and (free rows) the bent pair n (-cos t x +- sin t e)
        (t = :data:`BEND_ANGLE`), whose loss derivatives saturate together at the adversarial state
        along x (for the logistic loss the reflection only reaches half the bound there)."""
        pairs = [(row, -row)]
        if self.free_rows and row.size >= 2 and np.linalg.norm(row) > 0:
            s, n, e, x = self._frame(row)
            c, t = np.cos(BEND_ANGLE), np.sin(BEND_ANGLE)
            pairs.append((s * n * (-c * x + t * e), s * n * (-c * x - t * e)))
        return pairs

    def adversarial_states(self, row: np.ndarray) -> list:
        """Public states of step 1 that a malicious coordinator or peer could present to the party
        (its release function must respect the calibrated sensitivity at *any* public input):
        the point where the party evaluates or linearizes its loss moved to one of
        :meth:`probe_points`.  Default: none (a release with no public input)."""
        return []

    def probe_points(self, row: np.ndarray) -> list[np.ndarray]:
        """+-w with a.w = +-:data:`PROBE_MARGIN` for a = ``row`` and for both rows of the bent pair,
        which saturates every bounded loss derivative (logistic: within e^-30 of its bound)."""
        if np.linalg.norm(row) == 0:
            return []
        s, n, e, x = self._frame(row)
        along = PROBE_MARGIN * e / (n * s)
        across = PROBE_MARGIN * x / (n * np.cos(BEND_ANGLE) * s)
        return [along, -along, across, -across]

    def response_candidates(self, value, all_values) -> list:
        if all_values is None:
            return [None]
        if self.logistic:
            return [1.0, -1.0]
        big = 10.0 * float(np.max(np.abs(all_values))) + 1.0
        return sorted({float(value), -float(value), big, -big})

    def noise_metric(self, diff: np.ndarray) -> float:
        return float(np.linalg.norm(diff if self.scales is None else diff / self.scales))

    #: the names of the public values a request of the audited party carries (the adversarial mode crafts them)
    public_names: tuple[str, ...] = ()

    def site_answer(self, public, data: PartyData, step: int, noise, crafted: dict | None = None):
        """The audited party's answer to the request of ``step`` at the public state ``public``, computed by the
        family's real site function (``answer`` of ``algorithms/<family>/site.py``) on ``data`` with the
        :data:`~fdp_flower.algorithms.protocol.NoiseSource` ``noise``: a
        :class:`~fdp_flower.algorithms.protocol.SiteRelease` or the exception that refuses it.  ``crafted``
        replaces public values of the request by name (the adversarial mode).  None: the protocol has no
        site function (the DP-FPCA summary, the private-anchor variant)."""
        return None


#: Why the membership audit refuses an aggregated trust mode, and what checks it instead (one line each;
#: docs/privacy.md, section 8).
AGGREGATED_TRUST_REFUSAL = {
    "secure_aggregation": (
        "the membership audit covers privacy.trust 'site' only: under secure_aggregation no site's release "
        "reaches the server, only integer sums of Skellam shares, whose noise the secure-sum audit tests instead "
        "(fdp-flower audit runs it: audit_secure_sums; docs/secure_aggregation.md, eqs. (9.10)-(9.12))"),
    "trusted_aggregator": (
        "the membership audit covers privacy.trust 'site' only: under trusted_aggregator the sites send "
        "noise-free terms (there is no site noise to audit, and no protection against the server); the server's "
        "one Gaussian draw per round is the trusted part"),
}


class FDPADMMProtocol(_Protocol):
    """FDP-ADMM: client ``party`` of the server-coordinated federation (release: its noisy descent term
    at the point the server names, :mod:`fdp_flower.algorithms.fdp_admm.site`; the public state advances
    by the protocol's server step, :func:`fdp_flower.algorithms.fdp_admm.protocol.server_round`)."""

    mechanism = "fdp_admm_subgradient"

    def __init__(self, scenario, party: int = 0):
        from fdp_flower.algorithms.fdp_admm.plan import build_objective, model_dim, noise_plan, site_plan
        from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
        from fdp_flower.algorithms.fdp_admm.site import SiteData

        if not scenario.privacy.enabled:
            raise ValueError("the audit needs privacy.enabled: true (nothing is calibrated otherwise)")
        sizes, basis, feats, resp, clipped, _ev = simulation_setup(scenario, with_reference=False)
        self.scenario, self.c, self.basis, self.client_sizes = scenario, party, basis, list(sizes)
        self.sizes = np.asarray(sizes, dtype=float)
        self.feats, self.resp = feats, resp
        self.objective = build_objective(scenario)
        self.dim = model_dim(scenario, basis)
        self.steps_plan = noise_plan(scenario, basis)
        if scenario.privacy.enabled and scenario.privacy.trust != "site":
            raise ValueError(AGGREGATED_TRUST_REFUSAL[scenario.privacy.trust])
        self.site_plan = site_plan(scenario, basis)
        self.scales = self.site_plan.scales
        self.rho = scenario.algorithm.rho
        others = [i for i in range(len(sizes)) if i != party]
        self.others = SiteData.stack(others, [feats[i] for i in others], [resp[i] for i in others],
                                     [clipped[i] for i in others])
        self.steps = scenario.algorithm.rounds
        self.delta = scenario.privacy.delta
        self.name = f"FDP-ADMM ({scenario.model.clip_shape} clip)"
        self.free_rows = not scenario.model.intercept

    def party(self):
        return PartyData(self.feats[self.c], self.resp[self.c])

    def donors(self):
        others = [i for i in range(len(self.feats)) if i != self.c]
        return PartyData(np.vstack([self.feats[i] for i in others]), np.concatenate([self.resp[i] for i in others]))

    def start(self):
        from fdp_flower.algorithms.fdp_admm.plan import initial_state

        return initial_state(self.scenario, self.dim)

    def release(self, public, hidden, data, step):
        from fdp_flower.algorithms.fdp_admm.site import SiteData, mean_loss_terms

        site = SiteData.stack([self.c], [data.features], [data.response])
        return -mean_loss_terms(self.site_plan.loss, site, public.noisy_primals[self.c][None, :])[0], None

    def calibration(self, step):
        sens, sigma = self.site_plan.calibration(step, self.sizes[self.c])
        return float(sens), float(sigma)

    def advance(self, public, released, hidden, step, rng):
        from fdp_flower.algorithms.fdp_admm.protocol import server_round
        from fdp_flower.algorithms.fdp_admm.site import noisy_descent_terms

        points = public.noisy_primals[list(self.others.clients)]
        terms = noisy_descent_terms(self.others, points, round_=step, plans=[self.site_plan], noise=lambda _e: rng)
        descent = np.insert(terms, self.c, released, axis=0)
        eta = self.steps_plan.step_size(step, self.sizes)
        state, _control = server_round(self.scenario, self.objective, public, descent, eta=eta[:, None], rho=self.rho)
        return state

    def adversarial_states(self, row):
        from dataclasses import replace

        start = self.start()
        out = []
        for x in self.probe_points(row):
            primals = start.noisy_primals.copy()
            primals[self.c] = x
            out.append(replace(start, noisy_primals=primals))
        return out

    public_names = ("point",)

    def site_answer(self, public, data, step, noise, crafted=None):
        from fdp_flower.algorithms.fdp_admm import site
        from fdp_flower.algorithms.protocol import SiteRequest

        values = {"point": public.noisy_primals[self.c], **(crafted or {})}
        held = site.SiteData.stack([self.c], [data.features], [data.response])
        (out,) = site.answer([SiteRequest(self.c, step, values)], held, self.site_plan, noise)
        return out

    def feature_pairs(self, row):
        if self.scenario.model.intercept:  # the intercept column is the same public constant in every row
            other = row.copy()
            other[1:] = -row[1:]
            return [(row, other)]
        return super().feature_pairs(row)


class _ScheduledKinds:
    """The audit of a scheduled FDP-ADMM run (the Newton rule, the ADMM rule's level calibration): the schedule's kind
    of the step being audited sets the noise metric (a data term: the clip's shape; a share: plain units) and the
    ledger mechanism.  Needs ``schedule``, ``_step`` and ``noise_shape``."""

    @property
    def scales(self):
        from fdp_flower.algorithms.fdp_admm import newton as N

        return self.noise_shape if self.schedule.kind(self._step) == N.TERM else None

    @scales.setter
    def scales(self, value) -> None:  # FDPADMMProtocol.__init__ sets the data term's shape; the kind decides here
        self.noise_shape = value

    def mechanism_at(self, step: int) -> str:
        from fdp_flower.algorithms.fdp_admm import newton as N
        from fdp_flower.algorithms.fdp_admm.site import MECHANISM, NEWTON_MECHANISMS

        kind = self.schedule.kind(step)
        return MECHANISM if kind == N.TERM else NEWTON_MECHANISMS[kind]

    def _advanced(self, public, step: int, requests, mine: np.ndarray, rng):
        """A copy of the server ``public`` after its own step on ``mine`` (the audited party's release) and the
        other parties' answers to ``requests`` (real site function, noise from ``rng``)."""
        import copy

        from fdp_flower.algorithms.fdp_admm.site import answer

        replies = {self.c: mine}
        for request, out in zip(requests, answer(requests, self.others, self.site_plan, lambda _events: rng)):
            if isinstance(out, Exception):
                raise out
            replies[int(request.client)] = np.asarray(out.value, dtype=float)
        server = copy.deepcopy(public)
        server.apply(step, replies)
        return server

    def adversarial_states(self, row):
        return []  # the public values of every kind are checked by the site (site_answer, adversarial mode)


class NewtonAuditProtocol(_ScheduledKinds, FDPADMMProtocol):
    """FDP-ADMM under the Newton rule (``algorithm.rule: newton``): client ``party``'s releases of the rule's
    fixed schedule -- quartile shares, a fixed basis's second moments, data terms, residual densities, residual
    shares -- at the public values the
    real :class:`~fdp_flower.algorithms.fdp_admm.newton_protocol.NewtonServer` names from the transcript so far
    (:meth:`~fdp_flower.algorithms.fdp_admm.newton_protocol.NewtonServer.request_values`; the public state is a
    copy of that server, advanced by its own step, ``apply``, on every party's release).

    Each step is audited in its own noise metric: the data term in the clip's noise shape, the other kinds in
    plain units.  A density (1/m) #{|y - a.w| <= h} / (2h) is audited times its public 2h, i.e. as the share
    (1/m) #{|y - a.w| <= h} with sensitivity 1/m and sigma z_l / m: the bandwidth is the server's (it follows the
    noisy curvature), and scaling a release by a public constant changes neither its privacy loss nor the
    test, while the calibration stays the same on every transcript."""

    def __init__(self, scenario, party: int = 0):
        from fdp_flower.algorithms.fdp_admm.newton_protocol import NewtonServer
        from fdp_flower.algorithms.fdp_admm.plan import site_plan

        super().__init__(scenario, party)
        self.site_plan = site_plan(scenario, self.basis, self.client_sizes)
        self.schedule = self.site_plan.schedule
        self.server = NewtonServer(scenario, self.basis, self.client_sizes)
        self.noise_shape = self.site_plan.scales
        self._step = 1
        self.name = f"FDP-ADMM, Newton rule ({scenario.model.clip_shape} clip)"

    def start(self):
        return self.server

    def _values(self, public, step: int) -> dict:
        """The public values of step ``step``'s request at ``public`` (a state without a released model -- the
        start -- names its current point for a calibration share)."""
        from fdp_flower.algorithms.fdp_admm import newton as N

        kind = self.schedule.kind(step)
        if kind == N.SHARE and public.model is None:
            return {"point": public.raw(public.x)}
        return public.request_values(kind)

    def release(self, public, hidden, data, step):
        from fdp_flower.algorithms.fdp_admm import newton as N
        from fdp_flower.algorithms.fdp_admm.site import SiteData, mean_loss_terms

        self._step = step
        kind = self.schedule.kind(step)
        values = self._values(public, step)
        if kind == N.QUARTILES:
            return N.quartile_shares(data.response, values["thresholds"]), None
        if kind == N.TERM:
            site = SiteData.stack([self.c], [data.features], [data.response])
            return -mean_loss_terms(self.site_plan.loss, site, values["point"][None, :])[0], None
        if kind == N.DENSITY:
            h = float(values["bandwidth"][0])
            return np.array([2.0 * h * N.residual_density(data.features, data.response, values["point"], h)]), None
        if kind == N.SHARE:
            return np.array([N.residual_share(data.features, data.response, values["point"])]), None
        if kind == N.MOMENTS:
            return N.second_moments(data.features), None
        raise ValueError(f"step {step}: a {kind} release is not private (the audit needs privacy on)")

    def calibration(self, step):
        from fdp_flower.algorithms.fdp_admm import newton as N
        from fdp_flower.algorithms.fdp_admm.site import newton_release_event

        kind = self.schedule.kind(step)
        # a density in units of its public 2h: the release_sensitivity of bandwidth 1/2, i.e. 1 / m
        event = newton_release_event(kind, self.c, step, self.sizes[self.c], self.site_plan,
                                     0.5 if kind == N.DENSITY else None)
        return float(event.sensitivity), float(event.sigma)

    def advance(self, public, released, hidden, step, rng):
        from fdp_flower.algorithms.fdp_admm import newton as N
        from fdp_flower.algorithms.protocol import SiteRequest

        kind = self.schedule.kind(step)
        values = self._values(public, step)
        mine = np.asarray(released, dtype=float)
        if kind == N.DENSITY:
            mine = mine / (2.0 * float(values["bandwidth"][0]))
        requests = [SiteRequest(i, step, dict(values)) for i in self.others.clients]
        return self._advanced(public, step, requests, mine, rng)

    @property
    def public_names(self) -> tuple[str, ...]:
        from fdp_flower.algorithms.fdp_admm.site import _NEWTON_KEYS

        return tuple(sorted(_NEWTON_KEYS[self.schedule.kind(1)])) or ("point",)

    def site_answer(self, public, data, step, noise, crafted=None):
        from fdp_flower.algorithms.fdp_admm import site
        from fdp_flower.algorithms.protocol import SiteRequest

        self._step = step
        values = {**self._values(public, step), **(crafted or {})}
        held = site.SiteData.stack([self.c], [data.features], [data.response])
        (out,) = site.answer([SiteRequest(self.c, step, values)], held, self.site_plan, noise)
        return out


class LevelAuditProtocol(_ScheduledKinds, FDPADMMProtocol):
    """FDP-ADMM under the ADMM rule with its location/scale search and level calibration
    (``algorithm.level_calibration``): client ``party``'s releases of the schedule -- quartile shares of the
    responses, the L data terms, quartile shares of the residuals, residual shares -- at the public values the real
    :class:`~fdp_flower.algorithms.fdp_admm.level_protocol.LevelledADMMServer` names from the transcript so far
    (``request_values``; the public state is a copy of that server, advanced by its own step, ``apply``, on every
    party's release).  The data terms are audited in the clip's noise shape, the shares in plain units."""

    def __init__(self, scenario, party: int = 0):
        from fdp_flower.algorithms.fdp_admm.level_protocol import LevelledADMMServer

        super().__init__(scenario, party)
        self.site_plan = site_plan_of(scenario, self.basis, self.client_sizes)
        self.schedule = self.site_plan.schedule
        self.steps = self.schedule.rounds
        self.server = LevelledADMMServer(scenario, self.basis, self.client_sizes)
        self.noise_shape = self.site_plan.scales
        self._step = 1
        self.name = f"FDP-ADMM, location/scale search and level calibration ({scenario.model.clip_shape} clip)"

    def start(self):
        return self.server

    def release(self, public, hidden, data, step):
        from fdp_flower.algorithms.fdp_admm import newton as N
        from fdp_flower.algorithms.fdp_admm.site import SiteData, mean_loss_terms

        self._step = step
        kind = self.schedule.kind(step)
        values = public.request_values(kind, self.c)
        if kind == N.QUARTILES:
            return N.quartile_shares(data.response, values["thresholds"]), None
        if kind == N.TERM:
            site = SiteData.stack([self.c], [data.features], [data.response])
            return -mean_loss_terms(self.site_plan.loss, site, values["point"][None, :])[0], None
        if kind == N.RESIDUAL_QUARTILES:
            return N.residual_quartile_shares(data.features, data.response, values["point"], values["thresholds"]), None
        return np.array([N.residual_share(data.features, data.response, values["point"])]), None

    def calibration(self, step):
        from fdp_flower.algorithms.fdp_admm.site import newton_release_event

        event = newton_release_event(self.schedule.kind(step), self.c, step, self.sizes[self.c], self.site_plan)
        return float(event.sensitivity), float(event.sigma)

    def advance(self, public, released, hidden, step, rng):
        from fdp_flower.algorithms.protocol import SiteRequest

        kind = self.schedule.kind(step)
        requests = [SiteRequest(i, step, public.request_values(kind, i)) for i in self.others.clients]
        return self._advanced(public, step, requests, np.asarray(released, dtype=float), rng)

    @property
    def public_names(self) -> tuple[str, ...]:
        from fdp_flower.algorithms.fdp_admm.site import _NEWTON_KEYS

        return tuple(sorted(_NEWTON_KEYS[self.schedule.kind(1)]))

    def site_answer(self, public, data, step, noise, crafted=None):
        from fdp_flower.algorithms.fdp_admm import site
        from fdp_flower.algorithms.protocol import SiteRequest

        self._step = step
        values = {**public.request_values(self.schedule.kind(step), self.c), **(crafted or {})}
        held = site.SiteData.stack([self.c], [data.features], [data.response])
        (out,) = site.answer([SiteRequest(self.c, step, values)], held, self.site_plan, noise)
        return out


def site_plan_of(scenario, basis, sizes):
    """The run's site plan for the public ``sizes`` (its schedule splits mu^2 by n = sum_i m_i)."""
    from fdp_flower.algorithms.fdp_admm.plan import site_plan

    return site_plan(scenario, basis, sizes)


class FederatedFPCAProtocol(_Protocol):
    """Federated DP-FPCA: client ``party``'s one covariance-summary release (upper(C_i), mu_i)."""

    mechanism = "fpca_covariance"

    def __init__(self, scenario, party: int = 0):
        from fdp_flower.algorithms.fdp_admm.plan import data_source, grid_of
        from fdp_flower.functional.federated_fpca import noise_multiplier, scenario_pre_basis

        b = scenario.basis
        if getattr(b, "kind", None) != "federated_dp" or not b.private:
            raise ValueError("the federated DP-FPCA audit needs basis.kind: federated_dp with private: true")
        source = data_source(scenario)
        pre = scenario_pre_basis(scenario, grid_of(scenario))
        self.coefs = [pre.scores(source.load(i).curves) for i in range(scenario.federation.num_clients)]
        self.c, self.clip_cb = party, b.clip_cb
        self.z = noise_multiplier(b.eps, b.delta)
        self.delta = b.delta
        self.steps = 1
        self.name = "federated DP-FPCA"
        self._m = self.coefs[party].shape[0]
        self._memo: dict[int, tuple[PartyData, np.ndarray]] = {}

    def _clipped(self, coefs):
        from fdp_flower.core.clipping import clip_rows

        return clip_rows(coefs, self.clip_cb)[0]

    def party(self):
        return PartyData(self._clipped(self.coefs[self.c]), None)

    def donors(self):
        return PartyData(self._clipped(np.vstack([c for i, c in enumerate(self.coefs) if i != self.c])), None)

    def start(self):
        return None

    def release(self, public, hidden, data, step):
        from fdp_flower.functional.federated_fpca import client_summary

        key = id(data)  # one release with no public input: computed once per dataset
        if key not in self._memo or self._memo[key][0] is not data:
            s = client_summary(data.features, clip_cb=self.clip_cb, sigma=None, rng=None)
            upper = s.second_moment[np.triu_indices(s.second_moment.shape[0])]
            self._memo[key] = (data, np.r_[upper, s.mean])
        return self._memo[key][1], None

    def calibration(self, step):
        from fdp_flower.functional.federated_fpca import summary_sensitivity

        sens = float(summary_sensitivity(clip_cb=self.clip_cb, m=self._m))
        return sens, self.z * sens

    def add_noise(self, value, sigma, rng):
        # client_summary's noise: i.i.d. N(0, sigma^2) on and above the diagonal and on the mean
        return value + sigma * rng.standard_normal(value.shape)

    def advance(self, public, released, hidden, step, rng):
        return None  # one release; the others' summaries do not depend on it

    def feature_pairs(self, row):
        perp = np.roll(row, 1)  # same norm, a different direction: moves C_i as well as mu_i
        return [(row, -row), (row, perp)]


class GradientADMMProtocol(_Protocol):
    """DP-ADMM / DP-AccADMM: client ``party``'s noisy mean gradient at the point the server names
    (:mod:`fdp_flower.algorithms.gradient_admm.site`); the public state advances by the protocol's server
    step (:func:`fdp_flower.algorithms.gradient_admm.protocol.server_round`)."""

    mechanism = "gaussian_gradient"
    logistic = False

    def __init__(self, scenario, party: int = 0):
        from fdp_flower.algorithms.gradient_admm.plan import build_problem, resolve_gamma, scenario_privacy
        from fdp_flower.core.losses import LogisticLoss

        privacy = scenario_privacy(scenario)
        if privacy is None:
            raise ValueError("the audit needs privacy.enabled: true (nothing is calibrated otherwise)")
        self.problem = build_problem(scenario)
        alg = scenario.algorithm
        self.alg, self.c = alg, party
        self.gamma = resolve_gamma(self.problem.matrix, eta=alg.eta, rho=alg.rho, gamma=alg.gamma)
        self.site_plan = self.problem.site_plan(alg.rounds, privacy)
        others = [i for i in range(self.problem.num_clients) if i != party]
        sites = self.problem.site_data()
        self.others = type(sites)(tuple(others), tuple(sites.features[i] for i in others),
                                  tuple(sites.responses[i] for i in others))
        self.relation = privacy.neighbouring
        self.delta = privacy.delta
        self.steps = alg.rounds
        self.accelerated = alg.kind == "dp_acc_admm"
        self.logistic = isinstance(self.problem.loss, LogisticLoss)
        self.name = "DP-AccADMM" if self.accelerated else "DP-ADMM"
        self.free_rows = not getattr(scenario.data, "intercept", False)

    def party(self):
        p = self.problem
        return PartyData(p.client_features[self.c], p.client_responses[self.c])

    def donors(self):
        p = self.problem
        others = [i for i in range(p.num_clients) if i != self.c]
        return PartyData(np.vstack([p.client_features[i] for i in others]),
                         np.concatenate([p.client_responses[i] for i in others]))

    def start(self):
        from fdp_flower.algorithms.gradient_admm.update import GradientADMMState

        return GradientADMMState.initial(self.problem.dim, self.problem.matrix.shape[0])

    def release(self, public, hidden, data, step):
        from fdp_flower.algorithms.gradient_admm.site import data_term

        return data_term(self.problem.loss, public.x_hat, data.features, data.response), None

    def calibration(self, step):
        sens, sigma = self.site_plan.calibration(step, self.problem.counts[self.c])
        return float(sens), float(sigma)

    def adversarial_states(self, row):
        from dataclasses import replace

        start = self.start()
        return [replace(start, x_hat=x) for x in self.probe_points(row)]

    public_names = ("x_hat",)

    def site_answer(self, public, data, step, noise, crafted=None):
        from fdp_flower.algorithms.gradient_admm import site
        from fdp_flower.algorithms.protocol import SiteRequest

        values = {site.POINT: public.x_hat, **(crafted or {})}
        held = site.SiteData((self.c,), (data.features,), (data.response,))
        (out,) = site.answer([SiteRequest(self.c, step, values)], held, self.site_plan, noise)
        return out

    def advance(self, public, released, hidden, step, rng):
        from fdp_flower.algorithms.gradient_admm.protocol import server_round
        from fdp_flower.algorithms.gradient_admm.site import POINT, answer
        from fdp_flower.algorithms.protocol import SiteRequest

        p = self.problem
        requests = [SiteRequest(i, step, {POINT: public.x_hat}) for i in self.others.clients]
        answers = answer(requests, self.others, self.site_plan, lambda _events: rng)
        refused = next((r for r in answers if isinstance(r, Exception)), None)
        if refused is not None:
            raise refused
        releases = np.insert(np.stack([r.value for r in answers]), self.c, released, axis=0)
        return server_round(public, releases, p.counts, p.matrix, lam=p.lam, rho=self.alg.rho, eta=self.alg.eta,
                            gamma=self.gamma, accelerated=self.accelerated, restart=getattr(self.alg, "restart", False))


class P2PProtocol(_Protocol):
    """A peer-to-peer node (zCDP-NFL, DP-NFL, grad-NFL, P-ADMM, PR-ADMM): its release is its noisy data term
    (:mod:`fdp_flower.algorithms.p2p.site`: the descent term at the point the relay names, or PR-ADMM's exact local
    solution); the public state advances by the relay's protocol (:mod:`fdp_flower.algorithms.p2p.protocol`), the
    other nodes releasing through the same site function.

    ``variant="private_anchor"`` (zCDP-NFL only) anchors every node's linearized step at its own noise-free iterate
    x_i^k instead of its release -- a step only the node could run, whose release is its primal with the noise of
    Lemma I in primal units: NOT differentially private at that noise (Gauthier et al. 2023); the audit exists to
    show it fails.
    """

    def __init__(self, scenario, party: int = 0, variant: str | None = None):
        from fdp_flower.algorithms.p2p.plan import scenario_setup
        from fdp_flower.algorithms.p2p.site import NodeData, site_plan
        from fdp_flower.core.losses import LogisticLoss

        if not scenario.privacy.enabled:
            raise ValueError("the audit needs privacy.enabled: true (nothing is calibrated otherwise)")
        if variant not in (None, *VARIANTS):
            raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
        if variant == "private_anchor" and scenario.algorithm.kind != "zcdp_nfl":
            raise ValueError("the private_anchor variant is a zCDP-NFL variant (algorithm.kind: zcdp_nfl)")
        self.graph, self.problem, self.algorithm = scenario_setup(scenario, with_reference=False)
        self.plan = site_plan(self.algorithm, self.problem.objective, self.graph, self.problem.dim)
        self.data = NodeData.of_problem(self.problem)
        self.variant, self.c = variant, party
        self.degrees = np.asarray(self.graph.degrees)
        self.mechanism = "nfl_primal" if variant else self.algorithm.mechanism
        self.steps = self.algorithm.rounds
        self.delta = scenario.privacy.delta
        self.logistic = isinstance(self.problem.loss, LogisticLoss)
        label = {"zcdp_nfl": "zCDP-NFL", "dp_nfl": "DP-NFL", "zcdp_grad_nfl": "zCDP-grad-NFL",
                 "pr_admm": "PR-ADMM", "p_admm": "P-ADMM"}.get(self.algorithm.kind, self.algorithm.kind)
        if getattr(scenario.algorithm, "anchor", "released") == "neighbourhood_average":
            label += " (neighbourhood-average anchor)"
        self.name = label + (" (private anchor, NOT DP)" if variant else "")
        self._m = len(self.problem.responses[party])

    def party(self):
        return PartyData(self.problem.features[self.c], self.problem.responses[self.c])

    def donors(self):
        others = [i for i in range(self.problem.num_nodes) if i != self.c]
        return PartyData(np.vstack([self.problem.features[i] for i in others]),
                         np.concatenate([self.problem.responses[i] for i in others]))

    def start(self):
        from fdp_flower.algorithms.p2p.protocol import P2PState

        n, k = self.problem.num_nodes, self.problem.dim
        return {"state": P2PState.initial(self.graph, k), "hidden": np.zeros((n, k))}

    def _anchored_primal(self, step, anchor, features, response):
        """The private-anchor variant's primal (primal units): the linearized step at ``anchor``."""
        from fdp_flower.algorithms.p2p.zcdp_nfl import nfl_primal_step

        a = self.algorithm
        return nfl_primal_step(objective=self.problem.objective, own_released=step.own,
                               neighbour_released=step.neighbours, dual=step.dual, features=features,
                               response=response, eta=float(a.step_schedule(step.round)), rho=a.penalty, anchor=anchor)

    def release(self, public, hidden, data, step):
        from fdp_flower.algorithms.p2p.protocol import plan_node
        from fdp_flower.algorithms.p2p.site import check_node_public, descent_term, exact_solution

        node_step = plan_node(self.algorithm, self.graph, public["state"], self.c)
        if self.variant == "private_anchor":
            anchor = np.zeros(self.problem.dim) if hidden is None else hidden
            x = self._anchored_primal(node_step, anchor, data.features, data.response)
            return x, x
        request = {k: check_node_public(k, v, self.problem.dim)
                   for k, v in {**node_step.request(self.algorithm), **public.get("request", {})}.items()}
        if self.algorithm.exact:
            return exact_solution(self.plan, self.c, request, data.features, data.response)[0], None
        return descent_term(self.plan, request["point"], data.features, data.response), None

    def calibration(self, step):
        if self.variant == "private_anchor":  # Lemma I in primal units: the descent term's times c_k
            return self.algorithm.primal_release_parameters(step, self._m, int(self.degrees[self.c]))
        return self.plan.calibration(step, self.c, self._m)

    @property
    def public_names(self):
        return self.plan.public_names

    def site_answer(self, public, data, step, noise, crafted=None):
        from fdp_flower.algorithms.p2p import site
        from fdp_flower.algorithms.p2p.protocol import plan_node
        from fdp_flower.algorithms.protocol import SiteRequest

        if self.variant is not None:
            return None  # the private-anchor variant is not the site's code
        node_step = plan_node(self.algorithm, self.graph, public["state"], self.c)
        values = {**node_step.request(self.algorithm), **public.get("request", {}), **(crafted or {})}
        held = site.NodeData({self.c: (data.features, data.response)})
        (out,) = site.answer([SiteRequest(self.c, step, values)], held, self.plan, noise)
        return out

    def adversarial_states(self, row):
        """The node's own release moved to each probe point x.  For PR-ADMM's exact solve the relay also names a
        zero dual and the neighbour sum b = 2 |V_i| s x, which puts the minimizer of the node's subproblem
        phi(x) = f_i(x) + eta |V_i| ||x||^2 - eta <b, x> near s x: the data term moves it by at most
        G / (2 eta |V_i|), so with s = 1 + G ||a|| / (2 eta |V_i| PROBE_MARGIN) every row's loss derivative stays
        saturated at the minimizer, where the solution's sensitivity attains its bound V / (m_i eta |V_i|)."""
        from dataclasses import replace

        out = []
        degree = int(self.degrees[self.c])
        quad = 2.0 * self.algorithm.penalty * degree
        for x in self.probe_points(row):
            public = self.start()
            released = public["state"].released.copy()
            released[self.c] = x
            public["state"] = replace(public["state"], released=released)
            if self.algorithm.exact:
                s = 1.0 + self.algorithm.gradient_bound * float(np.linalg.norm(row)) / (quad * PROBE_MARGIN)
                public["request"] = {"point": x, "dual": np.zeros_like(x), "neighbour_sum": 2.0 * degree * s * x}
            out.append(public)
        return out

    def advance(self, public, released, hidden, step, rng):
        from fdp_flower.algorithms.p2p.protocol import advance, node_primal, plan_node
        from fdp_flower.algorithms.p2p.site import answer
        from fdp_flower.algorithms.protocol import SiteRequest

        a, state = self.algorithm, public["state"]
        steps = {i: plan_node(a, self.graph, state, i) for i in range(self.problem.num_nodes)}
        hid = public["hidden"].copy()
        primals = {}
        for i, node_step in steps.items():
            if i == self.c:
                primals[i] = released if self.variant else node_primal(a, self.problem.objective, node_step, released)
                if self.variant:
                    hid[i] = hidden
            elif self.variant == "private_anchor":
                f, y = self.data.of(i)
                x = self._anchored_primal(node_step, public["hidden"][i], f, y)
                sigma = a.primal_release_parameters(step, len(y), int(self.degrees[i]))[1]
                primals[i], hid[i] = add_gaussian_noise(x, sigma, rng), x
            else:  # the other node's real site function, its noise from this transcript's generator
                (out,) = answer([SiteRequest(i, step, node_step.request(a))], self.data, self.plan,
                                lambda _events: rng)
                if isinstance(out, Exception):
                    raise out
                primals[i] = node_primal(a, self.problem.objective, node_step, out.value)
        return {"state": advance(state, steps, primals), "hidden": hid}


def protocol_for(scenario, *, party: int = 0, variant: str | None = None, fpca: bool = False) -> _Protocol:
    """The audited protocol of a scenario of any family (its registry record's ``audit``; ``fpca``: the
    federated DP-FPCA phase of an FDP-ADMM scenario)."""
    from fdp_flower.algorithms.registry import family, resolve

    record = family(scenario.algorithm.kind)
    parties = record.num_clients(scenario)
    if not 0 <= party < parties:
        raise ValueError(f"party must be a client / node index in 0..{parties - 1}, got {party}")
    if variant is not None and record.name != "p2p":
        raise ValueError(f"variant {variant!r} applies to zcdp_nfl scenarios only")
    if fpca:
        if record.name != "fdp_admm":
            raise ValueError("--fpca audits the federated DP-FPCA phase of an FDP-ADMM scenario")
        return FederatedFPCAProtocol(scenario, party)
    if getattr(scenario.algorithm, "rule", "admm") == "newton":
        return NewtonAuditProtocol(scenario, party)
    if getattr(scenario.algorithm, "level_calibration", False) and scenario.privacy.enabled:
        return LevelAuditProtocol(scenario, party)
    audited = resolve(record.audit)
    return audited(scenario, party) if variant is None else audited(scenario, party, variant)


# ------------------------------------------------------------------ neighbours
@dataclass(frozen=True)
class NeighbourPair:
    label: str
    relation: str  # replace_one | add_remove
    base: PartyData  # D
    other: PartyData  # D'


def _calibrated(protocol: _Protocol, step: int, relation: str) -> tuple[float, float]:
    """(sensitivity under ``relation``, sigma) of the ledger event of the audited release."""
    sens, sigma = protocol.calibration(step)
    event = GaussianRelease(0, step, float(sens), float(sigma), neighbouring=protocol.relation,
                            mechanism=protocol.mechanism_at(step))
    return event.under(relation).sensitivity, sigma


def relations_of(protocol: _Protocol, requested: str) -> list[str]:
    """The relations audited: the calibrated one, or both where the ledger converts (``both``)."""
    if requested == "calibrated":
        return [protocol.relation]
    out = [protocol.relation]
    other = "add_remove" if protocol.relation == "replace_one" else "replace_one"
    try:
        _calibrated(protocol, 1, other)
    except ValueError:
        return out
    return out + [other]


def canary_index(protocol: _Protocol) -> int:
    """The party's row farthest out in the noise metric (the canary is built from it)."""
    f = protocol.party().features
    return int(np.argmax(np.linalg.norm(f if protocol.scales is None else f / protocol.scales, axis=1)))


def worst_case_canary(protocol: _Protocol) -> tuple[PartyData, tuple[np.ndarray, Any], tuple[np.ndarray, Any]]:
    """(D, r, r'): D = m - 1 copies of r plus the canary r', r the party's largest row in the noise
    metric; r' and the responses are chosen among the protocol's candidates to maximize the
    step-1 change of the release when r' is replaced by r (at the start or an adversarial state)."""
    real = protocol.party()
    m = real.size
    j = canary_index(protocol)
    y_j = None if real.response is None else real.response[j]
    publics = [protocol.start(), *protocol.adversarial_states(real.features[j])]
    best = None
    for row, canary_row in protocol.feature_pairs(real.features[j]):
        for y in protocol.response_candidates(y_j, real.response):
            for y_c in protocol.response_candidates(y_j, real.response):
                feats = np.vstack([np.repeat(row[None, :], m - 1, axis=0), canary_row[None, :]])
                resp = None if y is None else np.r_[np.full(m - 1, y), y_c]
                base = PartyData(feats, resp)
                other = base.replace(m - 1, row, y)
                gap = max(protocol.noise_metric(protocol.release(public, None, base, 1)[0]
                                                - protocol.release(public, None, other, 1)[0])
                          for public in publics)
                if best is None or gap > best[0]:
                    best = (gap, base, (row, y), (canary_row, y_c))
    return best[1], best[2], best[3]


def neighbour_pairs(protocol: _Protocol, relations: list[str], rng: np.random.Generator) -> list[NeighbourPair]:
    """The canary pairs on the worst-case D and random pairs on the party's real data."""
    base, (row, y), (canary, y_c) = worst_case_canary(protocol)
    m = base.size
    real, donors = protocol.party(), protocol.donors()
    pairs = []
    if "replace_one" in relations:
        pairs.append(NeighbourPair("canary replace-one", "replace_one", base, base.replace(m - 1, row, y)))
        j, k = int(rng.integers(real.size)), int(rng.integers(donors.size))
        pairs.append(NeighbourPair("random replace-one", "replace_one", real,
                                   real.replace(j, donors.features[k], None if donors.response is None
                                                else donors.response[k])))
    if "add_remove" in relations:
        pairs.append(NeighbourPair("canary add", "add_remove", base, base.add(canary, y_c)))
        pairs.append(NeighbourPair("canary remove", "add_remove", base, base.remove(m - 1)))
        pairs.append(NeighbourPair("random remove", "add_remove", real, real.remove(int(rng.integers(real.size)))))
    return pairs


# ------------------------------------------------------------------ the audit
@dataclass
class Transcript:
    """One run of the protocol in which ``world`` (0: D, 1: D') is released."""

    gaps: np.ndarray  # (T,) Delta_t in the noise metric
    conditional_kl: np.ndarray  # (T,) Delta_t^2 / (2 sigma_t^2)
    llr: float  # log p_D / p_D' of the released transcript


def run_transcript(protocol: _Protocol, pair: NeighbourPair, steps: int, world: int,
                   rng: np.random.Generator) -> Transcript:
    """Replay both datasets on one transcript (see the module docstring)."""
    public = protocol.start()
    hidden = [None, None]
    gaps, kl, llr = np.zeros(steps), np.zeros(steps), 0.0
    for t in range(1, steps + 1):
        qa, hidden[0] = protocol.release(public, hidden[0], pair.base, t)
        qb, hidden[1] = protocol.release(public, hidden[1], pair.other, t)
        _sens, sigma = protocol.calibration(t)
        y = protocol.add_noise(qa if world == 0 else qb, sigma, rng)
        gaps[t - 1] = protocol.noise_metric(qa - qb)
        kl[t - 1] = gaps[t - 1] ** 2 / (2.0 * sigma * sigma)
        llr += gaussian_llr(y, qa, qb, sigma, protocol.scales)
        public = protocol.advance(public, y, hidden[world], t, rng)
    return Transcript(gaps, kl, llr)


@dataclass
class PairAudit:
    label: str
    relation: str
    calibrated: np.ndarray  # (T,) calibrated sensitivity under the relation
    sigma: np.ndarray  # (T,)
    measured: np.ndarray  # (T,) max over transcripts of Delta_t
    kl_steps: np.ndarray  # (T,) mean over transcripts of Delta_t^2 / (2 sigma_t^2)
    kl: KLEstimate
    probe_ratio: float = float("nan")  # max Delta / calibrated at the adversarial public states (step 1)

    @property
    def ratio(self) -> np.ndarray:
        return self.measured / self.calibrated

    @property
    def rho_steps(self) -> np.ndarray:
        return self.calibrated**2 / (2.0 * self.sigma**2)

    @property
    def rho(self) -> float:
        return float(self.rho_steps.sum())


@dataclass
class AuditReport:
    algorithm: str
    steps: int
    delta: float
    relations: list[str]
    tolerance: float
    pairs: list[PairAudit] = field(default_factory=list)
    lr_test: LikelihoodRatioTest | None = None
    lr_relation: str = ""
    eps_accounted: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    site: SiteAudit | None = None  # the site function's noise and sensitivity (:func:`audit_site`)

    @property
    def passed(self) -> bool:
        return not self.failures


def audit_protocol(protocol: _Protocol, *, steps: int | None = None, transcripts: int = 4, lr_trials: int = 400,
                   relations: str = "calibrated", tolerance: float = 1e-6, alpha: float = 0.05,
                   seed: int = 0, site_samples: int = 100, site_alpha: float = 1e-4,
                   adversarial: bool = False) -> AuditReport:
    """Audit ``protocol`` over its first ``steps`` releases.

    Every neighbour pair is replayed on ``transcripts`` transcripts drawn under D; the canary pair
    of the calibrated relation also on ``lr_trials`` transcripts under each of D and D' for the
    likelihood-ratio test.  Checks (``failures`` names algorithm, step and bound):
    measured / calibrated sensitivity <= 1 + ``tolerance`` at every step; the Monte-Carlo KL of
    every pair (conditional estimate) <= its zCDP budget rho (1 + tolerance)^2, in total and per
    step; the lower confidence bound on eps (level 1 - ``alpha``) <= the accounted eps (PLD); and, through
    the family's real site function (:func:`audit_site`, ``site_samples`` releases per request, spread tests
    at family-wise level ``site_alpha``, crafted public values with ``adversarial``), the released change of a
    replace-one pair <= the ledger's sensitivity and the released noise's spread = the ledger's sigma.
    """
    steps = protocol.steps if steps is None else min(int(steps), protocol.steps)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if transcripts < 2 or lr_trials < 8:
        raise ValueError("need transcripts >= 2 and lr_trials >= 8")
    rels = relations_of(protocol, relations)
    root = np.random.SeedSequence(seed)
    pair_seed, *trial_seeds = root.spawn(1 + 2 * lr_trials + 64)
    report = AuditReport(protocol.name, steps, protocol.delta, rels, tolerance)
    pairs = neighbour_pairs(protocol, rels, np.random.default_rng(pair_seed))
    cal = {r: np.array([_calibrated(protocol, t, r) for t in range(1, steps + 1)]) for r in rels}
    for r in rels:
        events = [GaussianRelease(0, t, float(s), float(g)) for t, (s, g) in enumerate(cal[r], start=1)]
        report.eps_accounted[r] = pld_epsilon(events, protocol.delta)
    probes = protocol.adversarial_states(protocol.party().features[canary_index(protocol)])
    lr_pair = next(p for p in pairs if p.label == ("canary replace-one" if protocol.relation == "replace_one"
                                                   else "canary add"))
    lr_runs: dict[int, list[Transcript]] = {0: [], 1: []}
    seeds = iter(trial_seeds)
    for pair in pairs:
        if pair is lr_pair:
            runs = [run_transcript(protocol, pair, steps, w, np.random.default_rng(next(seeds)))
                    for w in (0, 1) for _ in range(lr_trials)]
            lr_runs[0], lr_runs[1] = runs[:lr_trials], runs[lr_trials:]
            under_d = lr_runs[0]
        else:
            under_d = [run_transcript(protocol, pair, steps, 0, np.random.default_rng(s))
                       for s in np.random.SeedSequence(seed, spawn_key=(len(report.pairs) + 1,)).spawn(transcripts)]
        gaps = np.array([t.gaps for t in under_d])
        kls = np.array([t.conditional_kl for t in under_d])
        audit = PairAudit(pair.label, pair.relation, cal[pair.relation][:, 0], cal[pair.relation][:, 1],
                          gaps.max(axis=0), kls.mean(axis=0),
                          kl_estimate(kls.sum(axis=1), np.array([t.llr for t in under_d])))
        if probes:
            audit.probe_ratio = max(protocol.noise_metric(protocol.release(s, None, pair.base, 1)[0]
                                                          - protocol.release(s, None, pair.other, 1)[0])
                                    for s in probes) / cal[pair.relation][0, 0]
        report.pairs.append(audit)
        _check_pair(report, audit, tolerance)
    report.lr_relation = lr_pair.relation
    report.site = audit_site(protocol, steps=steps, samples=site_samples, alpha=site_alpha, tolerance=tolerance,
                             seed=seed, adversarial=adversarial)
    if report.site is not None:
        report.failures += report.site.failures
    report.lr_test = epsilon_lower_bound(np.array([t.llr for t in lr_runs[0]]),
                                         np.array([t.llr for t in lr_runs[1]]), delta=protocol.delta, alpha=alpha)
    accounted = report.eps_accounted[lr_pair.relation]
    if report.lr_test.eps_lower > accounted:
        report.failures.append(
            f"{protocol.name}: steps 1-{steps}: empirical eps lower bound {report.lr_test.eps_lower:.4g} "
            f"(likelihood-ratio test on the {lr_pair.label} canary, {1 - alpha:.0%} confidence) exceeds the "
            f"accounted eps {accounted:.4g} ({lr_pair.relation}, delta = {protocol.delta:g})")
    return report


def _check_pair(report: AuditReport, audit: PairAudit, tolerance: float) -> None:
    name = report.algorithm
    over = np.flatnonzero(audit.ratio > 1.0 + tolerance)
    if over.size:
        t = int(over[np.argmax(audit.ratio[over])])
        report.failures.append(
            f"{name}: step {t + 1}: measured sensitivity {audit.measured[t]:.6g} is {audit.ratio[t]:.4g} x the "
            f"calibrated {audit.calibrated[t]:.6g} ({audit.label}, {audit.relation}; bound 1 + {tolerance:g}); "
            f"{over.size} of {len(audit.ratio)} steps exceed it")
    if audit.probe_ratio > 1.0 + tolerance:
        report.failures.append(
            f"{name}: step 1 at an adversarial public state: measured sensitivity is {audit.probe_ratio:.4g} x the "
            f"calibrated {audit.calibrated[0]:.6g} ({audit.label}, {audit.relation}; bound 1 + {tolerance:g})")
    budget = (1.0 + tolerance) ** 2
    over = np.flatnonzero(audit.kl_steps > audit.rho_steps * budget)
    if over.size:
        t = int(over[np.argmax(audit.kl_steps[over] / audit.rho_steps[over])])
        report.failures.append(
            f"{name}: step {t + 1}: Monte-Carlo KL {audit.kl_steps[t]:.4g} exceeds the step's zCDP budget "
            f"rho = {audit.rho_steps[t]:.4g} ({audit.label}, {audit.relation})")
    if audit.kl.conditional > audit.rho * budget:
        report.failures.append(
            f"{name}: steps 1-{len(audit.ratio)}: Monte-Carlo KL of the transcripts {audit.kl.conditional:.4g} "
            f"(sampled {audit.kl.sampled:.4g} +- {audit.kl.sampled_se:.2g}) exceeds the zCDP budget "
            f"rho = {audit.rho:.4g} ({audit.label}, {audit.relation}), {audit.kl.conditional / audit.rho:.3g} x")


# ------------------------------------------------------------------ the site function: the noise actually drawn
#: The largest value a float spacing absorbs noise at: near 1.5 * 2^59 consecutive floats are 2^7 = 128 apart.
ABSORBING = 1.5 * 2.0**59


def crafted_values(dim: int) -> list[tuple[str, np.ndarray]]:
    """Public values a hostile server could send in place of one of a request's values: beyond the site's
    magnitude bound, chosen to absorb the noise in floating point, subnormal, non-finite, of the wrong shape."""
    from fdp_flower.algorithms.protocol import MAX_PUBLIC_MAGNITUDE

    sign = (-1.0) ** np.arange(dim)
    one = np.zeros(dim)
    one[0] = ABSORBING
    return [("1e300", np.full(dim, 1e300)), ("+-1e300", 1e300 * sign),
            ("2 x the magnitude bound", np.full(dim, 2 * MAX_PUBLIC_MAGNITUDE)),
            ("the magnitude bound", np.full(dim, MAX_PUBLIC_MAGNITUDE) * sign),
            ("1.5 * 2^59 (absorbs noise below float spacing 128)", np.full(dim, ABSORBING)),
            ("1.5 * 2^59 in one coordinate", one),
            ("the smallest subnormal 5e-324", np.full(dim, 5e-324)), ("subnormals +-1e-310", 1e-310 * sign),
            ("NaN", np.full(dim, np.nan)), ("inf", np.full(dim, np.inf)), ("zero", np.zeros(dim)),
            ("wrong shape", np.zeros(dim + 1))]


@dataclass
class SiteDraws:
    """Answers of the site function to one request, each with fresh noise: the released values, the ledger
    events each draw was charged (what the site's noise source records before drawing), the event each
    release reports, and the refusals."""

    values: list[np.ndarray] = field(default_factory=list)
    charged: list[list[GaussianRelease]] = field(default_factory=list)
    reported: list[GaussianRelease | None] = field(default_factory=list)
    refused: list[Exception] = field(default_factory=list)
    charged_refusals: int = 0  # refusals after the noise source was called (a charge without a release)


def site_draws(protocol: _Protocol, public, data: PartyData, step: int, rngs, crafted: dict | None = None
               ) -> SiteDraws | None:
    """One answer of the real site function per generator of ``rngs`` (None: no site function)."""
    out = SiteDraws()
    for rng in rngs:
        charged: list[GaussianRelease] = []

        def noise(events, rng=rng, charged=charged):
            charged.extend(events)  # the site's charge: what its ledger records for this draw
            return rng

        answer = protocol.site_answer(public, data, step, noise, crafted)
        if answer is None:
            return None
        if isinstance(answer, Exception):
            out.refused.append(answer)
            out.charged_refusals += bool(charged)
            continue
        out.values.append(np.asarray(answer.value, dtype=float))
        out.charged.append(charged)
        out.reported.append(answer.event)
    return out


@dataclass
class SpreadAudit:
    """The site's releases of one request against the sigma its ledger records."""

    where: str
    outcome: str  # "released" | "refused" | "mixed"
    sigma: float = float("nan")  # the ledger's (charged) sigma
    test: object = None  # fdp_flower.privacy.audit.SpreadTest when released
    reason: str = ""  # a refusal's one line


@dataclass
class SiteAudit:
    """What the audit measured through the family's real site function (:func:`audit_site`)."""

    algorithm: str
    samples: int
    alpha: float  # family-wise level of the spread tests (Bonferroni over ``spreads``)
    tolerance: float
    sensitivity: list[tuple[str, float]] = field(default_factory=list)  # (where, measured / ledger sensitivity)
    spreads: list[SpreadAudit] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _spread_targets(protocol: _Protocol, steps: int, adversarial: bool):
    """(where, public, step, crafted values, whether a refusal is acceptable) of every spread test."""
    start = protocol.start()
    row = protocol.party().features[canary_index(protocol)]
    targets = [(f"step {t} at the start state", start, t, None, False) for t in range(1, steps + 1)]
    targets += [(f"step 1 at adversarial state {j + 1}", s, 1, None, True)
                for j, s in enumerate(protocol.adversarial_states(row))]
    if adversarial:
        dim = protocol.party().features.shape[1]
        targets += [(f"step 1, {name} = {label}", start, 1, {name: value}, True)
                    for name in protocol.public_names for label, value in crafted_values(dim)]
    return targets


def audit_site(protocol: _Protocol, *, steps: int | None = None, samples: int = 100, alpha: float = 1e-4,
               tolerance: float = 1e-6, seed: int = 0, adversarial: bool = False) -> SiteAudit | None:
    """Audit the family's real site function (``answer``) as a site runs it: the noise it draws and the
    sensitivity of what it releases, against what its ledger records (the events handed to its noise
    source, which a deployed site charges before drawing).  None when the protocol has no site function.

    - **sensitivity**: every replace-one neighbour pair (the worst-case canary, a random pair) is answered
      under D and D' with the *same* generator at the start state and at the adversarial states, so the noise
      cancels and the difference of the two releases is the difference of their noise-free data terms; it
      must be at most the ledger's replace-one sensitivity (1 + ``tolerance``).  A site whose data term is
      larger than its calibration (a doubled clip, an under-stated sensitivity) fails here;
    - **spread**: ``samples`` answers of one request, each with fresh noise, at every step's start state and
      at the adversarial states: their spread about their mean must be the ledger's sigma
      (:func:`fdp_flower.privacy.audit.noise_spread_test`, two-sided, Bonferroni-corrected to the family-wise
      level ``alpha``).  A site drawing sigma / 2 while charging sigma fails here;
    - ``adversarial``: also every public value of the request replaced by each of :func:`crafted_values`: the
      site must refuse it with nothing charged, or release with the ledger's spread.

    Every release must be charged exactly one event, the one it reports.
    """
    from fdp_flower.privacy.audit import noise_spread_test

    steps = protocol.steps if steps is None else min(int(steps), protocol.steps)
    if samples < 2:
        raise ValueError(f"samples must be >= 2, got {samples}")
    party = protocol.party()
    if site_draws(protocol, protocol.start(), party, 1, [np.random.default_rng(0)]) is None:
        return None
    report = SiteAudit(protocol.name, samples, alpha, tolerance)
    name = protocol.name
    # sensitivity through the site function, common random numbers
    row = party.features[canary_index(protocol)]
    publics = [("the start state", protocol.start())] + [
        (f"adversarial state {j + 1}", s) for j, s in enumerate(protocol.adversarial_states(row))]
    pair_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7001,)))
    for pair in neighbour_pairs(protocol, ["replace_one"], pair_rng):
        worst = (0.0, "")
        for k, (where, public) in enumerate(publics):
            drawn = [site_draws(protocol, public, data, 1, [np.random.default_rng([seed, 7002, k])])
                     for data in (pair.base, pair.other)]
            if any(d.refused for d in drawn):
                if k == 0:
                    report.failures.append(f"{name}: the site refused the {pair.label} pair at the start state: "
                                           f"{(drawn[0].refused or drawn[1].refused)[0]}")
                continue
            events = drawn[0].charged[0] + drawn[1].charged[0]
            ledger = max(e.under("replace_one").sensitivity for e in events)
            ratio = protocol.noise_metric(drawn[0].values[0] - drawn[1].values[0]) / ledger
            if ratio >= worst[0]:
                worst = (ratio, where)
        report.sensitivity.append((f"{pair.label} ({worst[1]})", worst[0]))
        if worst[0] > 1.0 + tolerance:
            report.failures.append(
                f"{name}: step 1 at {worst[1]}: the site's release moves by {worst[0]:.4g} x the replace-one "
                f"sensitivity its ledger records ({pair.label}; bound 1 + {tolerance:g})")
    # spread of the noise drawn, against the sigma charged
    targets = _spread_targets(protocol, steps, adversarial)
    level = alpha / len(targets)
    for k, (where, public, step, crafted, may_refuse) in enumerate(targets):
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed, spawn_key=(7003, k)).spawn(samples)]
        drawn = site_draws(protocol, public, party, step, rngs, crafted)
        if drawn.charged_refusals:
            report.failures.append(f"{name}: {where}: {drawn.charged_refusals} refusals after the site charged "
                                   "its ledger (a refusal must charge nothing)")
        if drawn.refused:
            outcome = "refused" if not drawn.values else "mixed"
            reason = " ".join(str(drawn.refused[0]).split())
            report.spreads.append(SpreadAudit(where, outcome, reason=reason))
            if outcome == "mixed" or not may_refuse:
                report.failures.append(f"{name}: {where}: {len(drawn.refused)} of {samples} requests refused "
                                       f"({reason})")
            continue
        if any(len(c) != 1 for c in drawn.charged):
            report.failures.append(f"{name}: {where}: a release was charged {sorted({len(c) for c in drawn.charged})} "
                                   "ledger events (one per release)")
            continue
        sigmas = {c[0].sigma for c in drawn.charged}
        if len(sigmas) != 1 or any(r is None or r.sigma != c[0].sigma or r.sensitivity != c[0].sensitivity
                                   for r, c in zip(drawn.reported, drawn.charged)):
            report.failures.append(f"{name}: {where}: the releases report other events than the site charged")
            continue
        sigma = sigmas.pop()
        values = np.stack(drawn.values)
        if not np.all(np.isfinite(values)):
            report.failures.append(f"{name}: {where}: the site released non-finite values")
            continue
        test = noise_spread_test(values, sigma, protocol.scales, alpha=level)
        report.spreads.append(SpreadAudit(where, "released", sigma, test))
        if not test.passed:
            report.failures.append(
                f"{name}: {where}: the released noise's variance is {test.ratio:.4g} x the ledger's sigma^2 = "
                f"{sigma:.4g}^2 ({samples} releases, chi-square acceptance [{test.low:.3f}, {test.high:.3f}] "
                f"at level {level:.2g})")
    return report


def format_site_report(report: SiteAudit) -> str:
    """The site-function tables of :func:`audit_site` (Markdown)."""
    lines = ["", f"#### The site function ({report.samples} releases per request; spread tests at family-wise "
                 f"level {report.alpha:g})", "",
             "| replace-one pair (worst state) | released change / ledger sensitivity |", "|---|---|"]
    lines += [f"| {where} | {ratio:.6f} |" for where, ratio in report.sensitivity]
    lines += ["", "| request | outcome | ledger sigma | variance / sigma^2 | acceptance |", "|---|---|---|---|---|"]
    for s in report.spreads:
        if s.outcome == "released":
            lines.append(f"| {s.where} | released | {s.sigma:.4g} | {s.test.ratio:.4f} | "
                         f"[{s.test.low:.3f}, {s.test.high:.3f}] |")
        else:
            lines.append(f"| {s.where} | {s.outcome}: {s.reason[:80]} | | | |")
    return "\n".join(lines)


#: The loss kinds a hostile server may name in its scenario instead of the run's (the shared loss section's).
LOSS_KINDS = ("quantile", "absolute", "logistic", "squared")


@dataclass
class SwitchedLoss:
    """The site function under a scenario whose loss the server switched (:func:`switched_loss_audits`)."""

    loss: str
    outcome: str  # "refused" (nothing released) | "released" (then ``site`` must pass)
    reason: str = ""
    site: SiteAudit | None = None


def switched_loss_audits(scenario, *, party: int = 0, steps: int = 1, samples: int = 100, alpha: float = 1e-4,
                         tolerance: float = 1e-6, seed: int = 0) -> list[SwitchedLoss]:
    """A hostile server's scenario with another loss (each of :data:`LOSS_KINDS` but the run's), applied to the
    party's same rows with no schema validation (a server may send any run config): the site must refuse it --
    its data checks (the logistic loss's labels in {-1, +1}, finite responses) or its setup raise before anything
    is released -- or release under it with the sensitivity and spread its ledger records (:func:`audit_site`)."""
    current = scenario.model.loss.kind
    out = []
    for kind in LOSS_KINDS:
        if kind == current:
            continue
        model = scenario.model.model_copy(update={"loss": scenario.model.loss.model_copy(update={"kind": kind})})
        switched = scenario.model_copy(update={"model": model})
        try:
            protocol = protocol_for(switched, party=party)
            first = site_draws(protocol, protocol.start(), protocol.party(), 1, [np.random.default_rng(seed)])
        except (ValueError, TypeError, ArithmeticError) as exc:  # refused before any release
            out.append(SwitchedLoss(kind, "refused", " ".join(str(exc).split())))
            continue
        if first is None:
            continue
        if first.refused:
            out.append(SwitchedLoss(kind, "refused", " ".join(str(first.refused[0]).split())))
            continue
        site = audit_site(protocol, steps=steps, samples=samples, alpha=alpha, tolerance=tolerance, seed=seed)
        site.failures = [f"loss switched to {kind}: {f}" for f in site.failures]
        out.append(SwitchedLoss(kind, "released", site=site))
    return out


def format_switched(results: list[SwitchedLoss]) -> str:
    """The switched-loss table (Markdown)."""
    lines = ["", "#### Losses switched by the server", "",
             "| loss | outcome | released change / ledger sensitivity | noise variance / sigma^2 |",
             "|---|---|---|---|"]
    for r in results:
        if r.site is None:
            lines.append(f"| {r.loss} | refused: {r.reason[:100]} | | |")
            continue
        sens = max((v for _w, v in r.site.sensitivity), default=float("nan"))
        spread = [p.test.ratio for p in r.site.spreads if p.test is not None]
        verdict = "released" if r.site.passed else "FAIL"
        lines.append(f"| {r.loss} | {verdict} | {sens:.4f} | {min(spread):.3f}-{max(spread):.3f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ text output
def format_report(report: AuditReport, *, per_step: bool = True) -> str:
    """The per-step and per-pair tables of a report (Markdown)."""
    lines = [f"### {report.algorithm}: {'PASS' if report.passed else 'FAIL'}", "",
             f"{report.steps} steps audited, relations {', '.join(report.relations)}, delta = {report.delta:g}, "
             f"tolerance {report.tolerance:g}.", "",
             "| neighbours | relation | max measured / calibrated sensitivity (step) | at adversarial state "
             "| MC KL (sampled +- se) | zCDP budget rho |", "|---|---|---|---|---|---|"]
    for p in report.pairs:
        t = int(np.argmax(p.ratio))
        probe = "n/a" if np.isnan(p.probe_ratio) else f"{p.probe_ratio:.6f}"
        lines.append(f"| {p.label} | {p.relation} | {p.ratio[t]:.6f} ({t + 1}) | {probe} | {p.kl.conditional:.4g} "
                     f"({p.kl.sampled:.4g} +- {p.kl.sampled_se:.2g}) | {p.rho:.4g} |")
    if report.lr_test is not None:
        lr = report.lr_test
        lines += ["", f"Likelihood-ratio test ({report.lr_relation} canary, {lr.trials} held-out trials per "
                      f"hypothesis, {lr.direction}): FPR {lr.fpr:.3f} (upper {lr.fpr_upper:.3f}), FNR {lr.fnr:.3f} "
                      f"(upper {lr.fnr_upper:.3f}); eps lower bound {lr.eps_lower:.4g} "
                      f"({1 - lr.alpha:.0%} confidence) vs accounted eps "
                      f"{report.eps_accounted[report.lr_relation]:.4g} (PLD)."]
    if per_step:
        lines += ["", "| step | " + " | ".join(f"{p.label} ratio" for p in report.pairs)
                  + " | canary KL / rho |", "|---|" + "---|" * (len(report.pairs) + 1)]
        canary = report.pairs[0]
        for t in range(report.steps):
            lines.append(f"| {t + 1} | " + " | ".join(f"{p.ratio[t]:.4f}" for p in report.pairs)
                         + f" | {canary.kl_steps[t]:.4g} / {canary.rho_steps[t]:.4g} |")
    if report.site is not None:
        lines.append(format_site_report(report.site))
    if report.failures:
        lines += [""] + [f"- FAIL: {f}" for f in report.failures]
    return "\n".join(lines)


def summary_row(report: AuditReport) -> str:
    """One Markdown row: algorithm, sensitivity ratio, KL vs rho, eps bound vs accounted, verdict."""
    ratio = max(float(np.nanmax(np.r_[p.ratio, p.probe_ratio])) for p in report.pairs)
    kl = max(report.pairs, key=lambda p: p.kl.conditional / p.rho)
    lr = report.lr_test
    acc = report.eps_accounted[report.lr_relation]
    site = "n/a"
    if report.site is not None:
        sens = max((r for _w, r in report.site.sensitivity), default=float("nan"))
        spread = [p.test.ratio for p in report.site.spreads if p.test is not None]
        refused = sum(p.outcome == "refused" for p in report.site.spreads)
        site = (f"{sens:.4f}; {min(spread):.3f}-{max(spread):.3f} ({len(spread)} released"
                + (f", {refused} refused" if refused else "") + ")")
    return (f"| {report.algorithm} | {', '.join(report.relations)} | {report.steps} | {ratio:.4f} | "
            f"{kl.kl.conditional:.4g} / {kl.rho:.4g} ({kl.label}) | {lr.eps_lower:.3g} / {acc:.3g} | {site} | "
            f"{'pass' if report.passed else 'FAIL'} |")


SUMMARY_HEADER = ("| algorithm | relations | steps | max measured / calibrated sensitivity | MC KL / zCDP rho "
                  "(worst pair) | eps lower bound / accounted eps | site function: released change / ledger "
                  "sensitivity; noise variance / ledger sigma^2 (requests) | verdict |\n"
                  "|---|---|---|---|---|---|---|---|")



# ---------------------------------------------------------------------------------------------- secure sums
@dataclass
class SecureSumAudit:
    """:func:`audit_secure_sums`'s verdict: the noise check of the honest released sums (must pass) and of the
    same sums with one site's Skellam share left out (must fail: the check has the power to see it)."""

    sites: int
    dim: int
    trials: int
    honest: Any  # NoiseSpreadCheck
    mutant: Any  # NoiseSpreadCheck
    share_variance: float

    @property
    def passed(self) -> bool:
        return bool(self.honest.passed and not self.mutant.passed)


def secure_sum_trials(sites: int, dim: int, alpha: float) -> int:
    """Trials for :func:`audit_secure_sums` so that the check detects, with probability >= 1 - ``alpha``, a
    variance shortfall of 1 / (2 M), half of one missing share's (docs/secure_aggregation.md, eq. (9.11)):
    N = 2 ((z_{alpha/4} + z_alpha) 2 M)^2 coordinates (the detectable deficit (z_{alpha/4} + z_alpha) sqrt(2 / N)
    of :func:`fdp_flower.privacy.distributed.sum_noise_check`), at least 200 trials."""
    from scipy import stats

    z = float(stats.norm.isf(alpha / 4.0) + stats.norm.isf(alpha))
    return max(200, math.ceil(2.0 * (z * 2.0 * sites) ** 2 / dim))


def audit_secure_sums(scenario, *, trials: int | None = None, alpha: float = 1e-4, seed: int = 0) -> SecureSumAudit:
    """The empirical audit of a ``privacy.trust: secure_aggregation`` run (docs/secure_aggregation.md,
    eqs. (9.10)-(9.12); docs/privacy.md, section 8): ``trials`` rounds in which every site answers the request
    of the start state (w^0 = 0) through the real site function (:func:`fdp_flower.algorithms.fdp_admm.site.answer`:
    its rounded, scaled term plus its Skellam share), each round with fresh noise from the audit's ``seed``.
    The residuals r = sum_i v_i - gamma sum_i x_i (the audit knows the data) must pass
    :func:`~fdp_flower.privacy.distributed.sum_noise_check` against the planned M V / (M - t) plus the
    rounding; the same sums with site 0's share replaced by its rounded term alone (a site that skips its
    noise) must fail it.  ``trials`` default: :func:`secure_sum_trials`."""
    from fdp_flower.algorithms.fdp_admm.plan import site_plan
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
    from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, mean_loss_terms
    from fdp_flower.algorithms.protocol import SiteRequest
    from fdp_flower.privacy.distributed import randomized_round, sum_noise_check

    if not (scenario.privacy.enabled and scenario.privacy.trust == "secure_aggregation"):
        raise ValueError("audit_secure_sums needs privacy.enabled and privacy.trust 'secure_aggregation'")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha:g}")
    sizes, basis, features, responses, clipped, _ = simulation_setup(scenario, with_reference=False)
    data = SiteData.stack(range(len(sizes)), features, responses, clipped)
    plan = site_plan(scenario, basis, sizes)
    secure, sites = plan.secure, len(sizes)
    trials = secure_sum_trials(sites, plan.dim, alpha) if trials is None else int(trials)
    if trials < 2:
        raise ValueError(f"trials must be >= 2, got {trials}")
    point = np.zeros(plan.dim)
    scaled = secure.scale * plan.whiten(-mean_loss_terms(plan.loss, data, np.zeros((sites, plan.dim))))
    honest, mutant = np.empty((trials, plan.dim)), np.empty((trials, plan.dim))
    for t in range(trials):
        rngs = [np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(i, t))) for i in range(sites)]
        releases = answer([SiteRequest(i, 1, {"point": point}) for i in range(sites)], data, plan,
                          lambda events: rngs[events[0].client])
        refused = next((r for r in releases if isinstance(r, Exception)), None)
        if refused is not None:
            raise refused
        shares = np.stack([r.value for r in releases])
        honest[t] = shares.sum(axis=0) - scaled.sum(axis=0)
        rounded = randomized_round(scaled[0], np.random.default_rng(np.random.SeedSequence(int(seed),
                                                                                           spawn_key=(sites, t))))
        mutant[t] = honest[t] - shares[0] + rounded  # site 0 sends its rounded term without its Skellam share
    fractions = scaled - np.floor(scaled)  # (M, K): every trial rounds the same terms
    variance = sites * secure.share_variance
    return SecureSumAudit(sites, plan.dim, trials,
                          sum_noise_check(honest, skellam_variance=variance, rounding_fractions=fractions[None],
                                          alpha=alpha),
                          sum_noise_check(mutant, skellam_variance=variance, rounding_fractions=fractions[None],
                                          alpha=alpha),
                          float(secure.share_variance))


def format_secure_sum_audit(report: SecureSumAudit) -> str:
    """The secure-sum audit's lines (one per check)."""
    def line(name: str, check) -> str:
        return (f"  {name}: variance ratio {check.variance_ratio:.4f} (se {check.variance_ratio_se:.4f}, "
                f"z {check.variance_z:+.2f}), mean z {check.mean_z:+.2f}, critical |z| {check.critical_z:.2f}: "
                f"{'pass' if check.passed else 'FAIL'}")

    return "\n".join([
        f"secure-sum audit (privacy.trust secure_aggregation): M = {report.sites} shares of "
        f"Sk({report.share_variance:.4g}) a coordinate, K = {report.dim}, {report.trials} sums at the start state (detectable variance shortfall "
        f"{report.honest.detectable_deficit:.3f}; one missing share: {1 / report.sites:.3f})",
        line("released sums (must pass)", report.honest),
        line("site 0 without its share (must fail)", report.mutant)])
