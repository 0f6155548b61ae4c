"""The read step sends a key's events of a bundle's files as one element, and the staging step
writes each table's rows by day where they are computed (transforms/read.py, transforms/write.py).

Both on Beam's in-process runner, over real files: simulated Avro telemetry
and staged Parquet read back with pyarrow.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from fleet_goodput import schemas
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.events import unpack
from fleet_goodput.core.figure_vector import FIGURES, MICROS
from fleet_goodput.simulator import simulate
from fleet_goodput.store.tables import JOB_WINDOW, utc_day
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.transforms.goodput import to_job_window_row
from fleet_goodput.transforms.read import EVENTS, ReadAvroFiles, _DecodeAvroFile
from fleet_goodput.transforms.write import StageTables, _StageTableDaysFn

ACCELERATORS = load_settings().accelerators
DAY_US = 86_400 * MICROS
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00Z


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("fleet")
    simulate(root, seed=3, hours=1)
    return {stream: sorted(str(path) for path in (root / stream).glob("*.avro")) for stream in schemas.STREAMS}


def _events_by_key(elements) -> dict[str, Counter]:
    by_key: dict[str, Counter] = {}
    for key, events in elements:
        by_key.setdefault(key, Counter()).update(events)
    return by_key


def _check_read_step(files: dict[str, list[str]], expected_keys: list[str], expected: list[tuple[str, list]]):
    """Run the read step over `files`: its elements must be of the keys `expected_keys` (one per
    element), and hold the events of `expected` (key, events), none lost or doubled."""
    expected_events = _events_by_key(expected)

    def check(elements):  # runs in the pipeline: a failed assert fails it
        unpacked = [(key, unpack(packed)) for key, packed in elements]
        assert sorted(key for key, _ in unpacked) == sorted(expected_keys)
        assert _events_by_key(unpacked) == expected_events

    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        assert_that((p | ReadAvroFiles(files, ACCELERATORS))[EVENTS], check)


def _file_by_file(files: dict[str, list[str]]) -> list[tuple[str, list]]:
    """What decoding each file alone gives: one batch per key and file."""
    return [
        (key, batch)
        for stream, paths in files.items()
        for path in paths
        for key, batch in decode_input_file(stream, path, ACCELERATORS, step_blocks=True).batches.items()
    ]


def test_a_keys_events_of_every_file_of_a_bundle_leave_as_one_element(fleet):
    expected = _file_by_file(fleet)
    keys = {key for key, _ in expected}
    assert len(expected) > len(keys)  # a job's events are spread over several files here
    _check_read_step(fleet, sorted(keys), expected)  # one element per key: the files are one bundle, few rows


def test_events_leave_once_enough_rows_wait(fleet, monkeypatch):
    # With room for one row, every file's keys leave as soon as the file is decoded.
    monkeypatch.setattr(_DecodeAvroFile, "FLUSH_ROWS", 1)
    expected = _file_by_file(fleet)
    _check_read_step(fleet, [key for key, _ in expected], expected)


def _job_window_rows(days: int, per_day: int) -> list[dict]:
    vector = [index * MICROS for index in range(len(FIGURES))] + [1.5]
    return [
        to_job_window_row((f"job-{number}", T0 + day * DAY_US + number * 3_600 * MICROS, T0, vector))
        for day in range(days)
        for number in range(per_day)
    ]


def _staged(tmp_path: Path, rows: list[dict]) -> dict[str, list[Path]]:
    staging = tmp_path / "staging"
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        _ = {"job_window": p | beam.Create(rows, reshuffle=False)} | StageTables(
            {"job_window": JOB_WINDOW}, str(staging)
        )
    files: dict[str, list[Path]] = {}
    for path in sorted((staging / "job_window").glob("*.parquet")):
        files.setdefault(path.name[:10], []).append(path)
    return files


def _read_back(files: dict[str, list[Path]]) -> list[tuple]:
    rows = []
    for day, paths in files.items():
        for path in paths:
            table = pq.read_table(path)
            assert set(table.column("date").to_pylist()) == {day}  # each file holds its day's rows only
            rows += [
                (row["job_id"], row["window_start"], row["productive_chip_s"], row["ideal_chip_s"])
                for row in table.to_pylist()
            ]
    return sorted(rows)


def _expected(rows: list[dict]) -> list[tuple]:
    return sorted(
        (
            row["job_id"],
            JOB_WINDOW.to_arrow([row]).column("window_start")[0].as_py(),
            row["productive_chip_s"],
            row["ideal_chip_s"],
        )
        for row in rows
    )


def test_a_tables_rows_are_staged_one_file_per_day(tmp_path):
    rows = _job_window_rows(days=3, per_day=5)
    files = _staged(tmp_path, rows)
    assert {day: len(paths) for day, paths in files.items()} == {utc_day(T0 + d * DAY_US): 1 for d in range(3)}
    assert _read_back(files) == _expected(rows)


def test_a_day_of_many_rows_is_staged_in_several_files(tmp_path, monkeypatch):
    monkeypatch.setattr(_StageTableDaysFn, "FLUSH_ROWS", 2)
    rows = _job_window_rows(days=2, per_day=5)
    files = _staged(tmp_path, rows)
    assert {day: len(paths) for day, paths in files.items()} == {utc_day(T0): 3, utc_day(T0 + DAY_US): 3}
    assert _read_back(files) == _expected(rows)
