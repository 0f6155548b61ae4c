"""A local run imports Beam without the connectors it never calls (fleet_goodput/local_beam.py).

Each import is checked in a fresh interpreter: what Beam imports is decided
once per process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

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
