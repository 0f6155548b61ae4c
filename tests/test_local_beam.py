"""A local run imports Beam without the connectors it never calls (fleet_goodput/local_beam.py).

Each import is checked in a fresh interpreter: what Beam imports is decided
once per process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from deltalake import DeltaTable

from fleet_goodput.local_beam import UNUSED_BY_A_LOCAL_RUN, is_local_run, runner_flag, runner_is_local


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_a_local_import_leaves_out_the_connectors_and_beam_still_runs_a_pipeline():
    code = f"""
import sys
from fleet_goodput.local_beam import import_beam_for_local_run
import_beam_for_local_run()
left_out = [name for name in {UNUSED_BY_A_LOCAL_RUN!r} if name in sys.modules]
assert left_out == [], left_out
import apache_beam as beam
from fleet_goodput.pipelines.goodput import run  # the run's own modules import with it
with beam.Pipeline(runner="FnApiRunner") as p:
    _ = (p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.CombinePerKey(sum)
         | beam.Map(print))
import pymongo, google.cloud.storage  # later imports load as usual
print("imported later")
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:2]) == ["('a', 4)", "('b', 2)"]
    assert "imported later" in done.stdout
    assert "bson" not in done.stderr  # Beam's warning about MongoDB's missing client is not printed


def test_a_beam_that_needs_a_module_marked_absent_is_imported_whole():
    # google.protobuf is one Beam cannot do without: the light import fails, and Beam is imported again.
    code = """
import sys
from fleet_goodput.local_beam import import_beam_for_local_run
import_beam_for_local_run(absent=("google.protobuf", "pymongo"))
import apache_beam as beam
assert "google.protobuf" in sys.modules and sys.modules["pymongo"] is not None
with beam.Pipeline(runner="FnApiRunner") as p:
    _ = p | beam.Create([1, 2]) | beam.Map(print)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["1", "2"]


def test_beam_imported_already_is_left_as_it_is():
    code = """
import sys
import apache_beam
from fleet_goodput.local_beam import import_beam_for_local_run
import_beam_for_local_run()
assert "google.cloud.storage" in sys.modules
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("flags, paths, local", [
    ([], ["in", "out"], True),
    (["--runner=DirectRunner"], ["in", "out"], True),
    (["--runner", "fnapirunner"], ["in", "out"], True),
    (["--runner=DataflowRunner"], ["in", "out"], False),
    (["--runner=DirectRunner", "--runner", "DataflowRunner"], ["in", "out"], False),  # the last one wins
    ([], ["gs://bucket/in", "out"], False),
    ([], ["in", "gs://bucket/out"], False),
    ([], ["in", None], True),
])
def test_a_run_is_local_when_its_runner_and_every_path_are(flags, paths, local):
    assert is_local_run(flags, paths) is local


def test_runner_names():
    assert runner_flag([], "FnApiRunner") == "FnApiRunner"
    assert runner_flag(["--runner=PrismRunner", "--project=p"], "FnApiRunner") == "PrismRunner"
    assert [runner_is_local(name) for name in ("FnApiRunner", "direct", "SwitchingDirectRunner", "PrismRunner",
                                               "DataflowRunner")] == [True, True, True, False, False]


def _rows(output, table: str) -> list[dict]:
    rows = DeltaTable(str(output / "tables" / table)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=repr)


@pytest.mark.slow  # a whole `mpg run` in a fresh interpreter
def test_mpg_run_imports_beam_lightly_and_computes_the_same_figures(worked_example_run, tmp_path):
    """`mpg run` over local folders takes the lighter import, and its tables are those of a run
    in a process that imported Beam whole (this one's fixture)."""
    input_dir, whole = worked_example_run
    light = tmp_path / "out"
    code = f"""
import sys
from fleet_goodput.cli import main
status = main(["run", "--input", {str(input_dir)!r}, "--output", {str(light)!r}, "-q"])
print(sorted(name for name in {UNUSED_BY_A_LOCAL_RUN!r} if name in sys.modules))
sys.exit(status)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    for table in ("job_window", "jobs", "capacity_level", "rejected", "late"):
        assert _rows(light, table) == _rows(whole, table), table
