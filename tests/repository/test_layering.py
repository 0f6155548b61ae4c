"""Imports run one way, down the layers the package's folders show.

    CLI (fleet_goodput, api, cli, commands/)
    → runs/ (plan, run and commit a pipeline)
    → pipelines/
    → transforms/, and the applications: importers/, quality/, report/, simulator/
    → telemetry/ (reading and writing telemetry) and store/ (the output store), which do not import each other
    → core/ (events, windows, timelines, key state, settings) and the top-level basics (console, exits,
      faults, quoting, safe_text)

Read with `ast` from the installed package's sources, without importing the
modules. A layer may import its own and any lower layer, never a higher one
nor a sibling, whether at module level or inside a function; `if
TYPE_CHECKING:` blocks are annotations, not imports, and are skipped. Beam is
imported at module level only by the runs, the pipelines and the transforms:
everything else (the core, the CLI, the notebook API) loads it only inside
the functions that run a pipeline, so `mpg sql` and `import fleet_goodput`
never pay for it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "fleet_goodput"
CLI, RUNS, PIPELINES, TRANSFORMS, APPLICATIONS = "CLI", "runs", "pipelines", "transforms", "applications"
TELEMETRY, STORE, CORE = "telemetry", "store", "core"
RANK = {CORE: 0, TELEMETRY: 1, STORE: 1, TRANSFORMS: 2, APPLICATIONS: 2, PIPELINES: 3, RUNS: 4, CLI: 5}
# The front ends: the package itself re-exports the notebook API.
CLI_MODULES = {"fleet_goodput", "fleet_goodput.api", "fleet_goodput.cli"}
# The basics every layer may use: how commands speak and exit, and how text is quoted and shown.
BASICS = {f"fleet_goodput.{name}" for name in ("console", "exits", "faults", "quoting", "safe_text")}
FOLDERS = {
    "commands": CLI,
    "runs": RUNS,
    "pipelines": PIPELINES,
    "transforms": TRANSFORMS,
    "importers": APPLICATIONS,
    "monitoring": APPLICATIONS,
    "quality": APPLICATIONS,
    "report": APPLICATIONS,
    "simulator": APPLICATIONS,
    "telemetry": TELEMETRY,
    "store": STORE,
    "core": CORE,
    # packages of data, not code
    "schemas": CORE,
    "sql": CORE,
    "configs": CORE,
    "docs": CORE,
}


# The only modules outside pipelines/ and transforms/ that import Beam when imported: the runs of a pipeline.
BEAM_AT_IMPORT = {
    f"fleet_goodput.runs.{name}" for name in ("inputs", "compute", "beam_flags", "stream_run", "launcher")
}


def layer_of(module: str) -> str:
    if module in CLI_MODULES:
        return CLI
    if module in BASICS:
        return CORE
    folder = module.split(".")[1]
    return FOLDERS[folder]


def _package_sources() -> dict[str, Path]:
    """Module name → source file, for every module of the installed package.

    pipelines/ and transforms/ install as fleet_goodput.* through setuptools
    `package-dir`; an editable install maps them with a finder of its own that
    the package's __path__ does not show, so they are looked up by name too.
    """
    sources = {}
    for name in (PACKAGE, f"{PACKAGE}.pipelines", f"{PACKAGE}.transforms"):
        spec = importlib.util.find_spec(name)
        sources[name] = Path(spec.origin)
        for info in pkgutil.walk_packages(spec.submodule_search_locations, f"{name}."):
            origin = info.module_finder.find_spec(info.name).origin
            if origin.endswith(".py"):
                sources[info.name] = Path(origin)
    return sources


SOURCES = _package_sources()


@functools.cache
def _is_module(name: str) -> bool:
    """Whether `name` is one of the package's modules, its packages of data (schemas, sql, configs) included."""
    if name in SOURCES:
        return True
    parent = name.rpartition(".")[0]
    if not name.startswith(f"{PACKAGE}.") or SOURCES.get(parent, Path("__init__.py")).name != "__init__.py":
        return False  # another project's (only its top-level name matters here), or a name in a module
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import that runs, resolved to a module where it names one."""
    found = []

    def visit(node: ast.AST, at_import: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child, at_import)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, at_import) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if SOURCES[module].name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}".rstrip(".")
            # `from fleet_goodput import schemas` imports the module fleet_goodput.schemas.
            found.extend(
                (f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base, at_import)
                for alias in node.names
            )
        inside_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, at_import and not inside_function)

    visit(ast.parse(SOURCES[module].read_text(), str(SOURCES[module])), True)
    return found


def test_every_module_is_in_a_layer_folder():
    """Only the front ends and the basics sit at the top; every other module is in its layer's folder."""
    top = {module for module in SOURCES if module.count(".") == 1 and module.rpartition(".")[2] not in FOLDERS}
    assert top == (CLI_MODULES | BASICS) - {PACKAGE}
    assert {layer_of(module) for module in SOURCES} == set(RANK)


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_point_down_the_layers(module):
    layer = layer_of(module)
    wrong = sorted(
        {
            f"{name} ({layer_of(name)})"
            for name, _ in imports(module)
            if (name == PACKAGE or name.startswith(f"{PACKAGE}."))
            and layer_of(name) != layer
            and RANK[layer_of(name)] >= RANK[layer]
        }
    )
    assert wrong == [], f"{module} ({layer}) imports a higher or a sibling layer"


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_beam_loads_only_with_the_runs_pipelines_and_transforms(module):
    at_import = sorted(
        {name for name, top in imports(module) if top and (name == "apache_beam" or name.startswith("apache_beam."))}
    )
    if layer_of(module) in (PIPELINES, TRANSFORMS) or module in BEAM_AT_IMPORT:
        return
    assert at_import == [], f"{module} imports Beam when it is imported"


@pytest.mark.parametrize("module", sorted(BEAM_AT_IMPORT))
def test_the_modules_allowed_beam_at_import_do_import_it(module):
    """Keeps BEAM_AT_IMPORT exact: a module that stops importing Beam leaves the list."""
    assert any(top and name.startswith("apache_beam") for name, top in imports(module))


def test_the_recorder_loads_neither_beam_nor_duckdb():
    """Training code imports fleet_goodput.telemetry.recorder: it must cost the job no more than fastavro."""
    heavy = {"apache_beam", "duckdb", "deltalake", "great_expectations", "polars", "pandas", "pyarrow"}
    code = f"import sys, fleet_goodput.telemetry.recorder; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
