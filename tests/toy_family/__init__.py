"""A toy algorithm family, to show that a family is its own folder and one registry entry.

Federated gradient descent on the mean of the clients' rows: each round the server names the point
w, every client releases its clipped mean gradient (1/m_i) sum_j clip(w - x_ij, c) plus Gaussian noise
(sensitivity 2c/m_i, sigma = z 2c/m_i), and the server steps w <- w - eta mean_i(release_i).  The
test registers it through ``FDP_FLOWER_FAMILIES=tests.toy_family`` and runs it with the generic
drivers only (in process and on Flower's simulation runtime): nothing in the package names it.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from fdp_flower.algorithms.protocol import (
    ReleaseRejected,
    RoundPlan,
    ServerProtocol,
    SiteRelease,
    SiteRequest,
    check_public,
)
from fdp_flower.algorithms.registry import Family
from fdp_flower.config.base import _Frozen
from fdp_flower.config.sections import FederationConfig, OutputConfig
from fdp_flower.privacy.ledger import GaussianRelease

MECHANISM = "toy_mean_gradient"


class ToyAlgorithm(_Frozen):
    kind: Literal["toy_mean"] = Field("toy_mean", description="variant tag")
    rounds: int = Field(8, ge=1, le=1000, description="rounds")
    eta: float = Field(0.5, gt=0, le=1, description="step")


class ToyPrivacy(_Frozen):
    enabled: bool = Field(True, description="add noise")
    noise_multiplier: float = Field(4.0, gt=0, description="z = sigma / sensitivity of every release")
    delta: float = Field(1.0e-5, gt=0, lt=1, description="delta of the reported eps")


class ToyData(_Frozen):
    samples_per_client: int = Field(200, ge=1, le=100_000, description="m_i")
    dim: int = Field(3, ge=1, le=100, description="dimension")
    clip: float = Field(2.0, gt=0, description="c: clip of each row's gradient")


class ToyScenario(_Frozen):
    name: str = Field("toy", min_length=1, max_length=200, description="name")
    seed: int = Field(0, ge=0, description="seed")
    algorithm: ToyAlgorithm = Field(ToyAlgorithm(), description="algorithm")
    federation: FederationConfig = Field(FederationConfig(num_clients=4), description="clients")
    data: ToyData = Field(ToyData(), description="data")
    privacy: ToyPrivacy = Field(ToyPrivacy(), description="privacy")
    output: OutputConfig = Field(OutputConfig(), description="results")


def client_rows(scenario: ToyScenario, client: int) -> np.ndarray:
    """Client ``client``'s rows: N(1 + client / 10, I) in every coordinate (seeded)."""
    d = scenario.data
    return np.random.default_rng((scenario.seed, 99, client)).normal(1.0 + client / 10, 1.0,
                                                                     (d.samples_per_client, d.dim))


def calibration(scenario: ToyScenario, m: int) -> tuple[float, float | None]:
    sensitivity = 2.0 * scenario.data.clip / m
    return sensitivity, scenario.privacy.noise_multiplier * sensitivity if scenario.privacy.enabled else None


def answer(requests, scenario: ToyScenario, noise):
    """The site function: every requested client's noisy clipped mean gradient at the point it is sent."""
    out = []
    for request in requests:
        try:
            point = check_public("point", request.public.get("point"), (scenario.data.dim,))
        except ValueError as exc:
            out.append(exc)
            continue
        rows = client_rows(scenario, request.client)
        diff = point - rows
        norms = np.linalg.norm(diff, axis=1, keepdims=True)
        term = (diff * np.minimum(1.0, scenario.data.clip / np.maximum(norms, 1e-300))).mean(axis=0)
        sensitivity, sigma = calibration(scenario, len(rows))
        event = None
        if sigma is not None:
            event = GaussianRelease(request.client, request.round, sensitivity, sigma, mechanism=MECHANISM)
            term = term + sigma * noise([event]).standard_normal(term.shape)
        out.append(SiteRelease(request.client, request.round, term, len(rows), event,
                               {"sensitivity": sensitivity, "sigma": sigma or 0.0}))
    return out


class ToyServer(ServerProtocol):
    family = "toy"

    def __init__(self, scenario: ToyScenario) -> None:
        super().__init__(scenario.federation.num_clients, quorum=1.0)
        self.scenario = scenario
        self.w = np.zeros(scenario.data.dim)
        self.step = 0

    @property
    def round(self) -> int:
        return self.step

    @property
    def rounds_planned(self) -> int:
        return self.scenario.algorithm.rounds

    def release_event(self, client, round_, sensitivity, sigma):
        return None if sigma == 0 else GaussianRelease(client, round_, sensitivity, sigma, mechanism=MECHANISM)

    def final_arrays(self):
        return {"estimate": self.w}

    def _plan(self, clients):
        round_ = self.step + 1
        if round_ > self.rounds_planned:
            return None
        asked = range(self.num_clients) if clients is None else clients
        m = self.scenario.data.samples_per_client
        planned = tuple(GaussianRelease(i, round_, *calibration(self.scenario, m), mechanism=MECHANISM)
                        for i in asked) if self.scenario.privacy.enabled else ()
        return RoundPlan(round_, tuple(SiteRequest(i, round_, {"point": self.w}) for i in asked), planned)

    def _check(self, release: SiteRelease) -> None:
        value = np.asarray(release.value, dtype=float)
        if value.shape != self.w.shape or not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"client {release.client}: malformed release")

    def _close(self, plan, accepted):
        self.check_quorum([i in accepted for i in range(self.num_clients)], plan.round)
        mean = np.mean([accepted[i].value for i in sorted(accepted)], axis=0)
        self.w = self.w - self.scenario.algorithm.eta * mean
        self.step = plan.round
        return {"round": plan.round, "w_norm": float(np.linalg.norm(self.w))}


FAMILY = Family(
    name="toy",
    kinds=("toy_mean",),
    schema="tests.toy_family:ToyScenario",
    run_config={"num-server-rounds": "algorithm.rounds", "seed": "seed", "num-clients": "federation.num_clients"},
    server="tests.toy_family:ToyServer",
    site="tests.toy_family:answer",
)
