"""Against a real Slurm (tests/slurm_box.py): every scenario, imported, equals Slurm's own numbers.

One box per file: it starts (about 15 s), runs every scenario at once (the time
limit's 60–90 s is the longest wait; everything else happens meanwhile), and the
tests read what it recorded. Skipped, saying why, only where the packages cannot
be installed; `.ci/run` installs them.
"""

from __future__ import annotations

import pytest

from slurm_box import SlurmBox, capture, ensure_installed, run_scenarios
from slurm_truth import _rows
from test_slurm_import import check_against_slurm

pytestmark = pytest.mark.slow

WHY_NOT = ensure_installed()
if WHY_NOT:
    pytest.skip(f"NO REAL SLURM IN THIS RUN: {WHY_NOT}. As root with apt-get the tests install "
                "slurmctld slurmd slurmdbd slurm-client munge mariadb-server; .ci/run does.", allow_module_level=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    box = SlurmBox(tmp_path_factory.mktemp("slurm-box"))
    try:
        box.start()
        jobs = run_scenarios(box)
        files = capture(box, tmp_path_factory.mktemp("slurm-capture"))
    finally:
        box.stop()
    return jobs, files


def test_the_box_ran_every_scenario(recorded):
    jobs, files = recorded
    states: dict[str, list[str]] = {}
    for row in _rows(files["sacct.txt"]):
        states.setdefault(row["JobID"], []).append(row["State"])
    assert {name: states[job] for name, job in jobs.items() if name != "array"} == {
        "timeout": ["TIMEOUT"], "busy": ["COMPLETED"], "waits_for_gpus": ["COMPLETED"],
        "preempted": ["PREEMPTED", "COMPLETED"], "node_fail": ["NODE_FAIL", "COMPLETED"],
        "completes": ["COMPLETED"], "fails": ["FAILED"], "cancelled": ["CANCELLED by 0"],
        "requeued": ["REQUEUED", "COMPLETED"], "cpu_only": ["COMPLETED"], "preemptor": ["COMPLETED"]}
    assert all(states[f"{jobs['array']}_{task}"] == ["COMPLETED"] for task in range(3))
    waited = next(row for row in _rows(files["sacct.txt"]) if row["JobID"] == jobs["waits_for_gpus"])
    assert waited["Start"] > waited["Submit"]  # it waited for the busy job's GPUs
    events = {(row["NodeName"], row["State"]) for row in _rows(files["events.txt"]) if row["NodeName"]}
    assert events == {("gpu03", "DOWN"), ("gpu03", "DRAIN")}


def test_imported_figures_equal_slurms_own_numbers(recorded, tmp_path):
    _, files = recorded
    check_against_slurm(files["sacct.txt"].parent, tmp_path / "in", tmp_path / "out")
