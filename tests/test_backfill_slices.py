"""A backfill decodes each file once into its chunks, and a large input is chunked without being asked.

Each new file's share of every chunk is what decoding it for that chunk alone
gives (transforms/slices.py writes those shares before the chunks run); the
length of the chunks a run picks by itself follows the input's size and the
time it spans; and a run given no --chunk_hours over more input than
`CHUNK_INPUT_BYTES` computes in chunks with one pass's figures.
"""

from __future__ import annotations

import pytest
from test_backfill import _assert_same_tables  # tests/ is on the path: the same comparison of two stores

from fleet_goodput import batch
from fleet_goodput.batch import HOUR_US, chunk_length, run_batch
from fleet_goodput.columnar import decode_input_file, decode_input_file_slices
from fleet_goodput.config import load_settings
from fleet_goodput.decode import TimeSlice
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store import STAGING

ACCELERATORS = load_settings(None).accelerators
MIB = 2**20


def test_a_file_decoded_once_into_slices_gives_each_slice_as_decoded_alone(tmp_path):
    simulate(tmp_path / "fleet", seed=3, hours=5, jobs=10)
    (tmp_path / "fleet" / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")
    edges = [START_US + 2 * HOUR_US, START_US + 3 * HOUR_US + 17]
    slices = [TimeSlice(None, edges[0]), TimeSlice(edges[0], edges[1], first=False),
              TimeSlice(edges[1], None, first=False)]
    files = sorted((tmp_path / "fleet").glob("*/*.avro"))
    assert {path.parent.name for path in files} == {"scheduler", "runtime", "profiler"}
    for path in files:
        stream = path.parent.name
        once = decode_input_file_slices(stream, str(path), ACCELERATORS, slices, step_blocks=True)
        alone = [decode_input_file(stream, str(path), ACCELERATORS, during, step_blocks=True) for during in slices]
        assert [(dict(d.batches), d.rejected, d.read, d.latest_times) for d in once] == \
            [(dict(d.batches), d.rejected, d.read, d.latest_times) for d in alone], path
        if path.name != "damaged.avro":
            assert sum(len(d.batches) > 0 for d in once) >= 2, path  # the cuts fall inside the file


@pytest.mark.parametrize(("input_mib", "span_hours", "chunk_hours"), [
    (100, 100, 24),      # 1 MiB an hour: a day holds 24 MiB
    (10, 240, 576),      # little input over a long time: whole days, 24 of them
    (240, 100, 8),       # 2.4 MiB an hour: 10 hours would hold 24 MiB; 8 divides a day
    (10_000, 10, 1),     # more than 24 MiB an hour: an hour at least
])
def test_a_chunk_holds_about_chunk_input_bytes_in_whole_hours_that_start_at_midnight(input_mib, span_hours,
                                                                                       chunk_hours):
    assert batch.CHUNK_INPUT_BYTES == 24 * MIB
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
    monkeypatch.setattr(batch, "CHUNK_INPUT_BYTES", size // 3)
    progress = []
    chunked = run_batch(str(tmp_path / "fleet"), str(tmp_path / "chunked"), settings, build_views=False,
                        progress=progress.append)
    assert " in chunks of event time of at most about " in progress[1]
    clock = next(line for line in progress if line.startswith("Read the scheduler's clock"))
    assert ", chunks of 8 h, and decoded the " in clock and clock.endswith(": 4 chunk(s) of event time")
    assert chunked.run.run_id == 1 and chunked.manifest["as_of_us"] == whole.manifest["as_of_us"]
    _assert_same_tables(tmp_path / "chunked", tmp_path / "whole")
    staging = tmp_path / "chunked" / STAGING
    assert not staging.exists() or not any(staging.iterdir())  # the slices went with the run's staging
