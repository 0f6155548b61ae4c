"""What the Dataflow image installs: only what the launcher and the workers import, pinned like constraints.txt."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]

# Installed for the views, the checks, the report and the importers, which
# run where an output is read, never on a Dataflow worker or the launcher.
NOT_ON_WORKERS = ("duckdb", "great_expectations", "scipy", "tqdm", "jinja2", "mistune")
# What the launcher and the workers load: the launcher module (whose CommitRun
# step runs on a worker), both pipelines and every transform.
WORKER_MODULES = ("fleet_goodput.launcher", "fleet_goodput.pipelines.goodput", "fleet_goodput.pipelines.streaming", "fleet_goodput.transforms.read",
                  "fleet_goodput.transforms.sessionize", "fleet_goodput.transforms.goodput", "fleet_goodput.transforms.write", "fleet_goodput.transforms.pubsub",
                  "fleet_goodput.transforms.stream_sessionize")


def pins(path: Path) -> dict[str, str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return {re.sub(r"[-_.]+", "-", name).lower(): version
            for name, version in (line.split("==") for line in lines if line and not line.startswith("#"))}


def test_the_launcher_and_the_workers_import_without_the_packages_they_do_not_get():
    # A None in sys.modules makes `import X` fail as if X were not installed.
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in NOT_ON_WORKERS)
    code = f"import sys; {blocked}; import {', '.join(WORKER_MODULES)}"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_worker_requirements_leave_out_what_workers_never_use():
    workers = pins(ROOT / "requirements-dataflow.txt")
    for name in ("apache-beam", "pyarrow", "fastavro", "cramjam", "lz4", "polars", "deltalake", "pyyaml",
                 "google-cloud-storage"):
        assert name in workers, name
    for name in NOT_ON_WORKERS + ("great-expectations", "pandas"):
        assert re.sub(r"[-_.]+", "-", name) not in workers, name


def test_the_worker_pins_agree_with_the_constraints():
    workers, everything = pins(ROOT / "requirements-dataflow.txt"), pins(ROOT / "constraints.txt")
    assert {name: version for name, version in workers.items() if everything.get(name) != version} == {}
