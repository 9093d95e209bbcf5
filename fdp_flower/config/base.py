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
    tags = union_tags()
    parts = []
    for err in exc.errors():
        if err["type"] == RENAMED_ERROR:  # names its own fields (:func:`refuse_renamed`)
            parts.append(err["msg"])
            continue
        loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in tags))
        parts.append(f"{loc or '<root>'}: {err['msg']}")
    return f"{source}: " + "; ".join(parts)


#: The pydantic error type of a renamed field (:func:`refuse_renamed`).
RENAMED_ERROR = "renamed"


def refuse_renamed(data: Any, renamed: dict[str, str]) -> None:
    """Refuse a scenario mapping that still uses an old field name: ``renamed`` maps each old dotted
    field to its new one, and the first old field ``data`` holds (:func:`renamed_field`) raises one error
    line ``<old>: renamed to <new>`` (for a ``mode="before"`` model validator of a scenario schema, so a
    run-config override or a nested validation is refused the same way as the file)."""
    from pydantic_core import PydanticCustomError

    moved = renamed_field(data, renamed)
    if moved is not None:
        raise PydanticCustomError(RENAMED_ERROR, "{old}: renamed to {new}", {"old": moved[0], "new": moved[1]})


def union_tags() -> set[str]:
    """The tags of every tagged union of the scenario schemas: the ``kind`` default of each model of the
    package (pydantic puts the tag of the member a value was checked against into an error's location;
    :func:`_format_error` leaves it out).  Read from the models, so a new variant needs no list here."""
    tags, stack = set(), list(BaseModel.__subclasses__())
    while stack:
        model = stack.pop()
        stack += model.__subclasses__()
        kind = getattr(model, "model_fields", {}).get("kind")
        if model.__module__.startswith("fdp_flower") and kind is not None and isinstance(kind.default, str):
            tags.add(kind.default)
    return tags


def renamed_field(data: Any, renames: dict[str, str]) -> tuple[str, str] | None:
    """The first ``(old, new)`` of ``renames`` (dotted field of an earlier schema -> its new place) whose old
    field ``data`` (a scenario mapping) still sets, or None."""
    for old, new in renames.items():
        node = data
        for key in old.split("."):
            node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
            if node is _MISSING:
                break
        else:
            return old, new
    return None


_MISSING = object()


def validate_mapping(model: type[BaseModel], data: Any, source: str):
    """``model.model_validate(data)``; any problem is one :class:`ScenarioError` line naming the fields
    (a renamed field, refused by the schema's :func:`refuse_renamed`, as ``<old>: renamed to <new>``)."""
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (YAML 1.2 forbids it; PyYAML
    silently keeps the last one)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base constructor reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml_file(path: str | Path, what: str = "scenario") -> dict[str, Any]:
    """The mapping in a YAML file; a missing, empty, non-text or non-mapping file, invalid YAML or a
    duplicate key is a one-line :class:`ScenarioError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: {what} file not found")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # a byte-order mark, as editors save it, is fine
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a UTF-8 text file (byte {exc.start}: {exc.reason}); save the "
                            f"{what} as UTF-8 YAML") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the {what} file ({exc.strerror or exc})") from None
    if "\x00" in text:
        raise ScenarioError(f"{path}: not a text file (it holds NUL bytes); save the {what} as UTF-8 YAML")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        raise ScenarioError(f"{path}: the {what} file is empty (write at least one section, e.g. "
                            f"'name: my-run'; see scenarios/)")
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a {what} must be a mapping of sections, got a {type(data).__name__}")
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


#: The typed ``[tool.flwr.app.config]`` keys (``flwr run --run-config "eps=0.8"``) and their types; each
#: family maps them to its scenario fields (:attr:`fdp_flower.algorithms.registry.Family.run_config`).  A
#: key whose value is :data:`RUN_CONFIG_UNSET` (the pyproject default) leaves the scenario's value.
RUN_CONFIG_TYPES: dict[str, type] = {"num-server-rounds": int, "eps": float, "delta": float, "tau": float,
                                     "lam": float, "seed": int, "num-clients": int}
#: The value of a typed key that means "the scenario's value" (every mapped field is >= 0).
RUN_CONFIG_UNSET = -1


def run_config_field_overrides(run_config: dict[str, Any], family: str, fields: dict[str, str]) -> dict[str, Any]:
    """The scenario fields set by the typed keys of a Flower run config: ``{"privacy.eps": 0.8, ...}``,
    only for keys whose value is not :data:`RUN_CONFIG_UNSET`; ``fields`` maps each key to its dotted
    field in ``family``'s scenarios.

    A value of the wrong type, or a key that has no field in ``family``, is a one-line
    :class:`ScenarioError`.  Range checks are the scenario schema's.
    """
    out: dict[str, Any] = {}
    for key, kind in RUN_CONFIG_TYPES.items():
        value = run_config.get(key, RUN_CONFIG_UNSET)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"run config: {key} = {value!r} must be a number ({RUN_CONFIG_UNSET}: the "
                                "scenario's value)")
        if value == RUN_CONFIG_UNSET:
            continue
        if kind is int and value != int(value):
            raise ScenarioError(f"run config: {key} = {value!r} must be an integer")
        if key not in fields:
            raise ScenarioError(f"run config: {key} has no meaning for {family} scenarios; leave it at "
                                f"{RUN_CONFIG_UNSET} (set the scenario field with `overrides`)")
        out[fields[key]] = kind(value)
    return out


def run_config_overrides(run_config: dict[str, Any], family: str, fields: dict[str, str]) -> dict[str, Any]:
    """Every scenario override of a Flower run config: the free-form ``overrides`` string, then the
    typed keys (``fields``: :func:`run_config_field_overrides`); a field set by both is a
    :class:`ScenarioError` (two values, no silent winner)."""
    free = dict(_split_override(o) for o in parse_override_string(str(run_config.get("overrides", "") or "")))
    typed = run_config_field_overrides(run_config, family, fields)
    both = sorted(set(free) & set(typed))
    if both:
        raise ScenarioError(f"run config: {', '.join(both)} set both by a typed key and in `overrides`; "
                            "set it once")
    return {**free, **typed}
