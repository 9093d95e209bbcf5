"""FDP-ADMM client worker: one local step on the client's own data (spec section 1, step 1).

Pure function of (scenario, partition, message contents): the client keeps no
state between rounds.  Noise is calibrated and added here, on the client, from
public quantities (its sample count m_i, the round, the scenario); on node-local data
the site's policy, noise and ledger apply (:mod:`fdp_flower.clients.site`).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import (
    build_objective,
    client_features,
    data_source,
    load_partition,
    model_dim,
    noise_plan,
    noise_scales,
    primal_release,
)
from fdp_flower.algorithms.fdp_admm.update import client_primal_step
from fdp_flower.clients.common import node_partition
from fdp_flower.clients.site import SiteSession, names_own_data
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy import GaussianRelease
from fdp_flower.privacy.mechanisms import add_gaussian_noise, release_rng
from fdp_flower.wire import pack_arrays, unpack_arrays

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message, MetricRecord, RecordDict


@dataclass(frozen=True)
class ClientReply:
    """What a client releases: its noisy primal and public bookkeeping."""

    noisy_primal: np.ndarray
    partition: int
    num_examples: int
    eta: float
    sensitivity: float
    sigma: float  # 0.0 when privacy is off
    clipped_rows: int


def fdp_admm_client_update(scenario: Scenario, partition: int, data, basis: FunctionalBasis, *,
                           global_w: np.ndarray, dual: np.ndarray, noisy_primal: np.ndarray,
                           round_: int,
                           noise: Callable[[GaussianRelease], np.random.Generator] | None = None) -> ClientReply:
    """Compute w_i^l from (w^{l-1}, g_i^{l-1}, wt_i^{l-1}) and release wt_i^l = w_i^l + N(0, sigma^2 I).

    ``noise`` maps the release's ledger event to its noise generator, called once the noise-free
    step is computed (:meth:`fdp_flower.clients.site.SiteSession.noise_for`: the site's policy and
    ledger); default ``release_rng(seed, partition, round, privacy.noise_source)``.
    """
    dim = model_dim(scenario, basis)
    for name, arr in (("global_w", global_w), ("dual", dual), ("noisy_primal", noisy_primal)):
        if np.shape(arr) != (dim,):
            raise ValueError(f"{name} must have shape ({dim},), got {np.shape(arr)}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinite values")
    features, clipped = client_features(scenario, basis, data)
    m = features.shape[0]
    plan = noise_plan(scenario, basis)
    eta, sensitivity, sigma = plan.release(round_, m)
    primal = client_primal_step(objective=build_objective(scenario), noisy_primal=noisy_primal,
                                global_w=global_w, dual=dual, features=features, response=data.response,
                                eta=float(eta), rho=scenario.algorithm.rho)
    if sigma is None:
        released, sigma_value = primal, 0.0
    else:
        scales = noise_scales(scenario, basis)
        rng = (release_rng(scenario.seed, partition, round_, scenario.privacy.noise_source) if noise is None
               else noise(primal_release(partition, round_, float(sensitivity), float(sigma))))
        released = add_gaussian_noise(primal, float(sigma), rng, scales)
        sigma_value = float(sigma)
    return ClientReply(released, partition, m, float(eta), float(sensitivity), sigma_value, clipped)


def handle_fdp_admm_train(msg: Message, context: Context, scenario: Scenario) -> Message:
    """Unpack an FDP-ADMM train message, run the client worker, pack the reply (with the site's totals
    on node-local data)."""
    config = msg.content["config"]
    partition = node_partition(context, scenario, int(config["partition-id"]) if "partition-id" in config else None)
    site = SiteSession.open(context, scenario, node_local=names_own_data(context, data_source(scenario)))
    site.admit(scenario.privacy.enabled, "FDP-ADMM primal releases")
    arrays = unpack_arrays(msg.content["arrays"])
    basis = FunctionalBasis.from_arrays({k[len("basis_"):]: v for k, v in arrays.items() if k.startswith("basis_")})
    reply = fdp_admm_client_update(
        scenario, partition, load_partition(scenario, partition, context.node_config.get("data-path") or None), basis,
        global_w=arrays["global_w"], dual=arrays["dual"], noisy_primal=arrays["noisy_primal"],
        round_=int(config["round"]), noise=site.noise_for)
    metrics = {"partition-id": reply.partition, "num-examples": reply.num_examples, "eta": reply.eta,
               "sensitivity": reply.sensitivity, "sigma": reply.sigma}
    if scenario.privacy.report_clipped_rows or not scenario.privacy.enabled:
        metrics["clipped-rows"] = reply.clipped_rows
    content = RecordDict({"arrays": pack_arrays(noisy_primal=reply.noisy_primal), "metrics": MetricRecord(metrics),
                          **site.records()})
    return Message(content=content, reply_to=msg)
