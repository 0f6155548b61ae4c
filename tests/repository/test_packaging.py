"""What the Dataflow image installs: only what the launcher and the workers import, pinned like constraints.txt;
and what a wheel carries for a pip-installed user: the metric's specification that every report links."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]

# Installed for the views, the checks, the report and the importers, which
# run where an output is read, never on a Dataflow worker or the launcher.
NOT_ON_WORKERS = ("duckdb", "great_expectations", "scipy", "tqdm", "jinja2", "mistune")
# What the launcher and the workers load: the launcher module (whose CommitRun
# step runs on a worker), both pipelines and every transform.
WORKER_MODULES = (
    "fleet_goodput.runs.launcher",
    "fleet_goodput.pipelines.goodput",
    "fleet_goodput.pipelines.streaming",
    "fleet_goodput.transforms.read",
    "fleet_goodput.transforms.sessionize",
    "fleet_goodput.transforms.goodput",
    "fleet_goodput.transforms.write",
    "fleet_goodput.transforms.pubsub",
    "fleet_goodput.transforms.stream_sessionize",
)


def pins(path: Path) -> dict[str, str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, version in (line.split("==") for line in lines if line and not line.startswith("#"))
    }


def test_the_launcher_and_the_workers_import_without_the_packages_they_do_not_get():
    # A None in sys.modules makes `import X` fail as if X were not installed.
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in NOT_ON_WORKERS)
    code = f"import sys; {blocked}; import {', '.join(WORKER_MODULES)}"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_worker_requirements_leave_out_what_workers_never_use():
    workers = pins(ROOT / "requirements-dataflow.txt")
    for name in (
        "apache-beam",
        "pyarrow",
        "fastavro",
        "cramjam",
        "lz4",
        "polars",
        "deltalake",
        "pyyaml",
        "google-cloud-storage",
    ):
        assert name in workers, name
    for name in NOT_ON_WORKERS + ("great-expectations", "pandas"):
        assert re.sub(r"[-_.]+", "-", name) not in workers, name


def test_the_worker_pins_agree_with_the_constraints():
    workers, everything = pins(ROOT / "requirements-dataflow.txt"), pins(ROOT / "constraints.txt")
    assert {name: version for name, version in workers.items() if everything.get(name) != version} == {}


def test_the_wheel_carries_the_specification_its_reports_link(tmp_path):
    """Built from a copy of the sources (a build writes beside them), installed by unpacking: the
    installed package renders docs/metric.md, byte for byte the repository's, as the report's metric.html."""
    source = tmp_path / "source"
    for folder in ("fleet_goodput", "pipelines", "transforms", "schemas", "sql", "configs", "docs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("fleet_goodput-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("fleet_goodput/docs/metric.md") == (ROOT / "docs" / "metric.md").read_bytes()
        archive.extractall(tmp_path / "installed")
    code = (
        "import fleet_goodput; from fleet_goodput.report.render import render_specification; "
        "print(fleet_goodput.__file__); print(render_specification(period_name='p'))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path / "installed"), "PATH": ""},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    location, page = run.stdout.split("\n", 1)
    assert location.startswith(str(tmp_path / "installed")), "the unpacked wheel, not the checkout"
    assert '<h2 id="6-what-each-loss-points-to">6. What each loss points to</h2>' in page
    project_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"fleet-goodput {project_version}, the version that made the report" in page


def test_the_image_copies_every_folder_the_package_is_built_from():
    """`pip install .` in the Dockerfile fails on a package folder it was not given, and ships none of its data."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    copies = [
        line.split()[1:]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
    ]
    sources = {source for *from_paths, _destination in copies for source in from_paths}
    for package, folder in {"fleet_goodput": "fleet_goodput", **setuptools["package-dir"]}.items():
        needed = ["__init__.py", *setuptools["package-data"].get(package, [])]
        assert folder in sources or all(f"{folder}/{name}" in sources for name in needed), package
