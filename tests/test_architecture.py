"""The package layout keeps its dependency direction (docs/architecture.md).

Layers, lowest first: shared schema and math (config, core), privacy, functional data and
data sets, algorithm families, run outputs, engines and the wire format, the Flower adapters
(clients, strategies), entry points (cli, server_app, client_app, api).  A module imports only
from its own layer or below; flwr is imported only by the Flower adapters and entry modules;
the client side never imports the server side.  Checked on the source (every import statement,
including the ones inside functions) and, for flwr, on what a fresh interpreter really loads.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fdp_flower"

LAYERS = {  # top-level subpackage or module of fdp_flower -> rank
    "__init__": 0, "config": 0, "core": 0,
    "privacy": 1,
    "functional": 2, "data": 2,
    "algorithms": 3,
    "outputs": 4, "inference": 4,
    "engines": 5, "wire": 5,
    "clients": 6, "strategies": 6,
    "cli": 7, "server_app": 8, "client_app": 8, "api": 8, "estimator": 8,
}
FLWR_ALLOWED = {"wire", "clients", "strategies", "server_app", "client_app"}
#: the package root re-exports the Python API lazily (module __getattr__), its one upward import
ROOT_REEXPORTS = {"fdp_flower.api", "fdp_flower.estimator"}
#: pure layers: a fresh interpreter that imports all of them must not load flwr
PURE = ("config", "core", "privacy", "functional", "data", "algorithms", "outputs", "inference")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"] or ["__init__"]
        out["fdp_flower." + ".".join(parts) if parts != ["__init__"] else "fdp_flower"] = path
    return out


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, module: str) -> list[str]:
    """Every module named by an import statement of ``path`` (absolute names)."""
    names = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]  # `from pkg import module`
    return names


MODULES = _modules()


def test_every_top_level_entry_has_a_layer():
    tops = {_top(m) for m in MODULES}
    assert tops <= set(LAYERS), f"new top-level entries without a layer: {sorted(tops - set(LAYERS))}"
    top_files = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top_files) <= 5, f"the top level holds only entry modules: {top_files}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    rank = LAYERS[_top(module)]
    allowed = ROOT_REEXPORTS if module == "fdp_flower" else set()
    upward = sorted({name for name in _imports(MODULES[module], module)
                     if name.startswith("fdp_flower.") and name in MODULES and LAYERS[_top(name)] > rank
                     and name not in allowed})
    assert not upward, f"{module} (layer {_top(module)}) imports from higher layers: {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_flwr_only_in_the_flower_adapters(module):
    if _top(module) in FLWR_ALLOWED:
        return
    flwr = [name for name in _imports(MODULES[module], module) if name == "flwr" or name.startswith("flwr.")]
    assert not flwr, f"{module} imports {flwr}: only {sorted(FLWR_ALLOWED)} may import flwr"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _top(m) == "clients" or m == "fdp_flower.client_app"))
def test_client_side_never_imports_the_server_side(module):
    server = [name for name in _imports(MODULES[module], module)
              if name.startswith(("fdp_flower.strategies", "fdp_flower.server_app"))]
    assert not server, f"{module} imports server-side modules {server}"


def test_pure_layers_do_not_load_flwr_at_runtime():
    pure = [m for m in MODULES if _top(m) in PURE]
    code = ("import importlib, sys\n"
            f"for m in {pure!r}:\n    importlib.import_module(m)\n"
            "loaded = sorted(m for m in sys.modules if m == 'flwr' or m.startswith('flwr.'))\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_client_app_does_not_load_the_server_side_at_runtime():
    code = ("import sys, fdp_flower.client_app\n"
            "server = sorted(m for m in sys.modules if m.startswith(('fdp_flower.strategies', 'fdp_flower.server_app')))\n"
            "assert not server, server\n")
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], check=True, cwd=PACKAGE.parent)


def test_importing_the_package_loads_nothing_until_the_api_is_used():
    code = ("import sys, fdp_flower\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('fdp_flower.') or m in ('numpy', 'pydantic'))\n"
            "assert not loaded, loaded\n"
            "assert callable(fdp_flower.fit) and 'fdp_flower.api' in sys.modules\n"
            "assert 'flwr' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


#: a results directory's file names, spelled only by :mod:`fdp_flower.outputs.layout` (its one layout)
RESULTS_FILE_NAMES = ("scenario.yaml", "summary.json", "history.csv", "ledger.csv", "failures.csv", "final.npz",
                      "iterates.npz", "checkpoint.npz", "releases-requested.jsonl", "convergence.png", "model.json",
                      "model.npz")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "fdp_flower.outputs.layout"))
def test_results_file_names_come_from_the_one_layout(module):
    """Writers and readers name a results directory's files through ``ResultsDir``: a file name spelled as
    a string literal anywhere else (docstrings and messages aside) is a second layout."""
    tree = ast.parse(MODULES[module].read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    in_messages = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    spelled = sorted({node.value for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and node.value in RESULTS_FILE_NAMES
                      and id(node) not in docstrings and id(node) not in in_messages})
    assert not spelled, f"{module} spells {spelled}: name them through fdp_flower.outputs.layout.ResultsDir"


#: Flower's app-facing API (the Message API and the legacy records SecAgg+ speaks) comes through the shims of
#: ``fdp_flower.wire`` (``flwr.py``, ``flwr_server.py``, ``flwr_secagg.py``, ``flwr_secagg_server.py``), which
#: import it once with Flower's import-time warnings filtered
FLWR_APP_API = ("flwr.app", "flwr.serverapp", "flwr.common", "flwr.server", "flwr.compat")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("fdp_flower.wire")))
def test_flowers_app_api_comes_through_the_one_shim(module):
    direct = sorted({name for name in _imports(MODULES[module], module)
                     if any(name == api or name.startswith(api + ".") for api in FLWR_APP_API)})
    assert not direct, f"{module} imports {direct} directly: import them from fdp_flower.wire.flwr (or its siblings)"
