"""One loader for every scenario file: the algorithm kind picks the schema.

fdp-flower has three families of runs, each with its own pydantic schema:
server-coordinated FDP-ADMM (:class:`fdp_flower.algorithms.fdp_admm.config.Scenario`), peer-to-peer
(:class:`fdp_flower.algorithms.p2p.config.P2PScenario`) and gradient-perturbation ADMM
(:class:`fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario`).  A file names its
algorithm in ``algorithm.kind`` (default: ``fdp_admm``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.config.base import (
    ScenarioError,
    apply_overrides,
    read_yaml_file,
    run_config_overrides,
    run_config_scenario_path,
    validate_mapping,
)

P2P_KINDS = ("zcdp_nfl", "dp_nfl", "zcdp_grad_nfl", "decentralized_admm", "pr_admm", "p_admm")
GRADIENT_KINDS = ("dp_admm", "dp_acc_admm")
ALGORITHM_KINDS = ("fdp_admm", *P2P_KINDS, *GRADIENT_KINDS)


def family_of(kind: str) -> str:
    """``fdp_admm``, ``p2p`` or ``gradient_admm``."""
    if kind == "fdp_admm":
        return "fdp_admm"
    if kind in P2P_KINDS:
        return "p2p"
    if kind in GRADIENT_KINDS:
        return "gradient_admm"
    raise ScenarioError(f"algorithm.kind: unknown algorithm {kind!r}; choose one of {', '.join(ALGORITHM_KINDS)}")


def parse_any_scenario(data: dict[str, Any], source: str = "<scenario>"):
    """Validate a mapping with the schema of its algorithm family; one-line :class:`ScenarioError`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    algorithm = data.get("algorithm") or {}
    kind = algorithm.get("kind", "fdp_admm") if isinstance(algorithm, dict) else "fdp_admm"
    try:
        family = family_of(str(kind))
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    if family == "fdp_admm":
        return parse_scenario(data, source)
    if family == "p2p":
        from fdp_flower.algorithms.p2p.config import parse_p2p_scenario

        return parse_p2p_scenario(data, source)
    from fdp_flower.algorithms.gradient_admm.config import GradientADMMScenario

    return validate_mapping(GradientADMMScenario, data, source)


def load_any_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None):
    """Read a YAML scenario of any family, apply ``a.b=value`` overrides, validate."""
    data = read_yaml_file(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_any_scenario(data, str(path))


def any_scenario_from_run_config(run_config: dict[str, Any]):
    """The scenario named by a Flower run config: the file ``scenario`` (of the app bundle unless
    absolute), the free-form ``overrides`` and the typed keys (``num-server-rounds``, ``eps``, ...;
    :data:`fdp_flower.config.base.RUN_CONFIG_FIELDS`)."""
    path = run_config_scenario_path(run_config)
    data = read_yaml_file(path)
    algorithm = data.get("algorithm") if isinstance(data, dict) else None
    kind = algorithm.get("kind", "fdp_admm") if isinstance(algorithm, dict) else "fdp_admm"
    try:
        family = family_of(str(kind))
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    overrides = run_config_overrides(run_config, family)
    return parse_any_scenario(apply_overrides(data, overrides) if overrides else data, str(path))
