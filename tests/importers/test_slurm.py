"""Against a real Slurm (tests/slurm_box.py): every scenario, imported, equals Slurm's own numbers.

One box per session: it starts (about 15 s), runs every scenario at once (the time
limit's 60–90 s is the longest wait; everything else happens meanwhile), and the
tests read what it recorded. It records in a process of its own that starts with
the session, and this file runs last, so other files use the cores while Slurm
waits (tests/slurm_recording.py). Skipped, saying why, only where the packages cannot
be installed; `.ci/run` installs them.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import fastavro
import pytest

import slurm_recording
from slurm_box import ensure_installed
from fleet_goodput.importers.reading import MICROS
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect
from slurm_truth import sacct_rows, utc_seconds
from importing import SETTINGS, import_to
from test_slurm_import import check_against_slurm

pytestmark = pytest.mark.slow

WHY_NOT = ensure_installed()
if WHY_NOT:
    pytest.skip(
        f"NO REAL SLURM IN THIS RUN: {WHY_NOT}. As root with apt-get the tests install "
        "slurmctld slurmd slurmdbd slurm-client munge mariadb-server; .ci/run does.",
        allow_module_level=True,
    )


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


@pytest.fixture(scope="module")
def unanswered(tmp_path_factory):
    """What each poll made while a daemon never answered recorded (tests/slurm_recording.py)."""
    folder = slurm_recording.session_folder(tmp_path_factory)
    slurm_recording.start(folder)
    return slurm_recording.wait(folder)["unanswered"]


def test_the_box_ran_every_scenario(recorded):
    jobs, files, *_ = recorded
    states: dict[str, list[str]] = {}
    for row in sacct_rows(files["sacct.txt"]):
        states.setdefault(row["JobID"], []).append(row["State"])
    assert {name: states[job] for name, job in jobs.items() if name != "array"} == {
        "timeout": ["TIMEOUT"],
        "busy": ["COMPLETED"],
        "waits_for_gpus": ["COMPLETED"],
        "preempted": ["PREEMPTED", "COMPLETED"],
        "node_fail": ["NODE_FAIL", "COMPLETED"],
        "completes": ["COMPLETED"],
        "fails": ["FAILED"],
        "cancelled": ["CANCELLED by 0"],
        "requeued": ["REQUEUED", "COMPLETED"],
        "cpu_only": ["COMPLETED"],
        "preemptor": ["COMPLETED"],
        "held_cancelled": ["CANCELLED by 0"],
        "held_released": ["COMPLETED"],
        "held": ["PENDING"],
    }
    assert all(states[f"{jobs['array']}_{task}"] == ["COMPLETED"] for task in range(3))
    # Never eligible, so a plain `sacct -S` leaves them out (the other listings of sacct.txt add them).
    never_eligible = {row["JobID"] for row in sacct_rows(files["sacct.txt"]) if row["Eligible"] == "Unknown"}
    assert never_eligible == {jobs["held_cancelled"], jobs["held"]}
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

    def as_compared(record):
        # Slurm gives a held job priority 0 and a released one its computed priority: the SUBMIT carries
        # the one first read, so a poll that saw the released job while held wrote 0.
        if record["job_id"] == f"testfleet/{jobs['held_released']}" and record["type"] == "SUBMIT":
            return {**record, "priority": None}
        return record

    jobs_of = [as_compared(r) for r in every if r["job_id"] is not None]
    assert sorted(jobs_of, key=key) == sorted((as_compared(r) for r in one if r["job_id"] is not None), key=key)
    # Capacity starts at the first record read, as an import does. A record that reached accounting
    # after a poll moves that start earlier: the killed collection then holds a level the single one
    # does not, the same level as in effect there, so no figure differs.
    levels = sorted((r["event_time"], r["accelerator"], r["chips"]) for r in one if r["job_id"] is None)
    for record in (r for r in every if r["job_id"] is None):
        if record not in one:
            in_effect = [
                chips
                for time, accelerator, chips in levels
                if accelerator == record["accelerator"] and time <= record["event_time"]
            ]
            assert in_effect and in_effect[-1] == record["chips"], record
    assert all(r in every for r in one if r["job_id"] is None)
    # Written as it progressed: the timed-out job's ALLOCATE reached a file a minute before its end.
    file_of = {r["event_id"]: name for name, records in killed.items() for r in records}
    timed_out = [r for r in every if r["job_id"] == f"testfleet/{jobs['timeout']}"]
    started, ended = (
        next(file_of[r["event_id"]] for r in timed_out if r["type"] == kind) for kind in ("ALLOCATE", "FAIL")
    )
    assert started < ended


def test_collected_figures_equal_slurms_own_numbers(recorded, tmp_path):
    """Collected, capacity counts from the first record read, not from --since (a minute before the
    jobs): the same as the import, so both paths give the same fleet figures."""
    _, files, _, collected, _ = recorded
    check_against_slurm(files["sacct.txt"].parent, collected / "killed", tmp_path / "out")


@pytest.mark.parametrize("source", ["collected, killed and rerun", "collected at once", "imported"])
def test_every_job_comes_out_with_its_true_status(recorded, source, tmp_path):
    """What each scenario did, by hand: how each job ended (or PENDING, still held at the end), whether it
    ever started, and the end reason of the job cancelled while held."""
    jobs, files, _, collected, _ = recorded
    if source == "imported":
        import_to("slurm", files["sacct.txt"].parent, tmp_path / "in")
    folder = {
        "collected, killed and rerun": collected / "killed",
        "collected at once": collected / "once",
        "imported": tmp_path / "in",
    }[source]
    last_end = max(utc_seconds(row["End"]) for row in sacct_rows(files["sacct.txt"]) if row["End"] != "Unknown")
    run_batch(str(folder), str(tmp_path / "out"), SETTINGS, given_as_of_us=last_end * MICROS, build_views=False)
    with connect(tmp_path / "out") as connection:
        found = {
            row[0]: row[1:]
            for row in connection.execute(
                "select job_id, jobs.status, first_running_time is not null, held_chip_s, end_reason "
                "from jobs join job_goodput using (job_id)"
            ).fetchall()
        }
    expected = {
        "timeout": "FAILED",
        "busy": "FINISHED",
        "waits_for_gpus": "FINISHED",
        "preempted": "FINISHED",
        "node_fail": "FINISHED",
        "completes": "FINISHED",
        "fails": "FAILED",
        "cancelled": "CANCELLED",
        "requeued": "FINISHED",
        "preemptor": "FINISHED",
        "held_cancelled": "CANCELLED",
        "held_released": "FINISHED",
        "held": "PENDING",
        **{f"array_{task}": "FINISHED" for task in range(3)},
    }
    job_of = {
        **{name: f"testfleet/{job}" for name, job in jobs.items()},
        **{f"array_{task}": f"testfleet/{jobs['array']}_{task}" for task in range(3)},
    }
    assert {name: found[job_of[name]][0] for name in expected} == expected
    assert f"testfleet/{jobs['cpu_only']}" not in found  # rejected: no GPU
    never_started = {name for name in expected if not found[job_of[name]][1]}
    assert never_started == {"held_cancelled", "held"}
    assert all(found[job_of[name]][2] == 0 for name in never_started)
    assert found[job_of["held_cancelled"]][3] == "CANCELLED by 0 (never started: JobHeldUser)"
    assert found[job_of["held"]][3] is None


def _partition_gpu_s_by_hand(sacct: Path) -> dict[str, int]:
    """GPU-seconds each partition's jobs held, from the sacct text alone: every attempt's allocated GPUs
    (gres/gpu of AllocTRES) × its End − Start, what `sreport job SizesByAccount -T gres/gpu` sums."""
    held: dict[str, int] = {}
    for row in sacct_rows(sacct):
        gpus = re.search(r"gres/gpu=(\d+)", row["AllocTRES"])
        if gpus and row["Start"] not in ("Unknown", "None") and row["End"] not in ("Unknown", "None"):
            held[row["Partition"]] = held.get(row["Partition"], 0) + int(gpus.group(1)) * (
                utc_seconds(row["End"]) - utc_seconds(row["Start"])
            )
    return held


def _sreport(path: Path) -> tuple[int, int]:
    """(the end of the window sreport reported, in epoch seconds; GPU-seconds of every account and size)."""
    lines = path.read_text().splitlines()
    window_end = re.search(r" - (\S+) \(", next(line for line in lines if line.startswith("Job Sizes"))).group(1)
    header = next(number for number, line in enumerate(lines) if line.startswith("Cluster|Account|"))
    names = lines[header].split("|")
    total = sum(
        int(value)
        for line in lines[header + 1 :]
        for name, value in zip(names, line.split("|"))
        if name.endswith("TRES")
    )
    return utc_seconds(window_end) + 1, total


def test_queue_daily_holds_what_sreport_reports_per_partition(recorded, tmp_path):
    """queue_daily's held chip-time per partition equals the GPU-seconds of the partition's attempts, by
    hand from sacct; and `sreport job SizesByAccount`'s, when sreport's window covered the jobs: it
    reports whole hours up to the one nearest its run (docs/slurm.md), so a recording made in the
    first half of an hour ends after it."""
    _, files, *_ = recorded
    import_to("slurm", files["sacct.txt"].parent, tmp_path / "in")
    rows = sacct_rows(files["sacct.txt"])
    last_end = max(utc_seconds(row["End"]) for row in rows if row["End"] != "Unknown")
    run_batch(
        str(tmp_path / "in"), str(tmp_path / "out"), SETTINGS, given_as_of_us=last_end * MICROS, build_views=False
    )
    with connect(tmp_path / "out") as connection:
        held = dict(connection.execute("select queue, sum(held_chip_s) from queue_daily group by all").fetchall())
    by_hand = _partition_gpu_s_by_hand(files["sacct.txt"])
    assert set(by_hand) == {"batch", "urgent"} and held == by_hand
    for partition in ("batch", "urgent"):
        window_end, reported = _sreport(files[f"sreport-{partition}.txt"])
        if window_end >= last_end:
            assert reported == by_hand[partition], partition


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
    first = min(
        r["event_time"]
        for records in _scheduler_records(collected / "once").values()
        for r in records
        if r["job_id"] is not None
    )
    assert min(periods["testfleet"][0] for periods in stated) == int(first.timestamp() * 1_000_000)


@pytest.mark.parametrize("daemon, command", [("slurmdbd", "sacct"), ("slurmctld", "scontrol")])
def test_a_poll_whose_slurm_daemon_never_answers_ends_in_one_line_writing_nothing(unanswered, daemon, command):
    """The real daemon stopped (SIGSTOP): it takes the connection and never answers, so the real sacct
    (first to ask slurmdbd) or scontrol (first to ask slurmctld: sacct and sacctmgr ask slurmdbd) waits.
    Slurm's own clients give up only after 45 s (sacct) or 10 s (scontrol), each with a message of its
    own; the collector's --timeout of 3 s kills it first: exit 1, one line naming the command, the
    daemon and the flag, and every file of the collection as the whole poll before left it."""
    poll = unanswered[daemon]
    assert poll["files"] >= 2  # the whole poll before wrote a scheduler file and the cursor
    assert (poll["returncode"], poll["stdout"], poll["stderr"]) == (
        1,
        "",
        f"mpg collect: {command} did not answer within 3 s (is {daemon} responding? --timeout gives it "
        f"longer); nothing was written to {poll['out']}\n",
    )
    assert poll["unchanged"]
