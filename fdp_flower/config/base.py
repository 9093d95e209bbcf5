"""Shared pieces of every scenario schema (pydantic v2) and of reading scenario files.

A scenario is nested frozen models, one per concern; variants are discriminated unions on
``kind`` (:func:`tagged_union`).  Unknown fields are errors (``extra="forbid"``) and validators
only raise.  Every problem with a file or an override becomes one :class:`ScenarioError` line
naming the file and the field.  The family schemas live with their algorithms
(``fdp_flower.algorithms.<family>.config``); :mod:`fdp_flower.algorithms.registry` picks one.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Tag, ValidationError

#: The Flower app directory (the repository root, holding ``pyproject.toml`` and ``scenarios/``).
APP_DIR = Path(__file__).resolve().parents[2]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def tagged_union(*models: type[BaseModel], default: str | None = None):
    """A union discriminated on ``kind``; a mapping without ``kind`` takes ``default``.

    Every model must declare ``kind: Literal["..."] = "..."``.
    """
    def kind_of(value):
        if isinstance(value, dict):
            return value.get("kind", default)
        return getattr(value, "kind", None)

    members = tuple(Annotated[m, Tag(m.model_fields["kind"].default)] for m in models)
    return Annotated[Union[members], Discriminator(kind_of)]  # type: ignore[valid-type]



class ScenarioError(ValueError):
    """A scenario file or override that does not validate; the message is one line."""

    def __init__(self, message: str = "") -> None:
        # library messages (YAML marks, echoed input) may hold newlines: keep the error one line
        super().__init__(" ".join(str(message).split()))


def _format_error(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
        parts.append(f"{loc or '<root>'}: {err['msg']}")
    return f"{source}: " + "; ".join(parts)


_UNION_TAGS = {"paper_simulation", "node_files", "client_arrays", "pooled", "fixed", "federated_dp", "provided", "theorem2",
               "constant", "inv_sqrt", "inv", "fdp_admm",
               "geometric", "periodic", "iteration"}


def validate_mapping(model: type[BaseModel], data: Any, source: str):
    """``model.model_validate(data)``; any problem is one :class:`ScenarioError` line naming the fields."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(source, exc)) from None


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {dotted}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with ``a.b=value`` overrides applied (values parsed as YAML)."""
    import copy

    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else [_split_override(o) for o in overrides]
    for key, value in items:
        _set_path(data, key, value)
    return data


def _split_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ScenarioError(f"override {text!r} must look like section.field=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def read_yaml_file(path: str | Path, what: str = "scenario") -> dict[str, Any]:
    """The mapping in a YAML file; a missing file or invalid YAML is a one-line :class:`ScenarioError`."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: {what} file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None
    return data


def scenario_to_yaml(scenario: BaseModel) -> str:
    """The fully resolved scenario (defaults filled in) as YAML."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)


def resolve_scenario_path(path: str | Path, search_dirs: list[Path] | None = None) -> Path:
    """An absolute path, or the first of cwd / ``search_dirs`` holding ``path``."""
    path = Path(path)
    if path.is_absolute():
        return path
    for base in [Path.cwd(), *(search_dirs or [])]:
        if (base / path).is_file():
            return base / path
    return path


def parse_override_string(text: str) -> list[str]:
    """``"a.b=1; c.d=x"`` -> ``["a.b=1", "c.d=x"]`` (the Flower run-config form of --set)."""
    return [part.strip() for part in text.split(";") if part.strip()]




def run_config_scenario_path(run_config: dict[str, Any], app_dir: Path = APP_DIR) -> Path:
    """The scenario file named by a Flower run config (key ``scenario``).

    An absolute path is taken as is.  A relative path names a file of the app bundle (``app_dir``: the
    directory the SuperLink unpacked the FAB into, the repository root when run from source) and
    nothing else: a file of the same name in the SuperLink's working directory is never read.
    """
    if "scenario" not in run_config:
        raise ScenarioError("run config: missing key 'scenario' (path to a scenario YAML file)")
    path = Path(str(run_config["scenario"])).expanduser()
    if path.is_absolute():
        return path
    if not (app_dir / path).is_file():
        raise ScenarioError(f"run config: scenario {str(path)!r} is not in the app bundle ({app_dir}); "
                            "give an absolute path for a file outside the app")
    return app_dir / path


#: ``[tool.flwr.app.config]`` keys that set one scenario field (``flwr run --run-config "eps=0.8"``),
#: per algorithm family: key -> (type, {family: dotted scenario field}).  A key whose value is
#: :data:`RUN_CONFIG_UNSET` (the pyproject default) leaves the scenario's value.
RUN_CONFIG_FIELDS: dict[str, tuple[type, dict[str, str]]] = {
    "num-server-rounds": (int, {"fdp_admm": "algorithm.rounds", "gradient_admm": "algorithm.rounds",
                                "p2p": "algorithm.steps"}),
    "eps": (float, {"fdp_admm": "privacy.eps", "gradient_admm": "privacy.eps", "p2p": "privacy.eps"}),
    "delta": (float, {"fdp_admm": "privacy.delta", "gradient_admm": "privacy.delta", "p2p": "privacy.delta"}),
    "tau": (float, {"fdp_admm": "model.loss.tau"}),
    "lam": (float, {"fdp_admm": "model.penalty.lam", "gradient_admm": "model.lam", "p2p": "data.lam"}),
    "seed": (int, {"fdp_admm": "seed", "gradient_admm": "seed", "p2p": "seed"}),
    "num-clients": (int, {"fdp_admm": "federation.num_clients", "gradient_admm": "federation.num_clients",
                          "p2p": "topology.num_nodes"}),
}
#: The value of a typed key that means "the scenario's value" (every mapped field is >= 0).
RUN_CONFIG_UNSET = -1


def run_config_field_overrides(run_config: dict[str, Any], family: str) -> dict[str, Any]:
    """The scenario fields set by the typed keys of a Flower run config (:data:`RUN_CONFIG_FIELDS`):
    ``{"privacy.eps": 0.8, ...}``, only for keys whose value is not :data:`RUN_CONFIG_UNSET`.

    A value of the wrong type, or a key that has no field in ``family``, is a one-line
    :class:`ScenarioError`.  Range checks are the scenario schema's.
    """
    fields: dict[str, Any] = {}
    for key, (kind, paths) in RUN_CONFIG_FIELDS.items():
        value = run_config.get(key, RUN_CONFIG_UNSET)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"run config: {key} = {value!r} must be a number ({RUN_CONFIG_UNSET}: the "
                                "scenario's value)")
        if value == RUN_CONFIG_UNSET:
            continue
        if kind is int and value != int(value):
            raise ScenarioError(f"run config: {key} = {value!r} must be an integer")
        if family not in paths:
            raise ScenarioError(f"run config: {key} has no meaning for {family} scenarios; leave it at "
                                f"{RUN_CONFIG_UNSET} (set the scenario field with `overrides`)")
        fields[paths[family]] = kind(value)
    return fields


def run_config_overrides(run_config: dict[str, Any], family: str) -> dict[str, Any]:
    """Every scenario override of a Flower run config: the free-form ``overrides`` string, then the
    typed keys; a field set by both is a :class:`ScenarioError` (two values, no silent winner)."""
    free = dict(_split_override(o) for o in parse_override_string(str(run_config.get("overrides", "") or "")))
    typed = run_config_field_overrides(run_config, family)
    both = sorted(set(free) & set(typed))
    if both:
        raise ScenarioError(f"run config: {', '.join(both)} set both by a typed key and in `overrides`; "
                            "set it once")
    return {**free, **typed}
