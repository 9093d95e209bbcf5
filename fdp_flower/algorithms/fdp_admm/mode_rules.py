"""Settings chosen for one privacy mode that must not silently carry into the other (issue 29).

A scenario written for ``privacy.mode: per_round`` (Zhou & Xiang's (2022) rule: every round spends
(eps, delta)) sets what that rule needs -- Theorem 2's step, 30 rounds, the sphere clip c1 = 3 -- and
total-budget mode fills only the fields a scenario leaves unset (``Scenario._total_budget_defaults``).
Switched to ``privacy.mode: total`` such a scenario keeps the per-round settings and, measured on the
paper's design at a total eps = 1, costs 5 to 6 times the privacy of the total-budget defaults
(benchmarks/results/estimates_research.md, question 6).  The reverse switch keeps a total-budget run's
many rounds, each of which then spends the whole per-round eps.

:func:`mode_mismatches` reads the scenario mapping as written (before any default is filled) and
returns one line per mismatch, each naming what to change; ``refuse`` says whether the line should be
an error rather than a warning.  Pure: no I/O, nothing filled in.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ModeMismatch", "mode_mismatches"]

#: basis kinds whose scores come with variances (the ellipsoid clip of total mode applies to them)
_FPCA_BASES = ("pooled", "federated_dp")
#: per-round rounds above which a run composes to more than about 10 times its per-round eps (PLD, eps = 1)
_MANY_PER_ROUND_ROUNDS = 30


@dataclass(frozen=True)
class ModeMismatch:
    field: str
    refuse: bool
    message: str


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping) or key not in mapping:
            return None
        mapping = mapping[key]
    return mapping


def mode_mismatches(data: Mapping[str, Any]) -> list[ModeMismatch]:
    """The mode mismatches of an FDP-ADMM scenario mapping (the YAML as written, before defaults).

    - total mode with ``algorithm.step.kind: theorem2`` (warning): Theorem 2's step is the per-round rule's
      (the budget is still met -- ``fdp-flower privacy --mode total`` on a per-round scenario is a fair
      question -- but the fit costs several times the privacy of the total-budget defaults);
    - total mode with an FPCA basis and an explicit sphere clip (``model.clip_c1`` without
      ``model.clip_shape``) (warning): the ellipsoid default of total mode is not applied;
    - total mode with ``algorithm.estimator.kind: last`` (warning): the per-round rule's last iterate keeps
      all the noise of the final round;
    - per-round mode with more than 30 rounds (warning): a total-mode setting, each of whose rounds then
      spends the whole per-round eps.
    """
    privacy = _get(data, "privacy") or {}
    if not isinstance(privacy, Mapping) or privacy.get("enabled", True) is False:
        return []
    algorithm = _get(data, "algorithm") or {}
    if not isinstance(algorithm, Mapping) or algorithm.get("kind", "fdp_admm") != "fdp_admm":
        return []
    mode = privacy.get("mode", "per_round")
    out: list[ModeMismatch] = []
    step_kind = _get(algorithm, "step", "kind")
    if mode == "total":
        if step_kind == "theorem2":
            out.append(ModeMismatch(  # a warning: the accounting is right, only the error is larger
                "algorithm.step", False,
                "algorithm.step 'theorem2' is Zhou & Xiang's per-round step and costs several times the privacy in "
                "privacy.mode 'total': remove algorithm.step, algorithm.rounds and model.clip_c1 to get the "
                "total-budget defaults, or set privacy.mode 'per_round'"))
        model = _get(data, "model") or {}
        basis_kind = _get(data, "basis", "kind") or "pooled"
        if isinstance(model, Mapping) and "clip_c1" in model and "clip_shape" not in model \
                and basis_kind in _FPCA_BASES:
            out.append(ModeMismatch(
                "model.clip_c1", False,
                f"model.clip_c1 = {model['clip_c1']} keeps the sphere clip in privacy.mode 'total' with a "
                f"'{basis_kind}' basis: remove model.clip_c1 for the ellipsoid default (or set "
                "model.clip_shape 'sphere' to keep it on purpose)"))
        if _get(algorithm, "estimator", "kind") == "last":
            out.append(ModeMismatch(
                "algorithm.estimator", False,
                "algorithm.estimator 'last' keeps the noise of the final round in privacy.mode 'total': remove it "
                "for the total-budget default (an average of the released iterates, at no privacy cost)"))
    elif mode == "per_round":
        rounds = algorithm.get("rounds")
        if isinstance(rounds, int) and rounds > _MANY_PER_ROUND_ROUNDS:
            out.append(ModeMismatch(
                "algorithm.rounds", False,
                f"privacy.mode 'per_round' spends privacy.eps in each of the {rounds} rounds (fdp-flower privacy "
                "prints the composed total): set privacy.mode 'total' to make privacy.eps the whole run's budget, "
                f"or lower algorithm.rounds to at most {_MANY_PER_ROUND_ROUNDS}"))
    return out
