"""Input files are known by their content, and a file that changes under a run is left for the next.

A daily run skips the files an earlier run applied. It knows them by path, size
and modification time, and any other file by the hash of its content: a copy
under another name is skipped, and a corrected file delivered again in place,
even of the same size, is read. A file a producer is still writing (or
replaces, or removes) while the run reads it is not applied: the run computes
again without it and the next run applies it whole, so the store ends as one
run over the finished files.
"""

from __future__ import annotations

import os
from pathlib import Path

import fastavro
import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import InputError, run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time, write_events
from test_split_invariance import _capacity, _job_windows, _jobs

pytestmark = pytest.mark.slow  # a few small pipeline runs

SETTINGS = load_settings()


HOUR_US = 3600 * 1_000_000


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    simulate(root / "fleet", seed=3, hours=3, jobs=8)
    whole = run_batch(str(root / "fleet"), str(root / "whole"), SETTINGS, build_views=False)
    return root, whole


def _deliver(root, target) -> Path:
    """The fleet as files of its first 2.5 hours and files of its last half hour (named tail-*), as a
    producer writes them; returns a runtime file of the last half hour, the one still being written."""
    first, last = split_by_time(root / "fleet", [START_US + 5 * HOUR_US // 2], target / "parts")
    for part, prefix in ((first, ""), (last, "tail-")):
        for path in part.glob("*/*.avro"):
            (target / "live" / path.parent.name).mkdir(parents=True, exist_ok=True)
            path.rename(target / "live" / path.parent.name / f"{prefix}{path.name}")
    return sorted((target / "live" / "runtime").glob("tail-*.avro"))[0]


def _same_as_whole(output, whole_output):
    assert _job_windows(output) == _job_windows(whole_output)
    assert _capacity(output) == _capacity(whole_output)
    assert _jobs(output) == _jobs(whole_output)


@pytest.mark.parametrize("change", ["appended", "replaced", "removed"])
def test_a_file_that_changes_while_read_is_left_for_the_next_run(fleet, tmp_path, change):
    root, whole = fleet
    victim = _deliver(root, tmp_path)
    content = victim.read_bytes()

    def producer_still_writing(line: str) -> None:
        if line.startswith("Read the scheduler's clock ") and victim.exists() and victim.read_bytes() == content:
            if change == "appended":  # the run read half of it: the rest arrives now
                victim.write_bytes(content[: len(content) // 2])
                victim.write_bytes(content)
            elif change == "replaced":  # the same bytes, written again
                victim.write_bytes(content)
            else:
                victim.unlink()
            if victim.exists():
                os.utime(victim, ns=(0, victim.stat().st_mtime_ns + 1_000_000_000))

    progress = []
    first = run_batch(str(tmp_path / "live"), str(tmp_path / "out"), SETTINGS, build_views=False, chunk_hours=24,
                      progress=lambda line: (progress.append(line), producer_still_writing(line)))
    # A first run has no clock to hold: it waits, committing nothing, for every file to read whole.
    assert not first.committed and first.deferred == (str(victim),) and Store(tmp_path / "out").latest() is None
    assert any("changed or vanished while the run read them" in line for line in progress)
    assert any("the first run waits for them" in line for line in progress)
    if change == "removed":
        victim.write_bytes(content)  # delivered again, whole
    second = run_batch(str(tmp_path / "live"), str(tmp_path / "out"), SETTINGS, build_views=False)
    assert second.committed and second.run.run_id == 1
    assert second.manifest["streams"] == whole.manifest["streams"]
    _same_as_whole(tmp_path / "out", root / "whole")


def test_the_clock_waits_for_a_file_still_being_written_so_its_events_are_not_late(fleet, tmp_path):
    """Run 1 read the first hour. Then the next two hours land, a runtime file of 1 h to 1.5 h among them still
    being written while run 2 reads. Run 2 applies the rest but keeps run 1's as-of time: had its clock moved
    to 3 h, that file's events, more than the allowed hour behind, would be late in run 3. So run 3 reads it
    with nothing late, and the store ends as one run over the finished files."""
    root, whole = fleet
    parts = split_by_time(root / "fleet", [START_US + HOUR_US, START_US + 3 * HOUR_US // 2], tmp_path / "parts")
    live = tmp_path / "live"

    def deliver(part, prefix):
        for path in part.glob("*/*.avro"):
            (live / path.parent.name).mkdir(parents=True, exist_ok=True)
            path.rename(live / path.parent.name / f"{prefix}{path.name}")

    deliver(parts[0], "a-")
    first = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    deliver(parts[1], "b-")
    deliver(parts[2], "c-")
    victim = sorted((live / "runtime").glob("b-*.avro"))[0]
    content = victim.read_bytes()

    def producer_still_writing(line: str) -> None:
        if line.startswith("Read the scheduler's clock ") and victim.read_bytes() == content:
            victim.write_bytes(content[: len(content) // 2])
            victim.write_bytes(content)
            os.utime(victim, ns=(0, victim.stat().st_mtime_ns + 1_000_000_000))

    progress = []
    second = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False, chunk_hours=24,
                       progress=lambda line: (progress.append(line), producer_still_writing(line)))
    assert second.committed and second.deferred == (str(victim),)
    assert second.run.as_of_us == first.run.as_of_us == START_US + HOUR_US
    assert any("the as-of time stays run 1's until they are read" in line for line in progress)
    third = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    assert third.committed and third.run.files_applied == 1 and third.run.as_of_us == whole.run.as_of_us
    assert all(counts["late"] == 0 for counts in third.manifest["streams"].values())
    assert third.manifest["streams"] == whole.manifest["streams"]
    _same_as_whole(tmp_path / "out", root / "whole")


def test_a_corrected_file_delivered_again_in_place_is_read(fleet, tmp_path):
    """Same path, same size, new content: identity is the content, not the path and size. Its events
    already applied are repeats: dropped and counted as duplicates, or, behind the allowed lateness,
    as late (each with its row in the `late` table); its new one counts."""
    root, _ = fleet
    live = tmp_path / "live"
    live.mkdir()
    scheduler = sorted((root / "fleet" / "scheduler").glob("*.avro"))[0]
    (live / "scheduler").mkdir()
    (live / "scheduler" / scheduler.name).write_bytes(scheduler.read_bytes())
    first = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    with open(scheduler, "rb") as handle:
        records = list(fastavro.reader(handle))
    # The correction renames one event (same length of id, so the same size), a new event to the store.
    corrected = [dict(r) for r in records]
    corrected[-1]["event_id"] = corrected[-1]["event_id"][:-1] + ("X" if corrected[-1]["event_id"][-1] != "X" else "Y")
    target = live / "scheduler" / scheduler.name
    write_events(target, "scheduler", corrected)
    os.utime(target, ns=(0, target.stat().st_mtime_ns + 1_000_000_000))
    again = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    assert again.committed and again.run.files_applied == 1 and not again.skipped
    counts, before = again.manifest["streams"]["scheduler"], first.manifest["streams"]["scheduler"]
    assert counts["read"] == before["read"] + len(records) and counts["reconciles"]
    assert counts["accepted"] == before["accepted"] + 1 and counts["late"] > 0 and counts["duplicate"] > 0
    with connect(tmp_path / "out") as connection:
        assert connection.execute("select count(*) from late").fetchone() == (counts["late"],)


def test_a_stream_folder_that_cannot_be_listed_fails_the_run(fleet, tmp_path):
    root, _ = fleet
    live = tmp_path / "live"
    (live / "scheduler").mkdir(parents=True)
    for path in (root / "fleet" / "scheduler").glob("*.avro"):
        (live / "scheduler" / path.name).write_bytes(path.read_bytes())
    (live / "runtime").write_text("not a folder")
    with pytest.raises(InputError, match="runtime is not a folder: the run would miss the runtime stream"):
        run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    assert Store(tmp_path / "out").latest() is None
