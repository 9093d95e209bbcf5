"""The registry of algorithm families: one :class:`Family` record each, read by every dispatcher.

A family is a folder ``fdp_flower/algorithms/<family>/`` holding its scenario schema, its protocol
(a server state machine and a site function, :mod:`fdp_flower.algorithms.protocol`) and its record,
``FAMILY`` in the folder's ``__init__.py``.  The record names everything a dispatcher needs: the
``algorithm.kind`` values it owns, its scenario schema, the typed Flower run-config keys it maps, and
-- as ``"module:attribute"`` strings, imported only when used, since they live in higher layers --
its in-process runner, its Flower ServerApp runner and ClientApp handler, its results reader, its
plots and its audit protocol.  :data:`FAMILY_MODULES` lists the families; a module named in the
environment variable ``FDP_FLOWER_FAMILIES`` (comma-separated) is registered too, which is how a
family outside the package (e.g. a test's) runs in Flower's ServerApp and ClientApp processes.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fdp_flower.config.base import (
    ScenarioError,
    apply_overrides,
    read_yaml_file,
    run_config_overrides,
    run_config_scenario_path,
    validate_mapping,
)

#: the families of the package, by the module that holds each one's ``FAMILY`` record
FAMILY_MODULES = ("fdp_flower.algorithms.fdp_admm", "fdp_flower.algorithms.p2p", "fdp_flower.algorithms.gradient_admm")
#: environment variable naming more family modules (comma-separated)
EXTRA_FAMILIES_ENV = "FDP_FLOWER_FAMILIES"


def resolve(reference: str):
    """The object a ``"module:attribute"`` reference names (imported now)."""
    module, _, attribute = reference.partition(":")
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Family:
    """One algorithm family, as every dispatcher sees it.

    Attributes
    ----------
    name : the family's name (its folder under ``fdp_flower/algorithms``)
    kinds : the ``algorithm.kind`` values of its scenarios; the first is the default kind
    schema : ``"module:Class"`` of its scenario model (pydantic, frozen)
    run_config : typed Flower run-config key -> dotted scenario field (``num-server-rounds``, ``eps``, ...)
    server : ``"module:function"``: ``f(scenario) -> ServerProtocol``, the server protocol of a run on
        simulated data (the generic drivers below use it; a family with its own drivers may leave it None)
    site : ``"module:function"``: ``f(requests, scenario, noise) -> [SiteRelease or Exception]``, the site
        function answering one round's requests of simulated clients (the generic drivers use it)
    run_inprocess : ``"module:function"``: ``f(args) -> exit code``, ``fdp-flower run`` in process (the CLI's
        arguments), writing the results directory (default: the generic runner of ``server`` and ``site``)
    server_app : ``"module:function"``: ``f(grid, context, scenario)``, the ServerApp's runner (default:
        the generic one, :class:`~fdp_flower.strategies.protocol.ProtocolStrategy` on ``server``)
    client_train : ``"module:function"``: ``f(message, context, scenario) -> reply``, the ClientApp's
        handler (default: the generic one on ``site``)
    read_results : ``"module:function"``: ``f(directory, scenario, summary, privacy, ledger) -> model``
    plots : ``"module:function"``: ``f(directory, scenario, history, privacy curve, title) -> figure``, or None
    audit : ``"module:Class"``: ``Class(scenario, party)``, the audited protocol, or None
    party : what one party is called in reports ("client" or "node")
    clients_field : the dotted scenario field holding the number of clients (graph nodes)
    extra : further hooks; ``client_query``: ``"module:function"``, ``f(message, context, scenario) -> reply``, the
        ClientApp's answer to the setup query of a run on node files (default: FDP-ADMM's)
    """

    name: str
    kinds: tuple[str, ...]
    schema: str
    run_config: Mapping[str, str]
    server: str | None = None
    site: str | None = None
    run_inprocess: str = "fdp_flower.cli.run:run_protocol_inprocess"
    server_app: str = "fdp_flower.strategies.runner:run_protocol_federation"
    client_train: str = "fdp_flower.clients.worker:handle_protocol_train"
    read_results: str = "fdp_flower.outputs.models:read_protocol_results"
    audit: str | None = None
    plots: str | None = None
    party: str = "client"
    clients_field: str = "federation.num_clients"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def scenario_model(self):
        return resolve(self.schema)

    def parse(self, data: dict[str, Any], source: str = "<scenario>"):
        """Validate a mapping with the family's schema; one-line :class:`ScenarioError`."""
        return validate_mapping(self.scenario_model(), data, source)

    def num_clients(self, scenario) -> int:
        """The number of clients (graph nodes) of one of its scenarios."""
        value = scenario
        for part in self.clients_field.split("."):
            value = getattr(value, part)
        return int(value)


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` (a kind owned by another family is an error)."""
    for other in _FAMILIES.values():
        clash = set(other.kinds) & set(family.kinds)
        if other.name != family.name and clash:
            raise ValueError(f"algorithm kinds {sorted(clash)} belong to family {other.name!r} already")
    _FAMILIES[family.name] = family
    return family


def _load() -> dict[str, Family]:
    extra = [m.strip() for m in os.environ.get(EXTRA_FAMILIES_ENV, "").split(",") if m.strip()]
    for module in (*FAMILY_MODULES, *extra):
        if not any(f.extra.get("module") == module for f in _FAMILIES.values()):
            record = importlib.import_module(module).FAMILY
            register(Family(**{**record.__dict__, "extra": {**record.extra, "module": module}}))
    return _FAMILIES


def families() -> list[Family]:
    """Every registered family, in registration order."""
    return list(_load().values())


def family(kind: str) -> Family:
    """The family of an ``algorithm.kind``; a one-line :class:`ScenarioError` for an unknown kind."""
    for record in _load().values():
        if kind in record.kinds:
            return record
    raise ScenarioError(f"algorithm.kind: unknown algorithm {kind!r}; choose one of {', '.join(algorithm_kinds())}")


def algorithm_kinds() -> tuple[str, ...]:
    return tuple(k for record in _load().values() for k in record.kinds)


def family_of(kind: str) -> str:
    """The name of the family of an ``algorithm.kind``."""
    return family(kind).name


def _kind_of(data: Any) -> str:
    algorithm = data.get("algorithm") if isinstance(data, dict) else None
    default = next(iter(_load().values())).kinds[0]
    return str(algorithm.get("kind", default)) if isinstance(algorithm, dict) else default


def parse_any_scenario(data: dict[str, Any], source: str = "<scenario>"):
    """Validate a mapping with the schema of its algorithm family; one-line :class:`ScenarioError`."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    try:
        record = family(_kind_of(data))
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    return record.parse(data, source)


def load_any_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None):
    """Read a YAML scenario of any family, apply ``a.b=value`` overrides, validate."""
    data = read_yaml_file(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_any_scenario(data, str(path))


def any_scenario_from_run_config(run_config: dict[str, Any]):
    """The scenario named by a Flower run config: the file ``scenario`` (of the app bundle unless
    absolute), the free-form ``overrides`` and the typed keys (``num-server-rounds``, ``eps``, ...:
    each family's :attr:`Family.run_config`)."""
    path = run_config_scenario_path(run_config)
    data = read_yaml_file(path)
    try:
        record = family(_kind_of(data))
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    overrides = run_config_overrides(run_config, record.name, record.run_config)
    return parse_any_scenario(apply_overrides(data, overrides) if overrides else data, str(path))
