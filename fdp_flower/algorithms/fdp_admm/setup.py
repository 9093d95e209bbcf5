"""FDP-ADMM simulation setup: every client's data, the basis, the features and the evaluator."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import (
    build_objective,
    data_source,
    partition_sizes,
    split_coefficients,
)
from fdp_flower.algorithms.fdp_admm.reference import ReferenceSolution, pooled_objective, solve_reference
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, Objective
from fdp_flower.functional import bases, design
from fdp_flower.functional.fpca import FunctionalBasis

log = logging.getLogger(__name__)


@dataclass
class Evaluator:
    """Server-side metrics of a simulation, where the evaluator may see every client's data.

    Not available in a real deployment (no one holds the pooled data); there the
    history carries only what the server can compute from released values.
    """

    scenario: Scenario
    basis: FunctionalBasis
    features: list[np.ndarray]
    responses: list[np.ndarray]
    reference: ReferenceSolution | None
    source: object = None  # the data source (None: the scenario's)

    @cached_property
    def objective(self) -> Objective:
        return build_objective(self.scenario)

    @cached_property
    def beta(self) -> np.ndarray | None:
        source = self.source if self.source is not None else data_source(self.scenario)
        return source.true_beta(self.basis.grid)

    def total_objective(self, w: np.ndarray) -> float:
        ob = self.objective
        return pooled_objective(w, self.features, self.responses, ob.loss, ob.penalty, ob.lam)

    def mise(self, w: np.ndarray) -> float:
        """MISE of beta_hat = sum_k w_k phi_k (the intercept coordinate, if any, left out)."""
        if self.beta is None:
            return float("nan")
        _intercept, coef = split_coefficients(self.scenario, w)
        return float(design.mise(self.basis.function(coef), self.beta, self.basis.grid))

    def __call__(self, state: FDPADMMState) -> dict[str, float]:
        ob = self.objective
        loss_at_primals = np.mean([float(ob.loss.mean(state.noisy_primals[i], a, y))
                                   for i, (a, y) in enumerate(zip(self.features, self.responses))])
        wbar_i, wbar = state.average_noisy_primals, state.average_global_w
        augmented = sum(float(ob.local_value(wbar_i[i], a, y)) + self.scenario.algorithm.rho
                        * float(np.linalg.norm(wbar_i[i] - wbar))
                        for i, (a, y) in enumerate(zip(self.features, self.responses)))
        obj = self.total_objective(state.global_w)
        estimate = state.estimate(self.scenario.algorithm.estimator.kind)
        out = {"mise": self.mise(state.global_w), "mise_avg": self.mise(wbar),
               "mise_estimate": self.mise(estimate),
               "empirical_loss": float(loss_at_primals), "objective": obj,
               "augmented_objective": augmented}
        if self.reference is not None:
            ref = self.reference.objective
            # relative to the optimum; a response the model fits exactly (a constant) has optimum 0: then
            # the absolute gap, which tends to 0 the same way
            out["objective_gap"] = (obj - ref) / abs(ref) if ref != 0 else obj - ref
            out.update(self.exact_distance(estimate))
        return out

    def exact_distance(self, w: np.ndarray) -> dict[str, float]:
        """How far the run's estimate ``w`` is from the exact estimator w_exact (the reference), not only in
        objective: ``exact_distance`` = ||w - w_exact|| / ||w_exact|| (coefficients, intercept included; the
        absolute distance when w_exact = 0) and, when the design's beta is known, ``exact_mise_ratio`` =
        int (beta_hat - beta_exact)^2 / int (beta_exact - beta)^2 (in units of the exact estimator's own MISE)."""
        w_exact = np.asarray(self.reference.w, float)
        gap = float(np.linalg.norm(np.asarray(w, float) - w_exact))
        norm = float(np.linalg.norm(w_exact))
        out = {"exact_distance": gap / norm if norm > 0 else gap}
        if self.beta is not None:
            _i, coef = split_coefficients(self.scenario, w)
            _i, exact = split_coefficients(self.scenario, w_exact)
            between = float(design.mise(self.basis.function(coef), self.basis.function(exact), self.basis.grid))
            exact_mise = float(design.mise(self.basis.function(exact), self.beta, self.basis.grid))
            out["exact_mise_ratio"] = between / exact_mise if exact_mise > 0 else float("nan")
        return out


def available_memory() -> int | None:
    """Bytes of memory available to this process now (Linux MemAvailable), else physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def simulation_memory(scenario: Scenario, source=None) -> int | None:
    """Bytes a simulated run's setup holds at its peak, estimated from the design: the curves of
    one client's slice (m x G doubles) twice (generated and projected; :func:`simulation_setup`
    streams the slices), or of all n curves twice for a federated-DP basis, which keeps them; the
    features (n x G doubles at most); and, for a pooled FPCA, the G x G covariance with its
    eigendecomposition (four G x G doubles).  None when the design's size is not known before
    reading files."""
    data = scenario.data
    if getattr(data, "kind", None) != "paper_simulation":
        return None
    n, points = int(data.n_samples), int(data.grid_points)
    kind = bases.basis_kind(scenario.basis)
    sizes = partition_sizes(scenario) if source is None else source.partition_sizes()
    held = n if kind.federated_phase else max(int(m) for m in sizes)
    return 8 * (2 * held * points + n * points + (4 * points * points if kind.needs_pooled_curves else 0))


def check_memory(scenario: Scenario, available: int | None = None) -> None:
    """Refuse, in one line naming the fields, a design this machine cannot hold (before any work)."""
    need = simulation_memory(scenario)
    available = available_memory() if available is None else available
    if need is None or available is None or need <= available:
        return
    d = scenario.data
    raise ValueError(f"data.n_samples = {d.n_samples} x data.grid_points = {d.grid_points} needs about "
                     f"{need / 2**30:.3g} GiB of memory, this machine has {available / 2**30:.3g} GiB available: "
                     "reduce data.n_samples or data.grid_points")


#: Above this many samples the exact reference (a linear program on all n rows) is solved only
#: when the run asks for it (``with_reference=True``); it dominates a run's time at n = 1e6.
REFERENCE_AUTO_LIMIT = 200_000


def simulation_setup(scenario: Scenario, *, with_reference: bool | None = None, source=None):
    """Everything a simulated run needs: per-client data, basis, features, evaluator.

    Each client's slice is loaded (generated), projected and dropped in turn, so all curves of all
    clients are never held at once: a pooled basis is fitted in a first pass over the slices
    (:func:`fdp_flower.functional.fpca.fit_pooled_fpca_streamed`), the features in a second; only a
    federated-DP basis, built from every client's curves in process, keeps them.
    ``with_reference``: solve the exact reference (None: only up to :data:`REFERENCE_AUTO_LIMIT` samples);
    ``source``: the data source (default: the scenario's; an in-memory source is passed by its holder).
    """
    check_memory(scenario)
    source = data_source(scenario) if source is None else source
    sizes = source.partition_sizes()
    clients = range(len(sizes))
    kind = bases.basis_kind(scenario.basis)
    parts = None
    if kind.federated_phase:
        from fdp_flower.functional.federated_fpca import scenario_basis_in_process

        parts = [source.load(i) for i in clients]
        basis, _releases = scenario_basis_in_process(scenario, [p.curves for p in parts], source.grid())
    elif kind.needs_pooled_curves:
        from fdp_flower.functional.fpca import fit_pooled_fpca_streamed

        b = scenario.basis
        basis = fit_pooled_fpca_streamed((source.load(i).curves for i in clients), source.grid(),
                                         n_components=b.n_components, explained_variance=b.explained_variance)
    else:
        basis = bases.build_basis(scenario.basis, source.grid(), None)
    feats, clipped, responses = [], [], []
    for i in clients:
        part = parts[i] if parts is not None else source.load(i)
        f, c = site_features(scenario, basis, part)
        feats.append(f)
        clipped.append(c)
        responses.append(part.response)
        del part
    parts = None
    if with_reference is None:
        with_reference = int(np.sum(sizes)) <= REFERENCE_AUTO_LIMIT
    reference = None
    if with_reference and scenario.model.penalty.kind in ("l1", "none", "l2", "elastic_net") \
            and scenario.model.loss.kind in ("quantile", "absolute"):
        ob = build_objective(scenario)
        started = time.perf_counter()
        reference = solve_reference(list(feats), responses, ob.loss, ob.penalty, ob.lam)
        log.info("exact reference solved in %.1fs (n = %d)", time.perf_counter() - started, int(np.sum(sizes)))
    evaluator = Evaluator(scenario, basis, feats, responses, reference, source)
    return sizes, basis, feats, responses, clipped, evaluator


