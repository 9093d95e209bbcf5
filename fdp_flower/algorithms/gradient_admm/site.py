"""DP-ADMM / DP-AccADMM's site function: the only code that reads a client's rows and draws its noise
(Xu et al. 2020, gradient perturbation; docs/algorithms.md, section 5; the protocol:
:mod:`fdp_flower.algorithms.protocol`).

A site holds its rows, clipped once to ||a|| <= c1 (:meth:`SiteData.clip`).  Each round the server
names the point xh_{t-1} (its extrapolated iterate) and the site releases its **data term**, the mean
(sub)gradient of its loss there plus Gaussian noise,

    g~_i = (1/m_i) sum_j grad l(xh_{t-1}; a_ij, y_ij) + N(0, sigma_i^2 I),                    (5.3)

with the sensitivity Delta_i = 2c/m_i of the mean (c = G(c1), the loss's per-sample gradient bound) and
the run's sigma_i for its T releases (PLD-calibrated, eq. (5.10); Theorem 1 with ``paper_constants``;
:class:`~fdp_flower.algorithms.gradient_admm.update.GradientPrivacy`).
Nothing else the server sends enters the release: y, u, rho, eta, gamma and A are the server's
post-processing (:mod:`fdp_flower.algorithms.gradient_admm.protocol`).  The site checks what its
privacy depends on before anything is computed or charged: the point is finite and at most
:data:`~fdp_flower.algorithms.protocol.MAX_PUBLIC_MAGNITUDE` in absolute value
(:func:`~fdp_flower.algorithms.protocol.check_public`), the round lies in 1..T (the calibration covers T
releases), and its responses are ones the gradient bound holds for (the logistic loss: labels in
{-1, +1}).  A refused request releases nothing.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.gradient_admm.update import MECHANISM, GradientPrivacy, gradient_sensitivity
from fdp_flower.algorithms.protocol import NoiseSource, SiteRelease, SiteRequest, check_public, requested_client
from fdp_flower.core.clipping import clip_rows
from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.mechanisms import add_gaussian_noise

#: The name of the point a request carries (the server's xh_{t-1}).
POINT = "x_hat"


@dataclass(frozen=True)
class SiteData:
    """The clipped rows and responses of the clients a site (or a simulation) holds: ``features[k]``
    (m_k, K) with ||a|| <= c1, ``responses[k]`` (m_k,), client ids ``clients[k]``, and the rows each
    had clipped."""

    clients: tuple[int, ...]
    features: tuple[np.ndarray, ...]
    responses: tuple[np.ndarray, ...]
    clipped_rows: tuple[int, ...] = ()

    @classmethod
    def clip(cls, clients: Sequence[int], features: Sequence[np.ndarray], responses: Sequence[np.ndarray],
             c1: float) -> SiteData:
        """The clients' rows clipped to ||a|| <= c1 (:func:`fdp_flower.core.clipping.clip_rows`, once)."""
        clipped = [clip_rows(a, c1) for a in features]
        return cls(tuple(int(c) for c in clients), tuple(a for a, _ in clipped),
                   tuple(np.asarray(y, dtype=float) for y in responses), tuple(k for _, k in clipped))

    def rows_of(self, client: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.clients.index(int(client))
        return self.features[k], self.responses[k]


@dataclass(frozen=True)
class SitePlan:
    """What a site needs to calibrate its releases, all public: the loss it evaluates, the per-sample
    gradient bound c = G(c1) of that loss on its clipped rows, the dimension K, the number of releases
    T the calibration covers and its privacy parameters (None: privacy off, no noise)."""

    loss: object
    gradient_bound: float
    dim: int
    rounds: int
    privacy: GradientPrivacy | None

    def calibration(self, round_: int, m) -> tuple[np.ndarray, np.ndarray | None]:
        """(Delta_i, sigma_i) of round ``round_`` for clients of sizes ``m``: Delta_i = 2c/m_i and the run's
        sigma_i (None when privacy is off); a round outside 1..T is a ``ValueError`` (the noise is calibrated
        for T releases).  The same in every round (one calibration for the whole run); a scalar m's is
        computed once."""
        if not 1 <= round_ <= self.rounds:
            raise ValueError(f"round {round_} outside [1, {self.rounds}]: the noise was calibrated for "
                             f"{self.rounds} releases")
        if np.ndim(m) == 0:
            known = self.__dict__.setdefault("_by_size", {})  # frozen fields; this memo is not one
            if float(m) not in known:
                known[float(m)] = self._calibration(float(m))
            return known[float(m)]
        return self._calibration(m)

    def _calibration(self, m):
        if self.privacy is None:
            return gradient_sensitivity(self.gradient_bound, m), None
        return self.privacy.calibration(self.gradient_bound, m, self.rounds)

    def release(self, client: int, round_: int, m: float) -> GaussianRelease | None:
        """The ledger event of ``client``'s release in ``round_`` at size ``m`` (None when privacy is off)."""
        sensitivity, sigma = self.calibration(round_, m)
        if sigma is None:
            return None
        return gradient_release(client, round_, float(sensitivity), float(sigma), self.privacy.neighbouring)


def gradient_release(client: int, round_: int, sensitivity: float, sigma: float,
                     neighbouring: str = "add_remove") -> GaussianRelease:
    """The ledger event of one DP-(Acc)ADMM release (every engine records this)."""
    return GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma), neighbouring=neighbouring,
                           mechanism=MECHANISM)


def data_term(loss, point: np.ndarray, features: np.ndarray, response: np.ndarray) -> np.ndarray:
    """grad f_i(x) = (1/m_i) sum_j grad l(x; a_ij, y_ij) (a subgradient for non-smooth losses): the data
    term (5.3) without noise."""
    return loss.mean_subgradient(point, features, response)


def check_responses(loss, response: np.ndarray) -> None:
    """Refuse (one-line ``ValueError``) responses the loss's gradient bound does not hold for (the
    logistic loss: labels in {-1, +1}; every loss: finite)."""
    check = getattr(loss, "check_response", None)
    if check is not None:
        check(response)


def answer(requests: Sequence[SiteRequest], data: SiteData, plan: SitePlan, noise: NoiseSource
           ) -> list[SiteRelease | Exception]:
    """The site's answer to the requests of one round, one entry per request: its
    :class:`~fdp_flower.algorithms.protocol.SiteRelease` (the noisy data term (5.3)), or the exception that
    refuses that client alone (a public value it does not accept, a round outside the calibration,
    responses the loss's bound does not hold for, the site's policy); nothing of a refused client is
    released and its noise source is not called.  ``data`` holds the clients the requests name
    (``request.client``; None: the site's own, only client); clients are answered in request order,
    each one's noise drawn from ``noise`` after its noise-free term is computed.
    """
    out: list[SiteRelease | Exception] = []
    checked = data.__dict__.setdefault("_checked", set())  # (client, loss) whose responses passed
    last: tuple = (None, None)  # (the public value, its checked array): one check for a shared point
    for request in requests:
        try:
            client = requested_client(request, requests, data.clients)
            value = request.public.get(POINT)
            if value is None or value is not last[0]:
                last = (value, check_public(POINT, value, (plan.dim,)))
            point = last[1]
            features, response = data.rows_of(int(client))
            m = len(response)
            sensitivity, sigma = plan.calibration(request.round, m)
            if (int(client), plan.loss) not in checked:
                check_responses(plan.loss, response)
                checked.add((int(client), plan.loss))
        except ValueError as exc:  # a request this site refuses: nothing is computed or charged
            out.append(exc)
            continue
        term = data_term(plan.loss, point, features, response)
        event = None
        if sigma is not None:
            event = gradient_release(client, request.round, float(sensitivity), float(sigma),
                                     plan.privacy.neighbouring)
            try:
                rng = noise([event])  # the site's charge happens here, before the draw
            except Exception as exc:  # the site's refusal: this client releases nothing
                out.append(exc)
                continue
            term = add_gaussian_noise(term, event.sigma, rng)
        metrics = {"sensitivity": float(sensitivity), "sigma": 0.0 if sigma is None else float(sigma)}
        out.append(SiteRelease(int(client), request.round, term, m, event, metrics))
    return out

__all__ = ["MECHANISM", "POINT", "SiteData", "SitePlan", "answer", "check_responses", "data_term",
           "gradient_release"]
