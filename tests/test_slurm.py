"""Against a real Slurm (tests/slurm_box.py): every scenario, imported, equals Slurm's own numbers.

One box per session: it starts (about 15 s), runs every scenario at once (the time
limit's 60–90 s is the longest wait; everything else happens meanwhile), and the
tests read what it recorded. It records in a process of its own that starts with
the session, and this file runs last, so other files use the cores while Slurm
waits (tests/slurm_recording.py). Skipped, saying why, only where the packages cannot
be installed; `.ci/run` installs them.
"""

from __future__ import annotations

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


def _scheduler_records_of(path: Path) -> list[dict]:
    with open(path, "rb") as handle:
        return list(fastavro.reader(handle))


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

    one = once["slurm-00000001.avro"]
    assert len(once) == 1
    jobs_of = [r for r in every if r["job_id"] is not None]
    assert sorted(jobs_of, key=key) == sorted((r for r in one if r["job_id"] is not None), key=key)
    # Capacity starts at the first record read, as an import does. A record that reached accounting
    # after a poll moves that start earlier: the killed collection then holds a level the single one
    # does not, the same level as in effect there, so no figure differs.
    levels = sorted((r["event_time"], r["accelerator"], r["chips"]) for r in one if r["job_id"] is None)
    for record in (r for r in every if r["job_id"] is None):
        if record not in one:
            in_effect = [chips for time, accelerator, chips in levels
                         if accelerator == record["accelerator"] and time <= record["event_time"]]
            assert in_effect and in_effect[-1] == record["chips"], record
    assert all(r in every for r in one if r["job_id"] is None)
    # Written as it progressed: the timed-out job's ALLOCATE reached a file a minute before its end.
    file_of = {r["event_id"]: name for name, records in killed.items() for r in records}
    timed_out = [r for r in every if r["job_id"] == f"testfleet/{jobs['timeout']}"]
    started, ended = (next(file_of[r["event_id"]] for r in timed_out if r["type"] == kind) for kind in ("ALLOCATE", "FAIL"))
    assert started < ended


def test_collected_figures_equal_slurms_own_numbers(recorded, tmp_path):
    """Collected, capacity counts from the first record read, not from --since (a minute before the
    jobs): the same as the import, so both paths give the same fleet figures."""
    _, files, _, collected, _ = recorded
    check_against_slurm(files["sacct.txt"].parent, collected / "killed", tmp_path / "out")


def test_every_poll_states_what_it_observed(recorded):
    """Each poll's file states the cluster observed from the first record on, up to the poll's time:
    the collection's last file states the latest end, and a quiet poll writes a file all the same."""
    _, files, collector, collected, _ = recorded
    from fleet_goodput.telemetry.observed import statement_of

    paths = sorted((collected / "killed" / "scheduler").glob("*.avro"))
    stated = [statement_of(path.read_bytes()) for path in paths]
    assert stated and all(set(periods) == {"testfleet"} for periods in stated)
    # No poll writes a record from after its own time (a node event returned while sacct ran waits a poll).
    for path, periods in zip(paths, stated):
        times = [int(r["event_time"].timestamp() * 1_000_000) for r in _scheduler_records_of(path)]
        assert all(time_us <= periods["testfleet"][1] for time_us in times), path.name
    ends = [periods["testfleet"][1] for periods in stated]
    assert ends == sorted(ends)  # polls in order, each up to its own time
    first = min(r["event_time"] for records in _scheduler_records(collected / "once").values() for r in records
                if r["job_id"] is not None)
    assert min(periods["testfleet"][0] for periods in stated) == int(first.timestamp() * 1_000_000)
