"""DP-ADMM / DP-AccADMM client worker (Xu et al. 2020; docs/algorithms.md, section 5), Flower Message API.

The client is stateless: given its data and the message contents (the server's
extrapolated point xh_{t-1} and the round t) it returns its noisy local gradient
grad f_i(xh_{t-1}) + N(0, s_i^2 I), with s_i calibrated by Theorem 1 from its own
sample count m_i and the public run parameters of its scenario.  Its noise generator comes
from :meth:`fdp_flower.clients.site.SiteSession.noise_for` (the tabular data are public, so the
run's noise source applies and no site ledger is kept; a node-local source would switch on the
site's policy there).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.gradient_admm.update import (
    MECHANISM,
    client_release,
    gradient_sensitivity,
)
from fdp_flower.clients.site import SiteSession
from fdp_flower.core.clipping import clip_rows
from fdp_flower.privacy import GaussianRelease
from fdp_flower.wire import pack_arrays, unpack_arrays

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message, MetricRecord, RecordDict


@dataclass(frozen=True)
class GradientReply:
    """What one client releases in one round."""

    gradient: np.ndarray  # noisy when privacy is on
    partition: int
    num_examples: int
    sensitivity: float  # 0.0 when privacy is off
    sigma: float  # 0.0 when privacy is off
    clipped_rows: int


def gradient_admm_client_update(*, loss, features: np.ndarray, labels: np.ndarray, x_hat: np.ndarray,
                                round_: int, partition: int, seed: int, c1: float, rounds: int,
                                privacy=None,
                                noise: Callable[[GaussianRelease], np.random.Generator] | None = None
                                ) -> GradientReply:
    """Clip the rows to ||a|| <= c1, compute grad f_i(xh) and add Theorem 1 noise.

    ``privacy`` is a :class:`fdp_flower.engines.gradient_admm.GradientPrivacy` or None (no noise).
    The noise generator is ``release_rng(seed, partition, round_)``, or ``noise(release)`` if given
    (:meth:`fdp_flower.clients.site.SiteSession.noise_for`).
    """
    x_hat = np.asarray(x_hat, dtype=float)
    if x_hat.shape != (features.shape[1],) or not np.all(np.isfinite(x_hat)):
        raise ValueError(f"x_hat must be a finite vector of length {features.shape[1]}, got shape {x_hat.shape}")
    if not 1 <= round_ <= rounds:
        raise ValueError(f"round {round_} outside [1, {rounds}]: Theorem 1 was calibrated for {rounds} releases")
    clipped, n_clipped = clip_rows(features, c1)
    m = len(labels)
    if privacy is None:
        sens, sigma = 0.0, None
    else:
        sens = float(gradient_sensitivity(loss.gradient_bound(c1), m, privacy.neighbouring))
        sigma = float(privacy.sigma(sens, rounds))
    rng = None
    if noise is not None and sigma is not None:
        event = GaussianRelease(partition, round_, sens, sigma, neighbouring=privacy.neighbouring, mechanism=MECHANISM)
        rng = lambda: noise(event)  # noqa: E731
    grad = client_release(loss=loss, x_hat=x_hat, features=clipped, response=labels, sigma=sigma, seed=seed,
                          client=partition, round_=round_, rng=rng)
    return GradientReply(grad, partition, m, sens, 0.0 if sigma is None else sigma, n_clipped)


def handle_gradient_admm_train(msg: Message, context: Context, scenario, data=None) -> Message:
    """Unpack a DP-(Acc)ADMM train message, run the worker on this node's partition, pack the reply.

    ``scenario`` is the client's own :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario`;
    ``data`` (optional) a preloaded :class:`~fdp_flower.engines.gradient_admm.ScenarioData`.
    """
    from fdp_flower.core.losses import make_loss
    from fdp_flower.engines.gradient_admm import load_scenario_data, scenario_privacy

    config = msg.content["config"]
    if "partition-id" in config:
        partition = int(config["partition-id"])
    else:
        partition = int(context.node_config["partition-id"])
    if not 0 <= partition < scenario.federation.num_clients:
        raise ValueError(f"partition-id {partition} outside [0, {scenario.federation.num_clients})")
    data = load_scenario_data(scenario) if data is None else data
    # public tabular data (every node can load them, and so can the server): the run's noise source
    site = SiteSession.open(context, scenario, node_local=False)
    site.admit(scenario_privacy(scenario) is not None, "DP-ADMM gradients")
    lc = scenario.model.loss
    reply = gradient_admm_client_update(
        loss=make_loss(lc.kind, tau=lc.tau, residual_bound=lc.residual_bound),
        features=data.features[partition], labels=data.labels[partition],
        x_hat=unpack_arrays(msg.content["arrays"])["x_hat"], round_=int(config["round"]), partition=partition,
        seed=scenario.seed, c1=scenario.model.clip_c1, rounds=scenario.algorithm.rounds,
        privacy=scenario_privacy(scenario), noise=site.noise_for)
    metrics = MetricRecord({"partition-id": reply.partition, "num-examples": reply.num_examples,
                            "sensitivity": reply.sensitivity, "sigma": reply.sigma,
                            "clipped-rows": reply.clipped_rows})
    return Message(content=RecordDict({"arrays": pack_arrays(gradient=reply.gradient), "metrics": metrics}),
                   reply_to=msg)
