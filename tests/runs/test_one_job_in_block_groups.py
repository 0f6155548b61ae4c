"""A file of more than a group of blocks is read a group at a time, with nothing changed.

The columnar decoder reads a runtime or profiler file `GROUP_ROWS` records at a time
(fleet_goodput/telemetry/columnar.py), and checks ids for repeats within a group only: a repeat in
another group is the key step's to judge, as one in another file is. One job of 60,001 runtime
events (two groups) whose last block repeats an event of its first must give the same figures as
the same events without the repeat, cut into small files, and count the repeat a duplicate once.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from fleet_goodput import schemas
from job_streams import write_job_scheduler
from fleet_goodput.cli import main
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.columnar import GROUP_ROWS, _clean_columns, _whole_blocks, decode_file_fast
from fleet_goodput.telemetry.decode import decode_file

pytestmark = pytest.mark.slow

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
STEP_US = 100_000
SPANS = 30_000  # 60,000 step events: more than a group
JOB = "job-one"
END_US = T0 + 1_000_000 + SPANS * STEP_US + 1_000_000  # the FINISH: a second after the last step ends


def _steps() -> list[dict]:
    """The job's runtime events in time order: steps of 100 ms one after the other."""
    return [
        {
            "event_id": f"r{2 * n + half}",
            "event_time": T0 + 1_000_000 + n * STEP_US + half * STEP_US,
            "job_id": JOB,
            "type": ("STEP_START", "STEP_END")[half],
            "step": n + 1,
            "attempt": None,
        }
        for n in range(SPANS)
        for half in (0, 1)
    ]


def _one_file_with_a_repeat() -> bytes:
    """Every step event in one file, and again the first one at the end: in another group of blocks."""
    steps = _steps()
    buffer = io.BytesIO()
    fastavro.writer(buffer, schemas.load("runtime"), [*steps, steps[0]], codec="deflate")
    return buffer.getvalue()


def test_a_repeat_in_another_group_takes_the_columnar_path_and_decodes_as_the_reference():
    data = _one_file_with_a_repeat()
    groups = _whole_blocks("runtime", data)[1]
    assert len(groups) == 2 and sum(records for _, _, records in groups) == 2 * SPANS + 1
    assert groups[0][2] >= GROUP_ROWS
    assert _clean_columns("runtime", data) is not None  # each group's ids are unique
    reference = decode_file("runtime", "one.avro", io.BytesIO(data), None)
    fast = decode_file_fast("runtime", "one.avro", io.BytesIO(data), None)
    assert dict(fast.batches) == dict(reference.batches)
    assert fast.read == reference.read == 2 * SPANS + 1
    assert [event[2] for event in fast.batches[JOB]].count("r0") == 2  # the repeat is handed on


def _run(root: Path, output: Path) -> tuple[list[tuple], dict]:
    write_job_scheduler(root, JOB, 8, T0, END_US)
    # Past the FINISH (50 min 2 s in) by more than the allowed lateness (1 h), so that every event settles.
    command = ["run", "-q", "--input", str(root), "--output", str(output), "--as_of", "2026-01-01T02:00:00Z"]
    assert main([*command, "--confirm_as_of"]) == 0
    with connect(output) as connection:
        windows = connection.execute("select * exclude (date) from job_window order by window_start").fetchall()
    return windows, json.loads((output / "manifest.json").read_text())["streams"]["runtime"]


def test_a_repeat_in_another_group_of_one_file_is_one_duplicate_and_changes_no_figure(tmp_path):
    grouped, cut = tmp_path / "grouped", tmp_path / "cut"
    (grouped / "runtime").mkdir(parents=True)
    (grouped / "runtime" / "part-0.avro").write_bytes(_one_file_with_a_repeat())
    steps = _steps()
    for part in range(0, len(steps), 7_000):  # each file under a group
        write_events(cut / "runtime" / f"part-{part:05d}.avro", "runtime", steps[part : part + 7_000])
    grouped_windows, grouped_counts = _run(grouped, tmp_path / "out-grouped")
    cut_windows, cut_counts = _run(cut, tmp_path / "out-cut")
    assert grouped_windows == cut_windows and len(cut_windows) == 1  # one hour window
    assert cut_counts == {
        "read": 2 * SPANS,
        "accepted": 2 * SPANS,
        "duplicate": 0,
        "rejected": 0,
        "late": 0,
        "waiting": 0,
        "reconciles": True,
    }
    assert grouped_counts == {**cut_counts, "read": 2 * SPANS + 1, "duplicate": 1}
    # By hand: 30,000 steps of 100 ms, preserved by the job's finish, on 8 chips; the second before
    # the first step and the one after the last, idle; a lifetime from SUBMIT to FINISH.
    with connect(tmp_path / "out-grouped") as connection:
        productive, idle, lifetime = connection.execute(
            "select productive_chip_s, idle_chip_s, lifetime_chip_s from job_window"
        ).fetchone()
    assert (productive, idle, lifetime) == (SPANS * 0.1 * 8, 2 * 8, (SPANS * 0.1 + 2) * 8)
