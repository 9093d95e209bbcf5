"""A simulated DP-(Acc)ADMM federation's server-side evaluation: the problem of a scenario, its exact
reference and the metrics of each round (objective, gap, test and train accuracy) on the pooled rows.

The tabular data of this family are public data sets or the caller's own arrays, so a simulation's
server may evaluate on the pooled rows (docs/gradient_admm.md); the releases are the sites' alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.gradient_admm.plan import GradientADMMProblem, ScenarioData, build_problem
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState, accuracy, generalized_lasso_objective


@dataclass
class Evaluator:
    """``evaluator(state) -> dict``: F(x_t) = (1/n) sum_j l(x_t; a_j, y_j) + lam ||A x_t||_1 on the pooled
    rows, with ``reference`` F(x*) the gap and the relative gap (F(x_t) - F(x*)) / |F(x*)|, the test
    accuracy (when the problem has test rows) and the training accuracy."""

    problem: GradientADMMProblem
    reference: float | None = None
    _pooled: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pooled = self.problem.pooled()

    def __call__(self, state: GradientADMMState) -> dict[str, float]:
        p, (a, y) = self.problem, self._pooled
        obj = generalized_lasso_objective(p.loss, state.x, a, y, p.matrix, p.lam)
        row = {"objective": obj}
        if self.reference is not None:
            row["gap"] = obj - self.reference
            row["relative_gap"] = (obj - self.reference) / abs(self.reference)
        if p.test_features is not None:
            row["test_accuracy"] = accuracy(state.x, p.test_features, p.test_labels)
        row["train_accuracy"] = accuracy(state.x, a, y)
        return row


def reference_objective(problem: GradientADMMProblem) -> float:
    """F(x*) of the pooled problem (:func:`fdp_flower.algorithms.gradient_admm.reference.solve_generalized_lasso`)."""
    from fdp_flower.algorithms.gradient_admm.reference import solve_generalized_lasso

    a, y = problem.pooled()
    return solve_generalized_lasso(problem.loss, a, y, problem.matrix, problem.lam).objective


def simulation_setup(scenario, *, with_reference: bool = True, data: ScenarioData | None = None
                     ) -> tuple[GradientADMMProblem, Evaluator]:
    """The problem of ``scenario`` (``data``: its preloaded rows) and the evaluator of its rounds (with the
    exact reference when ``with_reference``)."""
    problem = build_problem(scenario, data)
    return problem, Evaluator(problem, reference_objective(problem) if with_reference else None)


def paper_dual(problem: GradientADMMProblem, rho: float) -> np.ndarray:
    """The paper's u_0 = -(A^T)^+ grad f(x_0) / rho at x_0 = 0 (Xu et al. 2020, Algorithms 2-3 input), from every
    site's noise-free data term: a function of the data released without noise, so for non-private runs only
    (the scenario refuses it with privacy on)."""
    from fdp_flower.algorithms.gradient_admm.site import data_term
    from fdp_flower.algorithms.gradient_admm.update import aggregate_gradients, paper_initial_dual

    zero = np.zeros(problem.dim)
    g0 = aggregate_gradients(np.stack([data_term(problem.loss, zero, a, y) for a, y in
                                       zip(problem.client_features, problem.client_responses)]), problem.counts)
    return paper_initial_dual(problem.matrix, g0, rho)
