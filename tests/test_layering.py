"""Imports run one way: CLI → runs → pipelines → transforms → the Beam-free core.

Read with `ast` from the installed package's sources, without importing the
modules. A layer may import its own and any lower layer, never a higher one,
whether at module level or inside a function; `if TYPE_CHECKING:` blocks are
annotations, not imports, and are skipped. Beam is imported at module level
only by the runs, the pipelines and the transforms: everything else (the
core, the CLI, the notebook API) loads it only inside the functions that run
a pipeline, so `mpg sql` and `import fleet_goodput` never pay for it.
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
CLI, RUNS, PIPELINES, TRANSFORMS, CORE = "CLI", "runs", "pipelines", "transforms", "core"
RANK = {CORE: 0, TRANSFORMS: 1, PIPELINES: 2, RUNS: 3, CLI: 4}
# The runs: each plans, runs and commits a pipeline (batch, the local stream, the Flex Template launch).
RUN_MODULES = {"fleet_goodput.batch", "fleet_goodput.stream_run", "fleet_goodput.launcher"}
# The front ends: the package itself re-exports the notebook API.
CLI_MODULES = {"fleet_goodput", "fleet_goodput.api", "fleet_goodput.cli"}
# The only modules outside pipelines/ and transforms/ that import Beam when imported.
BEAM_AT_IMPORT = RUN_MODULES


def layer_of(module: str) -> str:
    if module in CLI_MODULES or module.startswith("fleet_goodput.commands"):
        return CLI
    if module in RUN_MODULES:
        return RUNS
    if module.startswith("fleet_goodput.pipelines"):
        return PIPELINES
    if module.startswith("fleet_goodput.transforms"):
        return TRANSFORMS
    return CORE


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
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


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
            found.extend((f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base, at_import)
                         for alias in node.names)
        inside_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, at_import and not inside_function)

    visit(ast.parse(SOURCES[module].read_text(), str(SOURCES[module])), True)
    return found


def test_every_layer_has_its_modules():
    layers = {layer_of(module) for module in SOURCES}
    assert layers == set(RANK)
    assert RUN_MODULES | CLI_MODULES <= set(SOURCES)


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_imports_point_down_the_layers(module):
    layer = layer_of(module)
    upward = sorted({f"{name} ({layer_of(name)})" for name, _ in imports(module)
                     if (name == PACKAGE or name.startswith(f"{PACKAGE}.")) and RANK[layer_of(name)] > RANK[layer]})
    assert upward == [], f"{module} ({layer}) imports a higher layer"


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_beam_loads_only_with_the_runs_pipelines_and_transforms(module):
    at_import = sorted({name for name, top in imports(module)
                        if top and (name == "apache_beam" or name.startswith("apache_beam."))})
    if layer_of(module) in (PIPELINES, TRANSFORMS) or module in BEAM_AT_IMPORT:
        return
    assert at_import == [], f"{module} imports Beam when it is imported"


@pytest.mark.parametrize("module", sorted(BEAM_AT_IMPORT))
def test_the_modules_allowed_beam_at_import_do_import_it(module):
    """Keeps BEAM_AT_IMPORT exact: a module that stops importing Beam leaves the list."""
    assert any(top and name.startswith("apache_beam") for name, top in imports(module))


def test_the_recorder_loads_neither_beam_nor_duckdb():
    """Training code imports fleet_goodput.recorder: it must cost the job no more than fastavro."""
    heavy = {"apache_beam", "duckdb", "deltalake", "great_expectations", "polars", "pandas", "pyarrow"}
    code = f"import sys, fleet_goodput.recorder; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
