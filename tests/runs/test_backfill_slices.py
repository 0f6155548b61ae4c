"""A backfill decodes each file once into its chunks, and a large input is chunked without being asked.

A group of new files' share of every chunk is what decoding each for that
chunk alone gives (transforms/slices.py writes those shares before the
chunks run); the
length of the chunks a run picks by itself follows the input's size and the
time it spans; and a run given no --chunk_hours over more input than
`CHUNK_INPUT_BYTES` computes in chunks with one pass's figures.
"""

from __future__ import annotations

import pytest
from test_backfill import _assert_same_tables  # its folder is on the path (pytest): the same comparison of two stores

from fleet_goodput.core import step_runs
from fleet_goodput.core.asof import kept_times
from fleet_goodput.core.config import load_settings
from fleet_goodput.runs import compute
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.compute import HOUR_US, chunk_length
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.layout import STAGING
from fleet_goodput.telemetry.columnar import decode_input_file, decode_input_files_slices
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.transforms.slices import file_groups

ACCELERATORS = load_settings(None).accelerators
MIB = 2**20


def test_files_decoded_together_into_slices_give_each_file_and_slice_as_decoded_alone(tmp_path):
    """The same events of each job (a STEP_BLOCK of several files taken apart), rejected rows, records
    read and kept times, from files decoded in columns and by the reference path."""
    simulate(tmp_path / "fleet", seed=3, hours=5, jobs=10)
    (tmp_path / "fleet" / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")
    edges = [START_US + 2 * HOUR_US, START_US + 3 * HOUR_US + 17]
    slices = [
        TimeSlice(None, edges[0]),
        TimeSlice(edges[0], edges[1], first=False),
        TimeSlice(edges[1], None, first=False),
    ]
    for stream in ("scheduler", "runtime", "profiler"):
        paths = sorted(str(path) for path in (tmp_path / "fleet" / stream).glob("*.avro"))
        assert len(paths) >= 2
        together = decode_input_files_slices(stream, paths, ACCELERATORS, slices, step_blocks=True)
        for during, merged in zip(slices, together):
            alone = [decode_input_file(stream, path, ACCELERATORS, during, step_blocks=True) for path in paths]
            keys = {key for decoded in alone for key in decoded.batches}
            assert set(merged.batches) == keys and keys, (stream, during)
            for key in keys:
                assert _events(merged.batches[key]) == _events(
                    [event for decoded in alone for event in decoded.batches.get(key, [])]
                ), (stream, key)
            assert sorted(map(repr, merged.rejected)) == sorted(repr(row) for d in alone for row in d.rejected)
            assert merged.read == sum(decoded.read for decoded in alone)
            assert merged.kept_times == kept_times(*(decoded.kept_times for decoded in alone))


def _events(batch: list) -> list:
    """A job's events one by one, in event order: its STEP_BLOCKs taken apart."""
    return sorted(step_runs.originals(step_runs.collapse(batch)))


def test_files_are_grouped_by_stream_up_to_group_bytes():
    files = [
        ("runtime", "a", 5),
        ("runtime", "b", 3),
        ("runtime", "c", 1),
        ("runtime", "d", 20),
        ("profiler", "e", 1),
        ("profiler", "f", 1),
    ]
    assert file_groups(files, most_bytes=8) == [
        ("runtime", ["a", "b"]),
        ("runtime", ["c"]),
        ("runtime", ["d"]),
        ("profiler", ["e", "f"]),
    ]


@pytest.mark.parametrize(
    ("input_mib", "span_hours", "chunk_hours"),
    [
        (100, 100, 24),  # 1 MiB an hour: a day holds 24 MiB
        (10, 240, 576),  # little input over a long time: whole days, 24 of them
        (240, 100, 8),  # 2.4 MiB an hour: 10 hours would hold 24 MiB; 8 divides a day
        (10_000, 10, 1),  # more than 24 MiB an hour: an hour at least
    ],
)
def test_a_chunk_holds_about_chunk_input_bytes_in_whole_hours_that_start_at_midnight(
    input_mib, span_hours, chunk_hours
):
    assert compute.CHUNK_INPUT_BYTES == 24 * MIB
    new = [(START_US, "a"), (START_US + span_hours * HOUR_US, "b")]
    assert chunk_length(input_mib * MIB, new) == chunk_hours * HOUR_US


@pytest.mark.slow  # two runs
def test_a_run_over_more_input_than_chunk_input_bytes_is_chunked_with_one_pass_figures(tmp_path, monkeypatch):
    simulate(tmp_path / "fleet", seed=7, hours=30, jobs=12)
    (tmp_path / "fleet" / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")  # rejected once
    settings = load_settings()
    whole = run_batch(str(tmp_path / "fleet"), str(tmp_path / "whole"), settings, build_views=False)
    # As if this input were large: chunks hold a third of its bytes, so about ten of its thirty hours.
    size = sum(path.stat().st_size for path in (tmp_path / "fleet").glob("*/*.avro"))
    monkeypatch.setattr(compute, "CHUNK_INPUT_BYTES", size // 3)
    progress = []
    chunked = run_batch(
        str(tmp_path / "fleet"), str(tmp_path / "chunked"), settings, build_views=False, progress=progress.append
    )
    assert " in chunks of event time of at most about " in progress[1]
    clock = next(line for line in progress if line.startswith("Read the scheduler's clock"))
    assert ", chunks of 8 h, and decoded the " in clock and clock.endswith(": 4 chunk(s) of event time")
    assert chunked.run.run_id == 1 and chunked.manifest["as_of_us"] == whole.manifest["as_of_us"]
    _assert_same_tables(tmp_path / "chunked", tmp_path / "whole")
    staging = tmp_path / "chunked" / STAGING
    assert not staging.exists() or not any(staging.iterdir())  # the slices went with the run's staging
