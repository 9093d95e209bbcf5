"""FDP-ADMM's site function: the only code that reads a site's curves and draws its noise
(docs/algorithms.md, eqs. (1.1)-(1.3); the protocol: :mod:`fdp_flower.algorithms.protocol`).

A site holds its curves.  Once per run it turns them into clipped feature rows
(:func:`site_features`: basis scores, clipped to the sphere ||a|| <= c1 or the ellipsoid
||a / s|| <= 1, with the public intercept column if the model has one).  Each round the server
names a point, the client's last released primal wt_i^{l-1}, and the site releases its **descent
term**, the negated clipped mean subgradient of its loss at that point plus Gaussian noise,

    d~_i^l = -(1/m_i) sum_j grad l(wt_i^{l-1}; a_ij, y_ij) + N(0, sigma_l^2 S^2),          (1.3)

with sensitivity Delta_i = 2 G / m_i (in the metric of the noise shape S: Mahalanobis for the
ellipsoid clip) and sigma_l = z_l Delta_i, z_l the public noise multiplier of round l.  Nothing
else the server sends enters the release: the penalty, the duals, the consensus w, rho and the
step are the server's post-processing (:func:`fdp_flower.algorithms.fdp_admm.update.server_primal_step`),
so no value the server picks can scale the noise, shift it or absorb it in floating point.
This is the same mechanism as the paper's noisy primal (which is an affine function of d~_i with
the public factor 1 / (rho + 1/eta)); its noise in primal units is sigma_l / (rho + 1/eta).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from fdp_flower.algorithms.protocol import NoiseSource, SiteRelease, SiteRequest, check_public, requested_client
from fdp_flower.core.clipping import clip_rows, clip_rows_ellipsoid, intercept_design
from fdp_flower.core.losses import QuantileLoss
from fdp_flower.privacy.distributed import SecureSumPlan, SkellamSumRelease, site_share
from fdp_flower.privacy.ledger import TRUSTED_AGGREGATOR_MECHANISM, GaussianRelease

#: The ledger mechanism of FDP-ADMM's release: the noisy descent term (1.3), 2G/m_i.
MECHANISM = "fdp_admm_subgradient"


def site_features(scenario, basis, data) -> tuple[np.ndarray, int]:
    """Scores of the site's curves, rows clipped to the sphere ||a|| <= c1 or to the ellipsoid
    ||a / s|| <= 1 of :func:`fdp_flower.algorithms.fdp_admm.plan.noise_scales`; with ``model.intercept``
    the rows are (c0, scores) of :func:`fdp_flower.core.clipping.intercept_design`, inside the same set
    (returns features, rows clipped).

    The responses are checked against the run's loss first (``loss.check_response``: finite; the
    logistic loss's labels in {-1, +1}, which its gradient bound G = c1 assumes): a site never
    releases for a loss whose bound its data break, whatever loss the server asks for."""
    from fdp_flower.algorithms.fdp_admm.plan import build_objective, score_scales

    build_objective(scenario).loss.check_response(data.response)
    m = scenario.model
    scales = score_scales(scenario, basis)
    scores = basis.scores(data.curves)
    if m.intercept:
        return intercept_design(scores, m.clip_c1, m.intercept_share, scales)
    if scales is None:
        return clip_rows(scores, m.clip_c1)
    return clip_rows_ellipsoid(scores, scales)


@dataclass(frozen=True)
class SiteData:
    """The clipped rows and responses of one or more clients a site (or a simulation) holds, stacked:
    ``features`` (M, m_max, K), ``response`` (M, m_max), ``mask`` (M, m_max) or None when the clients
    have equal sizes; ``clients`` their ids; ``clipped_rows`` the rows each had clipped."""

    clients: tuple[int, ...]
    features: np.ndarray
    response: np.ndarray
    mask: np.ndarray | None
    clipped_rows: tuple[int, ...] = ()

    @classmethod
    def stack(cls, clients: Sequence[int], features: Sequence[np.ndarray], responses: Sequence[np.ndarray],
              clipped: Sequence[int] = ()) -> SiteData:
        """Stack per-client rows (zero-padded, with a mask when their sizes differ)."""
        f, y, mask = stack_clients(list(features), list(responses))
        return cls(tuple(int(c) for c in clients), f, y, mask, tuple(int(c) for c in clipped))

    @property
    def counts(self) -> np.ndarray:
        """m_i of every client (M,)."""
        if self.mask is None:
            return np.full(self.features.shape[0], float(self.features.shape[1]))
        return self.mask.sum(axis=-1)

    @cached_property
    def features_t(self) -> np.ndarray:
        """(M, K, m_max), contiguous: the batched projections' right operand."""
        return np.ascontiguousarray(self.features.transpose(0, 2, 1))

    @cached_property
    def feature_means(self) -> np.ndarray:
        """(M, K): each client's mean row (padding excluded)."""
        if self.mask is None:
            return self.features.mean(axis=1)
        return (self.features * self.mask[..., None]).sum(axis=1) / self.counts[:, None]

    def rows_of(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``index``'s own (unpadded) rows and responses."""
        m = int(self.counts[index])
        return self.features[index, :m], self.response[index, :m]

    def subset(self, indices: Sequence[int]) -> SiteData:
        """The clients at ``indices``, re-stacked (a mask only if their sizes differ)."""
        rows = [self.rows_of(i) for i in indices]
        clipped = [self.clipped_rows[i] for i in indices] if self.clipped_rows else []
        return SiteData.stack([self.clients[i] for i in indices], [f for f, _ in rows], [y for _, y in rows], clipped)

    def with_response(self, response: np.ndarray) -> SiteData:
        """The same rows with other responses (the paper design's responses at another tau)."""
        return replace(self, response=response)


def stack_clients(features: list[np.ndarray], responses: list[np.ndarray]):
    """(M, m_max, K) features, (M, m_max) responses and a mask (None when sizes are equal)."""
    sizes = [len(y) for y in responses]
    if len(set(sizes)) == 1:
        return np.stack(features), np.stack(responses), None
    m_max, dim = max(sizes), features[0].shape[1]
    f = np.zeros((len(sizes), m_max, dim))
    y = np.zeros((len(sizes), m_max))
    mask = np.zeros((len(sizes), m_max))
    for i, (a, r) in enumerate(zip(features, responses)):
        f[i, : len(r)], y[i, : len(r)], mask[i, : len(r)] = a, r, 1.0
    return f, y, mask


_ONE = np.ones(1)


def mean_loss_terms(loss, data: SiteData, points: np.ndarray, *, values: bool = False) -> np.ndarray:
    """The clipped mean subgradient (1/m_i) sum_j grad l(w_i; a_ij, y_ij) of every client at its point
    (eq. (1.3) without noise), or with ``values`` the mean loss (1/m_i) sum_j l(w_i; a_ij, y_ij).

    ``points`` (M, K) (one configuration: the loss's own vectorised formula) or (C, M, K) (C
    configurations, the batched engine: two batched matrix products instead of a (C, M, m, K)
    temporary).  Quantile fast path for C configurations: (1/m) sum_j a_j (1{y_j - a_j.w <= 0} - tau)
    = (1/m) sum_j a_j 1{a_j.w >= y_j} - tau abar (exact in floating point: y - p <= 0 iff p >= y).
    Returns (M, K) / (C, M, K) (mean loss: (M,) / (C, M)).
    """
    points = np.asarray(points, dtype=float)
    if points.ndim == 2:
        if values:
            return loss.mean(points, data.features, data.response, data.mask)
        return loss.mean_subgradient(points, data.features, data.response, data.mask)
    if isinstance(loss, QuantileLoss) and not values:
        # one client at a time: the (C, m) temporaries stay in cache (2x faster than (M, C, m))
        n_cfg, num_clients, dim = points.shape
        m_max = data.features.shape[1]
        proj = np.empty((n_cfg, m_max))
        above = np.empty((n_cfg, m_max), dtype=bool)
        hit = np.empty((n_cfg, m_max))
        sums = np.empty((num_clients, n_cfg, dim))
        for i in range(num_clients):
            np.matmul(points[:, i, :], data.features_t[i], out=proj)
            np.greater_equal(proj, data.response[i], out=above)
            hit[...] = above
            if data.mask is not None:
                hit *= data.mask[i]
            np.matmul(hit, data.features[i], out=sums[i])
        return (sums / data.counts[:, None, None] - loss.tau * data.feature_means[:, None, :]).transpose(1, 0, 2)
    proj = np.matmul(points.transpose(1, 0, 2), data.features_t)  # (M, C, m)
    feats, resp = proj[..., None], data.response[:, None, :]
    if values:
        v = loss.per_sample(_ONE, feats, resp)
        if data.mask is not None:
            return ((v * data.mask[:, None, :]).sum(-1) / data.mask.sum(-1)[:, None]).T
        return v.mean(-1).T
    d = loss.per_sample_derivative(_ONE, feats, resp)  # (M, C, m)
    if data.mask is not None:
        d = d * data.mask[:, None, :]
        counts = data.mask.sum(-1)[:, None, None]
    else:
        counts = d.shape[-1]
    return (np.matmul(d, data.features) / counts).transpose(1, 0, 2)


@dataclass(frozen=True)
class SitePlan:
    """What a site needs to calibrate its releases, all public: the loss it evaluates, the
    per-sample gradient bound G of that loss on its clipped rows (in the noise metric), the noise
    shape S (None: isotropic), the noise multiplier z_l of every round (None: privacy off) and the
    dimension K."""

    loss: object
    gradient_bound: float
    scales: np.ndarray | None
    noise_multipliers: np.ndarray | None
    dim: int
    #: ``privacy.trust``: "site" (the site noises its term, eq. (1.3)), "secure_aggregation" (an integer
    #: share of a secure sum, eqs. (1.3s)) or "trusted_aggregator" (the noise-free term, eq. (1.3t))
    trust: str = "site"
    #: the run's secure-sum plan (secure_aggregation only): scale gamma, Skellam share, accounting
    secure: SecureSumPlan | None = None
    #: min_i m_i (public): the aggregated modes' sensitivity 2 G / min_i m_i
    min_records: int | None = None
    #: ``algorithm.rule: newton``: the public schedule of release kinds and multipliers (the term rounds'
    #: multipliers are also ``noise_multipliers``); None for the ADMM rule
    schedule: object | None = None
    #: c1 with ||a_j|| <= c1 for every clipped row (the sphere clip; None for the ellipsoid): the sensitivity
    #: sqrt(2) c1^2 / m_i of the Newton rule's second-moments release on a fixed basis
    row_bound: float | None = None

    @property
    def private(self) -> bool:
        return self.noise_multipliers is not None

    def trusted_release(self, client: int, round_: int, m: float) -> GaussianRelease:
        """The ledger event of a term sent to a trusted aggregator (eq. (1.3t)): the server adds
        N(0, (z_l 2 G / min_i m_i)^2 S^2) once to the SUM of the whitened terms, whose sensitivity to one
        record of client ``client`` is 2 G / m_i."""
        sensitivity = 2.0 * self.gradient_bound / float(m)
        sigma = float(self.noise_multipliers[round_ - 1]) * 2.0 * self.gradient_bound / float(self.min_records)
        return GaussianRelease(int(client), int(round_), sensitivity, sigma, mechanism=TRUSTED_AGGREGATOR_MECHANISM)

    def whiten(self, terms: np.ndarray) -> np.ndarray:
        """Terms in the noise metric, x / S (the secure sum and the trusted aggregator's noise live there)."""
        return terms if self.scales is None else terms / self.scales

    def unwhiten(self, whitened: np.ndarray) -> np.ndarray:
        """Whitened terms back in the model's metric, x S (the decoded or noised aggregate)."""
        return whitened if self.scales is None else whitened * self.scales

    def calibration(self, round_: int, m) -> tuple[np.ndarray, np.ndarray | None]:
        """(Delta_i, sigma_i) of round ``round_`` for clients of sizes ``m``: Delta_i = 2 G / m_i and
        sigma_i = z_l Delta_i (None when privacy is off)."""
        sensitivity = 2.0 * self.gradient_bound / np.asarray(m, dtype=float)
        z = self.noise_multipliers
        if z is None:
            return sensitivity, None
        if not 1 <= round_ <= len(z):
            raise ValueError(f"round {round_} is outside 1..{len(z)}: the noise was calibrated for {len(z)} rounds")
        return sensitivity, z[round_ - 1] * sensitivity


def term_release(client: int, round_: int, sensitivity: float, sigma: float) -> GaussianRelease:
    """The ledger event of one FDP-ADMM release (replace-one; every engine records this)."""
    return GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma), mechanism=MECHANISM)


def noisy_descent_terms(data: SiteData, points: np.ndarray, *, round_: int, plans: Sequence[SitePlan],
                        noise: NoiseSource) -> np.ndarray:
    """The site's releases of round ``round_`` for every client of ``data`` (eq. (1.3)):
    -g_i(w_i) + sigma_i S z_i, one standard-normal draw z_i per client from ``noise``.

    ``points`` (M, K) with one plan, or (C, M, K) with one plan per configuration (the batched
    engine: configurations that share their data and seed share each client's draw, scaled by each
    configuration's sigma).  A refusal by ``noise`` raises (see :func:`answer` for a site that refuses
    clients one by one).
    """
    terms = -mean_loss_terms(plans[0].loss, data, points)
    refusals = _add_noise(terms, data, round_, plans, noise)
    refused = next((r for r in refusals if r is not None), None)
    if refused is not None:
        raise refused
    return terms


def _add_noise(terms: np.ndarray, data: SiteData, round_: int, plans: Sequence[SitePlan], noise: NoiseSource
               ) -> list[Exception | None]:
    """Add every client's noise to its row of ``terms`` ((M, K), or (C, M, K) with one plan per
    configuration), in place.  ``noise`` is called once per client, in client order, after every
    noise-free term is computed, with the draw's ledger events (one per private configuration); a
    refusal leaves that client's row without noise and is returned in its place (the caller must
    not release it)."""
    calibrations = [p.calibration(round_, data.counts) for p in plans]
    refusals: list[Exception | None] = [None] * len(data.clients)
    if all(sigma is None for _, sigma in calibrations):
        return refusals
    scales = plans[0].scales
    for i, client in enumerate(data.clients):
        events = [term_release(client, round_, s[i], g[i]) for s, g in calibrations if g is not None]
        try:
            rng = noise(events)
        except Exception as exc:  # the site's refusal: this client releases nothing
            refusals[i] = exc
            continue
        draw = rng.standard_normal(terms.shape[-1])
        if scales is not None:
            draw = draw * scales
        if terms.ndim == 3:
            sigma = np.array([0.0 if g is None else g[i] for _, g in calibrations])
            terms[:, i] += sigma[:, None] * draw[None, :]
        else:
            terms[i] += calibrations[0][1][i] * draw
    return refusals


def answer(requests: Sequence[SiteRequest], data: SiteData, plan: SitePlan, noise: NoiseSource
           ) -> list[SiteRelease | Exception]:
    """The site's answer to the requests of one round, one entry per request: its
    :class:`~fdp_flower.algorithms.protocol.SiteRelease`, or the exception that refuses that client alone
    (a public value the site does not accept, the site's policy); nothing of a refused client is
    released.  ``data`` holds the clients the requests name (``request.client``; None: the site's own,
    only client).
    """
    if plan.schedule is not None and requests:
        newton = _answer_newton(requests, data, plan, noise)
        if newton is not None:
            return newton
    out: list[SiteRelease | Exception | None] = [None] * len(requests)
    rows: list[tuple[int, int]] = []  # (request, row of data)
    points = []
    for j, request in enumerate(requests):
        try:
            client = requested_client(request, requests, data.clients)
            points.append(check_public("point", request.public.get("point"), (plan.dim,)))
            rows.append((j, data.clients.index(int(client))))
        except ValueError as exc:
            out[j] = exc
    if not rows:
        return out  # type: ignore[return-value]
    own = data if [i for _, i in rows] == list(range(len(data.clients))) else data.subset([i for _, i in rows])
    round_ = requests[rows[0][0]].round
    terms = -mean_loss_terms(plan.loss, own, np.stack(points))
    if plan.private and plan.trust != "site":
        for i, (j, _) in enumerate(rows):
            out[j] = _aggregated_release(own.clients[i], round_, plan.whiten(terms[i]), own.counts[i], plan, noise)
        return out  # type: ignore[return-value]
    refusals = _add_noise(terms, own, round_, [plan], noise)
    sensitivity, sigma = plan.calibration(round_, own.counts)
    for i, (j, _) in enumerate(rows):
        if refusals[i] is not None:
            out[j] = refusals[i]
            continue
        client = own.clients[i]
        event = None if sigma is None else term_release(client, round_, sensitivity[i], sigma[i])
        metrics = {"sensitivity": float(sensitivity[i]), "sigma": 0.0 if sigma is None else float(sigma[i])}
        out[j] = SiteRelease(client, round_, terms[i], int(own.counts[i]), event, metrics)
    return out  # type: ignore[return-value]


def _aggregated_release(client: int, round_: int, whitened: np.ndarray, m: float, plan: SitePlan,
                        noise: NoiseSource) -> SiteRelease | Exception:
    """One client's release into an aggregate (docs/privacy.md, "Trust modes"; docs/algorithms.md):

    - ``secure_aggregation``: the integer share v_i = R(gamma x_i) + Sk(V / (M - t)) of the whitened
      descent term x_i = -g_i(w) / S (eq. (1.3s); :func:`fdp_flower.privacy.distributed.site_share`, whose
      records are the plan's min_i m_i units of G / min_i m_i: ||x_i - x_i'|| <= 2 G / m_i <= 2 G / min m);
      only the sum of the shares is ever decoded, by the server (:class:`~fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`);
    - ``trusted_aggregator``: x_i itself, noise-free (eq. (1.3t)); the ledger event is the noise the server
      adds once to the sum (:meth:`SitePlan.trusted_release`).

    A refusal (the site's noise source or policy, or a share beyond Flower's clip) is returned in place
    of the release; nothing of that client is sent.  No metrics travel with it (they would pass a secure
    sum unmasked)."""
    if int(m) < int(plan.min_records):  # its sensitivity 2 G / m_i would exceed the plan's 2 G / min_i m_i
        return ValueError(f"client {client} has m_i = {int(m)} rows, below the plan's min_i m_i = {plan.min_records}")
    if plan.trust == "secure_aggregation":
        event = SkellamSumRelease.of_plan(plan.secure, client=int(client), round=int(round_))
        try:
            rng = noise([event])
            share = site_share(whitened, plan.secure, rng, records=int(plan.min_records))
        except Exception as exc:  # ShareRefused, or the site's refusal: this client releases nothing
            return exc
        return SiteRelease(int(client), int(round_), share, int(m), event, {})
    event = plan.trusted_release(client, round_, m)
    try:
        noise([event])  # the site's ledger records what it hands to the aggregator (nothing is drawn here)
    except Exception as exc:
        return exc
    return SiteRelease(int(client), int(round_), np.array(whitened, dtype=float), int(m), event, {})


#: The ledger mechanisms of the Newton rule's releases other than the data term (docs/privacy.md)
NEWTON_MECHANISMS = {"quartiles": "fdp_newton_quartile_shares", "density": "fdp_newton_residual_density",
                     "share": "fdp_newton_residual_share", "residual_quartiles": "fdp_level_residual_quartile_shares",
                     "moments": "fdp_newton_second_moments"}
#: the public values each release kind of the Newton rule names, and nothing else
_NEWTON_KEYS = {"range": set(), "moments": set(), "quartiles": {"thresholds"}, "density": {"point", "bandwidth"}, "share": {"point"},
                "term": {"point"}, "residual_quartiles": {"point", "thresholds"}}


def newton_release_event(kind: str, client: int, round_: int, m: float, plan: SitePlan, bandwidth: float | None = None
                         ) -> GaussianRelease | None:
    """The ledger event of a Newton-rule release of ``kind`` (None: privacy off): sensitivity from
    :func:`fdp_flower.algorithms.fdp_admm.newton.release_sensitivity`, sigma = z_l x sensitivity with the
    schedule's z_l of that round."""
    from fdp_flower.algorithms.fdp_admm.newton import release_sensitivity

    z = plan.schedule.z(round_)
    if z is None:
        return None
    if kind == "term":
        sensitivity = 2.0 * plan.gradient_bound / float(m)
        return term_release(client, round_, sensitivity, z * sensitivity)
    if kind == "moments" and plan.row_bound is None:
        raise ValueError("a second-moments release needs the sphere clip (its rows' norm bound c1)")
    sensitivity = release_sensitivity(kind, float(m), bandwidth=bandwidth, row_bound=plan.row_bound)
    return GaussianRelease(int(client), int(round_), float(sensitivity), float(z * sensitivity),
                           mechanism=NEWTON_MECHANISMS[kind])


def _answer_newton(requests: Sequence[SiteRequest], data: SiteData, plan: SitePlan, noise: NoiseSource):
    """The Newton rule's releases other than the data term (None for a term round: :func:`answer` releases
    it as under the ADMM rule).  The round's kind is the site's own schedule's, never the server's word: a
    request naming other public values is refused; every value is checked (:func:`check_public`)."""
    from fdp_flower.algorithms.fdp_admm import newton as N

    round_ = requests[0].round
    try:
        kind = plan.schedule.kind(round_)
    except ValueError as exc:
        return [exc for _ in requests]
    if kind == N.TERM:
        return None
    out: list[SiteRelease | Exception] = []
    for request in requests:
        try:
            client = requested_client(request, requests, data.clients)
            named = set(request.public)
            if named != _NEWTON_KEYS[kind]:
                raise ValueError(f"round {round_} of the schedule is a {kind} release; the request names "
                                 f"{sorted(named)}, expected {sorted(_NEWTON_KEYS[kind])}")
            features, response = data.rows_of(data.clients.index(client))
            m = len(response)
            bandwidth = None
            if kind == N.RANGE:
                if plan.private:
                    raise ValueError("a range release (min, max of the responses) is refused with privacy on")
                out.append(SiteRelease(client, round_, np.array([response.min(), response.max()]), m, None,
                                       {"sensitivity": 0.0, "sigma": 0.0}))
                continue
            if kind == N.MOMENTS:
                value = N.second_moments(features)
            elif kind in (N.QUARTILES, N.RESIDUAL_QUARTILES):
                thresholds = check_public("thresholds", request.public["thresholds"],
                                          (len(N.LEVELS) * N.THRESHOLDS_PER_LEVEL,))
                if kind == N.QUARTILES:
                    value = N.quartile_shares(response, thresholds)
                else:
                    point = check_public("point", request.public["point"], (plan.dim,))
                    value = N.residual_quartile_shares(features, response, point, thresholds)
            else:
                point = check_public("point", request.public["point"], (plan.dim,))
                if kind == N.DENSITY:
                    bandwidth = float(check_public("bandwidth", request.public["bandwidth"], (1,))[0])
                    if not 1e-12 <= bandwidth <= 1e12:
                        raise ValueError(f"bandwidth {bandwidth:.3g} is outside [1e-12, 1e12]")
                    value = np.array([N.residual_density(features, response, point, bandwidth)])
                else:
                    value = np.array([N.residual_share(features, response, point)])
            event = newton_release_event(kind, client, round_, m, plan, bandwidth)
            if event is not None:
                rng = noise([event])  # charged before anything is drawn; a refusal releases nothing
                value = value + event.sigma * rng.standard_normal(value.shape)
            metrics = {"sensitivity": 0.0 if event is None else float(event.sensitivity),
                       "sigma": 0.0 if event is None else float(event.sigma)}
            out.append(SiteRelease(client, round_, value, m, event, metrics))
        except Exception as exc:  # this client releases nothing
            out.append(exc)
    return out
