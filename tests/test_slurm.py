"""Against a real Slurm (tests/slurm_box.py): every scenario, imported, equals Slurm's own numbers.

One box per file: it starts (about 15 s), runs every scenario at once (the time
limit's 60–90 s is the longest wait; everything else happens meanwhile), and the
tests read what it recorded. Skipped, saying why, only where the packages cannot
be installed; `.ci/run` installs them.
"""

from __future__ import annotations

import calendar
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import fastavro
import pytest

from slurm_box import SlurmBox, capture, ensure_installed, run_scenarios
from slurm_truth import sacct_rows
from test_slurm_import import check_against_slurm

pytestmark = pytest.mark.slow

WHY_NOT = ensure_installed()
if WHY_NOT:
    pytest.skip(f"NO REAL SLURM IN THIS RUN: {WHY_NOT}. As root with apt-get the tests install "
                "slurmctld slurmd slurmdbd slurm-client munge mariadb-server; .ci/run does.", allow_module_level=True)


class KilledAndRerun(threading.Thread):
    """`mpg collect slurm` polled over and over while the scenarios run, SIGKILLed at random moments
    of about one poll in two (seeded), and always run again."""

    def __init__(self, box: SlurmBox, out: Path, since: str):
        super().__init__(daemon=True)
        self.box, self.out, self.since = box, out, since
        self.stopping, self.polls, self.kills, self.failures = threading.Event(), 0, 0, []
        self.rng = random.Random(23)

    def poll(self, kill_after: float | None = None) -> None:
        command = [sys.executable, "-m", "fleet_goodput.cli", "collect", "slurm", "--out", str(self.out),
                   "--since", self.since, "-q"]
        process = subprocess.Popen(command, env=self.box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = process.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            self.kills += 1
            return
        self.polls += 1
        if process.returncode:
            self.failures.append(err)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.poll(self.rng.uniform(0.3, 3.0) if self.rng.random() < 0.5 else None)
            time.sleep(0.5)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    box = SlurmBox(tmp_path_factory.mktemp("slurm-box"))
    collected = tmp_path_factory.mktemp("collected")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    collector = KilledAndRerun(box, collected / "killed", since)
    try:
        box.start()
        collector.start()
        jobs = run_scenarios(box)
        collector.stopping.set()
        collector.join()
        collector.poll()  # a last whole poll, as cron's next run would be
        KilledAndRerun(box, collected / "once", since).poll()
        files = capture(box, tmp_path_factory.mktemp("slurm-capture"))
    finally:
        collector.stopping.set()
        box.stop()
    return jobs, files, collector, collected, since


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
