"""One job's many runtime events are computed in chunks, with one pass's figures, and chunks stay few.

A single job's runtime events between its SUBMIT and its FINISH hours apart
hold no scheduler event, where chunks used to begin only: a local run now
counts its new events (the Avro block headers' declared counts) and chunks when
they pass `CHUNK_EVENTS`, and a chunk also begins where the job's runtime and
profiler events would fill one past its share (fleet_goodput/runs/compute.py).
The budget is lowered here so that a small input is chunked as millions of
events would be, and the slicing pass reads the runtime file a few blocks at a
time (`GROUP_ROWS` lowered too), so every path of the bounded pass is taken.
"""

from __future__ import annotations

import io

import fastavro
import pytest
from fastavro.read import HEADER_SCHEMA
from test_backfill import _assert_same_tables  # its folder is on the path (pytest): the same comparison of two stores

from fleet_goodput import schemas
from fleet_goodput.core import step_runs
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.events import unpack
from fleet_goodput.runs import compute
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.compute import HOUR_US, chunk_events, chunk_length, event_time_chunks
from fleet_goodput.telemetry import columnar
from fleet_goodput.telemetry.avro_blocks import declared_records
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.transforms import slices
from fleet_goodput.transforms.read import EVENTS, READ_COUNTS

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
JOB = "job-one"
HOURS = 6
STEP_US = 5_000_000
SAVE_EVERY = 100  # steps
END_US = T0 + HOURS * HOUR_US


def _runtime_events():
    """INIT, then steps of 5 s, a checkpoint save every 100 steps, from T0 to the FINISH."""
    yield {"event_id": "r-init-s", "event_time": T0, "job_id": JOB, "type": "INIT_START", "step": None, "attempt": None}
    yield {
        "event_id": "r-init-e",
        "event_time": T0 + 1,
        "job_id": JOB,
        "type": "INIT_END",
        "step": None,
        "attempt": None,
    }
    time_us, step = T0 + 1_000_000, 1
    while time_us + STEP_US < END_US - 10_000_000:
        for kind, at_us in (("STEP_START", time_us), ("STEP_END", time_us + STEP_US)):
            yield {"event_id": f"r{step}-{kind}", "event_time": at_us, "job_id": JOB, "type": kind, "step": step}
        time_us += STEP_US
        if step % SAVE_EVERY == 0:
            for kind, at_us in (("CHECKPOINT_SAVE_START", time_us), ("CHECKPOINT_SAVE_END", time_us + 1_000_000)):
                yield {"event_id": f"r{step}-{kind}", "event_time": at_us, "job_id": JOB, "type": kind, "step": step}
            time_us += 1_000_000
        step += 1


def _write_job(root) -> int:
    """The job's scheduler file (stating it observed the job's hours, so that figures are computed),
    its runtime events in one file, a profiler sample an hour and a damaged file; returns the runtime events."""
    write_events(
        root / "scheduler" / "part-0.avro",
        "scheduler",
        [
            {
                "event_id": f"s{n}",
                "event_time": time_us,
                "job_id": job_id,
                "type": kind,
                "cluster": "c",
                "accelerator": "tpu-v5e",
                "chips": chips,
                "workload": "TRAINING" if kind == "SUBMIT" else None,
            }
            for n, (kind, job_id, time_us, chips) in enumerate(
                [
                    ("CAPACITY", None, T0, 16),
                    ("SUBMIT", JOB, T0, 8),
                    ("ALLOCATE", JOB, T0, 8),
                    ("FINISH", JOB, END_US, 0),
                ]
            )
        ],
        observed={"c": (T0, END_US)},
    )
    runtime = write_events(root / "runtime" / "part-0.avro", "runtime", _runtime_events())
    write_events(
        root / "profiler" / "part-0.avro",
        "profiler",
        [
            {
                "event_id": f"p{hour}",
                "event_time": T0 + hour * HOUR_US + 2_000_000,
                "job_id": JOB,
                "step": 1 + hour * HOUR_US // STEP_US,
                "duration_s": 5.0,
                "chips": 8,
                "ideal_flops": 1e15,
                "flops_source": "ANALYTIC",
            }
            for hour in range(HOURS)
        ],
    )
    (root / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")  # rejected once, not once a chunk
    return runtime


@pytest.mark.slow  # two runs, one of seven pipelines
def test_one_job_of_many_runtime_events_between_submit_and_finish_is_chunked_with_one_pass_figures(
    tmp_path, monkeypatch
):
    runtime = _write_job(tmp_path / "fleet")
    assert runtime > 8_000
    settings = load_settings()
    whole = run_batch(str(tmp_path / "fleet"), str(tmp_path / "whole"), settings, build_views=False)
    # As if the job's events were millions: a chunk holds 1,500 of them, and the slicing pass reads
    # the runtime file a group of 2,000 records at a time (a group of its blocks, and never all of it).
    monkeypatch.setattr(compute, "CHUNK_EVENTS", 1_500)
    monkeypatch.setattr(columnar, "GROUP_ROWS", 2_000)
    progress = []
    chunked = run_batch(
        str(tmp_path / "fleet"), str(tmp_path / "chunked"), settings, build_views=False, progress=progress.append
    )
    assert f"({runtime + 4 + HOURS:,} events) in chunks of event time of at most about " in progress[1]
    # The scheduler's events are at 00:00 and 06:00 only; the job's events fill a chunk an hour or two.
    clock = next(line for line in progress if line.startswith("Read the scheduler's clock"))
    assert " and where the other 3 file(s)' events are " in clock and ", chunks of 1 h, and decoded " in clock
    chunks = int(clock.rsplit(": ", 1)[1].split()[0])
    assert 4 <= chunks <= 7
    assert chunked.manifest["as_of_us"] == whole.manifest["as_of_us"] == END_US
    _assert_same_tables(tmp_path / "chunked", tmp_path / "whole")


def test_chunks_stay_few_however_scattered_the_events_are():
    """Two scheduler events 5,000 hours apart, and runtime events over every hour between: 20 an hour, or
    bursts of 50,000 every 100 hours and one an hour besides. Chunks hold about `most_events` each (a
    burst one of its own): fewer than 2 * events / `most_events` are added, never one an hour."""
    new = [(T0, JOB), (T0 + 5_000 * HOUR_US, JOB)]
    spread = {T0 + hour * HOUR_US: 20 for hour in range(5_000)}
    chunks = event_time_chunks(new, new, HOUR_US, counted=spread, most_events=10_000)
    assert 10 <= len(chunks) <= 2 * 100_000 // 10_000 + 2
    assert chunks[0] == (T0, TimeSlice(None, chunks[1][0], first=True))
    assert chunks[-1][1].until_us is None  # the last holds every later event
    bursts = {T0 + hour * HOUR_US: 50_000 if hour % 100 == 0 else 1 for hour in range(5_000)}
    chunks = event_time_chunks(new, new, HOUR_US, counted=bursts, most_events=10_000)
    assert len(chunks) == 2 * 50 + 1  # each burst, then the 99 hours after it, then the last scheduler event's
    assert len(chunks) <= 2 * sum(bursts.values()) // 10_000 + 2


def test_a_chunk_begins_where_the_counted_events_would_fill_it_and_at_every_scheduler_event():
    """Scheduler events at 00:00 and 10:00; 400 runtime events an hour from 00:00 to 12:00, 1,000 a chunk:
    chunks begin at 00:00, 02:00 (the first three hours would hold 1,200), 04:00, 06:00, 08:00 and 10:00
    (a scheduler event's). Runtime events before the first scheduler event are the first chunk's: an hour
    of them before 00:00 fills it an hour sooner."""
    new = [(T0, JOB), (T0 + 10 * HOUR_US, JOB)]
    counted = {T0 + hour * HOUR_US: 400 for hour in range(12)}
    chunks = event_time_chunks(new, new, HOUR_US, counted=counted, most_events=1_000)
    assert [begin for begin, _ in chunks] == [T0 + hours * HOUR_US for hours in (0, 2, 4, 6, 8, 10)]
    assert chunks[1] == (T0 + 2 * HOUR_US, TimeSlice(T0 + 2 * HOUR_US, T0 + 4 * HOUR_US, first=False))
    earlier = {**counted, T0 - HOUR_US: 400}
    chunks = event_time_chunks(new, new, HOUR_US, counted=earlier, most_events=1_000)
    assert [begin for begin, _ in chunks] == [T0 + hours * HOUR_US for hours in (0, 1, 3, 5, 7, 9, 10)]
    assert event_time_chunks(new, new, HOUR_US) == event_time_chunks(
        new, new, HOUR_US, counted=counted, most_events=10**6
    )
    assert event_time_chunks([], [], HOUR_US, counted=counted, most_events=1_000) == [
        (None, TimeSlice())
    ]  # no scheduler event


@pytest.mark.parametrize(
    ("input_mib", "events", "span_hours", "chunk_hours", "most_events"),
    [
        (16, 3_000_000, 42, 12, 1_250_000),  # one job's compact runtime events: the events are the tighter
        (100, 5_000_000, 100, 24, 1_200_000),  # a fleet: 24 MiB, a day of it, hold 1.2 million events
        (240, 1_000_000, 100, 8, 100_000),  # large events: the bytes are the tighter, in hours and in events
    ],
)
def test_a_chunk_holds_about_chunk_events_or_chunk_input_bytes_whichever_is_the_tighter(
    input_mib, events, span_hours, chunk_hours, most_events
):
    assert compute.CHUNK_EVENTS == 1_250_000
    new = [(T0, "a"), (T0 + span_hours * HOUR_US, "b")]
    assert chunk_length(input_mib * 2**20, new, events) == chunk_hours * HOUR_US
    assert chunk_events(input_mib * 2**20, events) == most_events


def test_a_files_events_are_counted_from_its_block_headers(tmp_path):
    """What fastavro reads of a file of many blocks, by codec; what comes before a block that declares more
    than it can hold; nothing of a file that is not Avro."""
    for codec in ("null", "deflate"):
        written = write_events(tmp_path / f"{codec}.avro", "runtime", _runtime_events(), codec=codec)
        with open(tmp_path / f"{codec}.avro", "rb") as handle:
            blocks = list(fastavro.block_reader(handle))
            assert len(blocks) > 3
            handle.seek(0)
            assert declared_records(handle) == written == sum(block.num_records for block in blocks)
    buffer = io.BytesIO()
    fastavro.writer(buffer, schemas.load("runtime"), list(_runtime_events())[:10], codec="null")
    data = buffer.getvalue()
    buffer.seek(0)
    fastavro.schemaless_reader(buffer, HEADER_SCHEMA)
    header_end = buffer.tell()
    assert data[header_end] == 20  # the first block declares 10 records (zig-zag)
    hostile = data[:header_end] + b"\xfe\xff\xff\xff\x0f" + data[header_end + 1 :]  # 2**31 - 1 records
    assert declared_records(io.BytesIO(data)) == 10 and declared_records(io.BytesIO(hostile)) == 0
    assert declared_records(io.BytesIO(b"Obj\x01 not really avro")) == 0


def test_a_files_events_are_counted_by_window_from_its_event_times(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "GROUP_ROWS", 2_000)  # several groups of blocks
    written = write_events(tmp_path / "runtime.avro", "runtime", _runtime_events())
    counts = columnar.event_time_counts("runtime", (tmp_path / "runtime.avro").read_bytes(), HOUR_US)
    assert sorted(counts) == [T0 + hour * HOUR_US for hour in range(HOURS)] and sum(counts.values()) == written
    assert columnar.event_time_counts("runtime", b"Obj\x01 not really avro", HOUR_US) == {}


def test_a_file_found_unclean_after_its_first_groups_is_sliced_as_the_reference_decodes_it(tmp_path, monkeypatch):
    """The slicing pass writes a large file's groups of blocks as it reads them; where a later group is not
    provably clean, what it wrote of the file is deleted and the reference decode of the whole file written
    instead: the same events, read count and rejections as decoding the file for each chunk alone."""
    monkeypatch.setattr(columnar, "GROUP_ROWS", 2_000)
    events = list(_runtime_events())
    events[-1] = {**events[-1], "event_id": "an id with spaces"}  # past the clean-row bounds: the reference's to judge
    path = str(tmp_path / "runtime" / "part-0.avro")
    write_events(path, "runtime", events)
    chunks = [TimeSlice(None, T0 + 3 * HOUR_US), TimeSlice(T0 + 3 * HOUR_US, None, first=False)]
    parts = list(columnar.slice_input_files("runtime", [path], None, chunks, step_blocks=True))
    assert [type(part).__name__ for part in parts].count("SlicedPart") > 2 and columnar.Retracted(0) in parts
    merged = columnar.decode_input_files_slices("runtime", [path], None, chunks, step_blocks=True)
    for during, decoded in zip(chunks, merged):
        alone = decode_input_file("runtime", path, None, during, step_blocks=True)
        assert _events(decoded.batches[JOB]) == _events(alone.batches[JOB]) and alone.batches[JOB]
        assert (decoded.read, decoded.rejected) == (alone.read, alone.rejected)

    written = slices._write_slices((0, ("runtime", [path])), None, chunks, str(tmp_path / "slices"))
    left = sorted((tmp_path / "slices").glob("chunk-*/*.marshal"))
    assert written == len(left) == 2  # the reference's share of each chunk; the groups' parts deleted
    pairs = [pair for slice_path in left for pair in slices.read_slice(str(slice_path))]
    sliced = sum(len(unpack(packed)) for tag, value in pairs if tag == EVENTS for _, packed in [value])
    assert sliced == sum(len(decode_input_file("runtime", path, None, during).batches[JOB]) for during in chunks)
    assert [value for tag, value in pairs if tag == READ_COUNTS] == [(("runtime", "read"), len(events))]


def _events(batch: list) -> list:
    """A job's events one by one, in event order: its STEP_BLOCKs taken apart."""
    return sorted(step_runs.originals(step_runs.collapse(batch)))
