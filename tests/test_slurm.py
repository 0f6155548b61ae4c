"""Against a real Slurm (tests/slurm_box.py): every scenario, imported, equals Slurm's own numbers.

One box per session: it starts (about 15 s), runs every scenario at once (the time
limit's 60–90 s is the longest wait; everything else happens meanwhile), and the
tests read what it recorded. It records in a process of its own that starts with
the session, and this file runs last, so other files use the cores while Slurm
waits (tests/slurm_recording.py). Skipped, saying why, only where the packages cannot
be installed; `.ci/run` installs them.
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path
from types import SimpleNamespace

import fastavro
import pytest

import slurm_recording
from slurm_box import ensure_installed
from slurm_truth import sacct_rows
from test_slurm_import import check_against_slurm

pytestmark = pytest.mark.slow

WHY_NOT = ensure_installed()
if WHY_NOT:
    pytest.skip(f"NO REAL SLURM IN THIS RUN: {WHY_NOT}. As root with apt-get the tests install "
                "slurmctld slurmd slurmdbd slurm-client munge mariadb-server; .ci/run does.", allow_module_level=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """What the session's recording of the box recorded (tests/slurm_recording.py): started early by
    tests/conftest.py, or here when this file runs alone."""
    folder = slurm_recording.session_folder(tmp_path_factory)
    slurm_recording.start(folder)
    recording = slurm_recording.wait(folder)
    files = {name: Path(path) for name, path in recording["files"].items()}
    collector = SimpleNamespace(**recording["collector"])
    return recording["jobs"], files, collector, folder / "collected", recording["since"]


def test_the_box_ran_every_scenario(recorded):
    jobs, files, *_ = recorded
    states: dict[str, list[str]] = {}
    for row in sacct_rows(files["sacct.txt"]):
        states.setdefault(row["JobID"], []).append(row["State"])
    assert {name: states[job] for name, job in jobs.items() if name != "array"} == {
        "timeout": ["TIMEOUT"], "busy": ["COMPLETED"], "waits_for_gpus": ["COMPLETED"],
        "preempted": ["PREEMPTED", "COMPLETED"], "node_fail": ["NODE_FAIL", "COMPLETED"],
        "completes": ["COMPLETED"], "fails": ["FAILED"], "cancelled": ["CANCELLED by 0"],
        "requeued": ["REQUEUED", "COMPLETED"], "cpu_only": ["COMPLETED"], "preemptor": ["COMPLETED"]}
    assert all(states[f"{jobs['array']}_{task}"] == ["COMPLETED"] for task in range(3))
    waited = next(row for row in sacct_rows(files["sacct.txt"]) if row["JobID"] == jobs["waits_for_gpus"])
    assert waited["Start"] > waited["Submit"]  # it waited for the busy job's GPUs
    events = {(row["NodeName"], row["State"]) for row in sacct_rows(files["events.txt"]) if row["NodeName"]}
    assert events == {("gpu03", "DOWN"), ("gpu03", "DRAIN")}


def test_imported_figures_equal_slurms_own_numbers(recorded, tmp_path):
    _, files, *_ = recorded
    check_against_slurm(files["sacct.txt"].parent, tmp_path / "in", tmp_path / "out")


def _scheduler_records(folder: Path) -> dict[str, list[dict]]:
    """Records per file name."""
    files = {}
    for path in sorted((folder / "scheduler").glob("*.avro")):
        with open(path, "rb") as handle:
            files[path.name] = list(fastavro.reader(handle))
    return files


def test_a_collector_killed_and_rerun_ends_equal_to_one_collection(recorded):
    jobs, _, collector, collected, _ = recorded
    assert collector.kills >= 3 and collector.polls >= 3 and not collector.failures
    killed, once = _scheduler_records(collected / "killed"), _scheduler_records(collected / "once")
    every = [record for records in killed.values() for record in records]
    assert len({r["event_id"] for r in every}) == len(every)  # no event written twice

    def key(record):
        return record["event_id"]

    assert sorted(every, key=key) == sorted(once["slurm-00000001.avro"], key=key) and len(once) == 1
    # Written as it progressed: the timed-out job's ALLOCATE reached a file a minute before its end.
    file_of = {r["event_id"]: name for name, records in killed.items() for r in records}
    timed_out = [r for r in every if r["job_id"] == f"testfleet/{jobs['timeout']}"]
    started, ended = (next(file_of[r["event_id"]] for r in timed_out if r["type"] == kind) for kind in ("ALLOCATE", "FAIL"))
    assert started < ended


def test_collected_figures_equal_slurms_own_numbers(recorded, tmp_path):
    _, files, _, collected, since = recorded
    first = calendar.timegm(time.strptime(since, "%Y-%m-%dT%H:%M:%SZ"))
    check_against_slurm(files["sacct.txt"].parent, collected / "killed", tmp_path / "out", capacity_from_s=first)
