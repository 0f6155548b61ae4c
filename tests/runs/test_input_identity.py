"""Input files are known by their content, and a file that changes under a run is left for the next.

A daily run skips the files an earlier run applied. It knows them by path, size
and modification time, and any other file by the hash of its content: a copy
under another name is skipped, and a corrected file delivered again in place,
of the same size or not, is refused with the way to apply it (an earlier run
applied its first content, which it cannot replace). A file a producer is still writing (or
replaces, or removes) while the run reads it is not applied: the run computes
again without it and the next run applies it whole, so the store ends as one
run over the finished files.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import fastavro
import pytest

from fleet_goodput import exits
from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.inputs import InputError
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry import observed
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
    first = run_batch(
        str(tmp_path / "live"),
        str(tmp_path / "out"),
        SETTINGS,
        build_views=False,
        chunk_hours=24,
        progress=lambda line: (progress.append(line), producer_still_writing(line)),
    )
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
    second = run_batch(
        str(live),
        str(tmp_path / "out"),
        SETTINGS,
        build_views=False,
        chunk_hours=24,
        progress=lambda line: (progress.append(line), producer_still_writing(line)),
    )
    assert second.committed and second.deferred == (str(victim),)
    assert second.run.as_of_us == first.run.as_of_us == START_US + HOUR_US
    assert any("the as-of time stays run 1's until they are read" in line for line in progress)
    third = run_batch(str(live), str(tmp_path / "out"), SETTINGS, build_views=False)
    assert third.committed and third.run.files_applied == 1 and third.run.as_of_us == whole.run.as_of_us
    assert all(counts["late"] == 0 for counts in third.manifest["streams"].values())
    assert third.manifest["streams"] == whole.manifest["streams"]
    _same_as_whole(tmp_path / "out", root / "whole")


def _two_deliveries(root, target) -> Path:
    """The fleet's scheduler files as two deliveries, its first 1.5 hours (a-*) and the rest (b-*): run 1
    applies the first, run 2 the second. Returns the folder they land in. The files are written without
    compression, as some producers write them, so that an id corrected to one of the same length keeps
    the file's size to the byte."""
    first, last = split_by_time(root / "fleet", [START_US + 3 * HOUR_US // 2], target / "parts")
    live = target / "live"
    (live / "scheduler").mkdir(parents=True)

    def deliver(part: Path, prefix: str) -> None:
        for path in sorted((part / "scheduler").glob("*.avro")):
            data = path.read_bytes()
            write_events(
                live / "scheduler" / f"{prefix}{path.name}",
                "scheduler",
                fastavro.reader(io.BytesIO(data)),
                codec="null",
                observed=observed.statement_of(data) or None,
            )

    deliver(first, "a-")
    assert run_batch(str(live), str(target / "out"), SETTINGS, build_views=False).run.run_id == 1
    deliver(last, "b-")
    assert run_batch(str(live), str(target / "out"), SETTINGS, build_views=False).run.run_id == 2
    return live


def _correct_a_job_id(live: Path, renamed) -> tuple[str, str, dict[Path, int]]:
    """Deliver again in place every b-* file that holds events of the first job submitted in the second
    delivery, that job's id corrected by `renamed`; returns the wrong id, the right one, and the files
    delivered again with their sizes before."""
    files = sorted((live / "scheduler").glob("b-*.avro"))
    records = {path: list(fastavro.reader(path.open("rb"))) for path in files}
    wrong = min((r["event_time"], r["job_id"]) for rows in records.values() for r in rows if r["type"] == "SUBMIT")[1]
    right = renamed(wrong)
    changed = {}
    for path, rows in records.items():
        if any(r["job_id"] == wrong for r in rows):
            changed[path] = path.stat().st_size
            data = path.read_bytes()
            # As the producer wrote it but for the id: uncompressed, its sync marker (every block ends with it),
            # and its statement of what it observed.
            write_events(
                path,
                "scheduler",
                [{**r, "job_id": right} if r["job_id"] == wrong else r for r in rows],
                codec="null",
                sync_marker=data[-16:],
                observed=observed.statement_of(data) or None,
            )
            os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))
    return wrong, right, changed


CORRECTIONS = {
    "same size": lambda job_id: job_id[:-1] + ("X" if job_id[-1] != "X" else "Y"),
    "other size": lambda job_id: f"{job_id}-fixed",
}


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_a_corrected_file_delivered_again_in_place_is_refused_naming_it(fleet, tmp_path, capsys, correction):
    """Same path, new content, of the same size or not: its events cannot replace what the first delivery
    added (the store keeps no events), and added to them they would keep the wrong job id beside the right
    one. The run commits nothing and says, in one line naming the file, how to apply it: undo the run that
    applied it and run again."""
    root, _ = fleet
    live = _two_deliveries(root, tmp_path)
    wrong, right, changed = _correct_a_job_id(live, CORRECTIONS[correction])
    sizes_kept = [path.stat().st_size == size for path, size in changed.items()]
    assert sizes_kept and all(sizes_kept) == (correction == "same size") and any(sizes_kept) == all(sizes_kept)
    changed = sorted(changed)
    output = tmp_path / "out"
    assert main(["run", "--input", str(live), "--output", str(output), "-q"]) == exits.USAGE
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert f"{changed[0]} holds other content than when run 2 applied it" in message
    assert f"mpg rollback --output {output} --to 1" in message
    assert len(Store(output).runs()) == 2  # nothing committed
    with connect(output) as connection:
        assert connection.execute("select count(*) from jobs where job_id = ?", [right]).fetchone() == (0,)


def test_a_correction_applied_by_rolling_back_gives_the_figures_of_one_clean_run(fleet, tmp_path):
    """The way the refusal names: roll back to the run before the one that applied the file, run again.
    The wrong job id is gone, and the store equals one run over the corrected files."""
    root, _ = fleet
    live = _two_deliveries(root, tmp_path)
    wrong, right, _ = _correct_a_job_id(live, CORRECTIONS["same size"])
    output = tmp_path / "out"
    assert main(["rollback", "--output", str(output), "--to", "1"]) == exits.OK
    again = run_batch(str(live), str(output), SETTINGS, build_views=False)
    assert again.committed and again.run.files_applied == len(list((live / "scheduler").glob("b-*.avro")))
    clean = run_batch(str(live), str(tmp_path / "clean"), SETTINGS, build_views=False)
    with connect(output) as connection:
        ids = {job_id for (job_id,) in connection.execute("select job_id from jobs").fetchall()}
    assert right in ids and wrong not in ids
    _same_as_whole(output, tmp_path / "clean")
    assert again.manifest["streams"] == clean.manifest["streams"]


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
