"""Each Beam composite of transforms/ on its own, on TestPipeline with `assert_that` (Beam's
`leader_board_test.py`), fed in memory with `beam.Create` or, for the streaming one, a `TestStream`.

Inputs are the worked example of docs/metric.md section 4 (tests/worked_example.py): job j1 on 8
chips of tpu-v5e, 580 s from SUBMIT to FINISH, and cluster c1's capacity of 8 chips, with event
ids j1-00 … j1-19 in the order of its TIMELINE. Every expected value is written out here from that
timeline; the whole graph on the same example is tests/pipelines/test_transforms.py's.
"""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

import worked_example
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.events import unpack
from fleet_goodput.core.figure_vector import FIGURES, IDEAL
from fleet_goodput.core.keys import capacity_key
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines.goodput import key_rules
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.transforms.goodput import ComputeGoodput
from fleet_goodput.transforms.read import EVENTS, KEPT_TIMES, READ_COUNTS, REJECTED, DecodeRecords
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.transforms.sessionize import SessionizeKeys
from fleet_goodput.transforms.slices import ReadDecodedSlices, SliceFiles, chunk_folder
from fleet_goodput.transforms.stream_sessionize import StreamSessionize
from fleet_goodput.transforms.write import StageRows

pytestmark = pytest.mark.slow  # a dozen small pipelines, one of them streaming: scheduled first (tests/conftest.py)

SETTINGS = load_settings()
RULES = key_rules(SETTINGS, RunSettings())  # one-hour windows, one hour of allowed lateness
T0 = worked_example.T0_US
S = 1_000_000
CHIPS = 8
CAPACITY = capacity_key("c1", "tpu-v5e")
STREAMS = ("scheduler", "runtime", "profiler")
# The worked example's scheduler events (TIMELINE positions 0, 1, 13, 14, 19) and the capacity level.
SCHEDULER_TIMES = [
    (T0, "j1"),
    (T0 + 100 * S, "j1"),
    (T0 + 360 * S, "j1"),
    (T0 + 460 * S, "j1"),
    (T0 + 580 * S, "j1"),
    (T0, CAPACITY),
]


def beam_pipeline(streaming: bool = False) -> TestPipeline:
    if streaming:
        options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
        options.view_as(StandardOptions).streaming = True
        return TestPipeline(options=options)
    return TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]))


def _decoded(p, records: dict[str, list[dict]]) -> dict:
    return {
        stream: p
        | f"Create{stream}" >> beam.Create(records[stream])
        | f"Decode{stream}" >> DecodeRecords(stream, SETTINGS.accelerators)
        for stream in STREAMS
    }


def _ids(keyed_batch) -> tuple[str, list[str]]:
    key, packed = keyed_batch
    return key, sorted(event[2] for event in unpack(packed))  # Event's event_id


# ---- DecodeRecords ----------------------------------------------------------------
def test_decode_records_keys_each_accepted_event_and_rejects_the_rest_with_a_reason():
    records = worked_example.records()["scheduler"]
    records.append({**records[0], "event_id": "x1", "accelerator": "h900"})
    with beam_pipeline() as p:
        decoded = p | beam.Create(records) | DecodeRecords("scheduler", SETTINGS.accelerators)
        assert_that(
            decoded[EVENTS] | beam.Map(_ids),
            equal_to(
                [
                    ("j1", ["j1-00"]),
                    ("j1", ["j1-01"]),
                    ("j1", ["j1-13"]),
                    ("j1", ["j1-14"]),
                    ("j1", ["j1-19"]),
                    (CAPACITY, ["cap-c1"]),
                ]
            ),
            label="Events",
        )
        assert_that(
            decoded[REJECTED] | beam.Map(lambda row: (row["event_id"], row["reason"])),
            equal_to([("x1", "unknown accelerator 'h900': not in the accelerator catalogue")]),
            label="Rejected",
        )
        assert_that(
            decoded[READ_COUNTS] | beam.CombinePerKey(sum), equal_to([(("scheduler", "read"), 7)]), label="ReadCounts"
        )
        assert_that(
            decoded[KEPT_TIMES] | beam.FlatMap(lambda times: times), equal_to(SCHEDULER_TIMES), label="LatestTimes"
        )


# ---- ComputeGoodput ---------------------------------------------------------------
def _vector(profiled_productive_us: int, ideal_chip_s: float) -> list:
    """Figure i holds i chip-seconds (in chip-microseconds), but profiled_productive, which is given."""
    vector = [index * S for index in range(len(FIGURES))]
    vector[FIGURES.index("profiled_productive")] = profiled_productive_us
    return vector + [ideal_chip_s]


def test_compute_goodput_turns_vectors_into_rows_in_chip_seconds_and_an_unknown_ideal_into_null():
    profiled, unprofiled = _vector(40 * S, 12.5), _vector(0, 0.0)
    expected_figures = {f"{figure}_chip_s": float(index) for index, figure in enumerate(FIGURES)}
    expected = [
        {
            "job_id": "j1",
            "window_start_us": T0,
            "version_us": T0 + 580 * S,
            **expected_figures,
            "profiled_productive_chip_s": 40.0,
            "ideal_chip_s": 12.5,
        },
        # No profiled productive time in the window: its ideal is unknown, not 0 (docs/metric.md section 1).
        {
            "job_id": "j2",
            "window_start_us": T0 + 3600 * S,
            "version_us": T0 + 580 * S,
            **expected_figures,
            "profiled_productive_chip_s": 0.0,
            "ideal_chip_s": None,
        },
    ]
    with beam_pipeline() as p:
        rows = (
            p
            | beam.Create([("j1", T0, T0 + 580 * S, profiled), ("j2", T0 + 3600 * S, T0 + 580 * S, unprofiled)])
            | ComputeGoodput()
        )
        assert_that(rows, equal_to(expected))


# ---- SessionizeKeys ---------------------------------------------------------------
def _figures(row) -> tuple:
    key, window_start_us, version_us, vector = row
    chip_s = {figure: vector[FIGURES.index(figure)] / S for figure in ("lifetime", "queued", "productive", "lost")}
    return key, window_start_us, version_us, chip_s, vector[IDEAL]


def test_sessionize_keys_advances_every_key_to_the_scheduler_clock():
    with beam_pipeline() as p:
        decoded = _decoded(p, worked_example.records())
        inputs = {
            "events": [decoded[s][EVENTS] for s in STREAMS] | "AllEvents" >> beam.Flatten(),
            "kept_times": [decoded[s][KEPT_TIMES] for s in STREAMS] | "AllTimes" >> beam.Flatten(),
        }
        outputs = inputs | SessionizeKeys(RULES, Continuation(), given_as_of_us=None)
        # The clock reaches the latest scheduler event, j1's FINISH at 580 s (kept latest first).
        latest = sorted(SCHEDULER_TIMES, reverse=True)
        assert_that(
            outputs["clock"],
            equal_to([{"as_of_us": T0 + 580 * S, "kept_times": latest, "history_start_us": None}]),
            label="Clock",
        )
        assert_that(outputs["as_of"], equal_to([T0 + 580 * S]), label="AsOf")
        # docs/metric.md section 4 in chip-seconds (8 chips): lifetime 580 s, queued 200 s (0-100 and
        # 360-460), productive 200 s, lost 60 s (steps 11-16, undone by the restore to step 10), ideal
        # 100 s; the whole story is in the first one-hour window, as of (version) 580 s.
        assert_that(
            outputs["window_vectors"] | beam.Map(_figures),
            equal_to(
                [
                    (
                        "j1",
                        T0,
                        T0 + 580 * S,
                        {"lifetime": 580 * CHIPS, "queued": 200 * CHIPS, "productive": 200 * CHIPS, "lost": 60 * CHIPS},
                        100.0 * CHIPS,
                    )
                ]
            ),
            label="Windows",
        )
        assert_that(
            outputs["jobs"] | beam.Map(lambda row: (row["job_id"], row["status"], row["version_us"])),
            equal_to([("j1", "FINISHED", T0 + 580 * S)]),
            label="Jobs",
        )
        assert_that(
            outputs["capacity"]
            | beam.Map(
                lambda row: (row["cluster"], row["accelerator"], row["start_time_us"], row["end_time_us"], row["chips"])
            ),
            equal_to([("c1", "tpu-v5e", T0, T0 + 580 * S, CHIPS)]),
            label="Capacity",
        )
        # Nothing is late or rejected. An hour of allowed lateness leaves every fate provisional: the 6
        # scheduler, 14 runtime and 1 profiler events are counted pending, and both keys keep their state.
        assert_that(outputs["late"], equal_to([]), label="Late")
        assert_that(
            (outputs["rejected"], outputs["rejected_pending"]) | "AllRejected" >> beam.Flatten(),
            equal_to([]),
            label="Rejected",
        )
        assert_that(
            outputs["pending_counts"] | "SumPending" >> beam.CombinePerKey(sum),
            equal_to([(("scheduler", "accepted"), 6), (("runtime", "accepted"), 14), (("profiler", "accepted"), 1)]),
            label="PendingCounts",
        )
        assert_that(outputs["state"] | beam.Map(lambda row: row["key"]), equal_to(["j1", CAPACITY]), label="State")


def test_sessionize_keys_before_any_scheduler_event_holds_every_event_with_its_reason():
    records = {"scheduler": [], "runtime": worked_example.records()["runtime"][:2], "profiler": []}
    with beam_pipeline() as p:
        decoded = _decoded(p, records)
        inputs = {
            "events": [decoded[s][EVENTS] for s in STREAMS] | "AllEvents" >> beam.Flatten(),
            "kept_times": [decoded[s][KEPT_TIMES] for s in STREAMS] | "AllTimes" >> beam.Flatten(),
        }
        outputs = inputs | SessionizeKeys(RULES, Continuation(), given_as_of_us=None)
        assert_that(
            outputs["clock"], equal_to([{"as_of_us": None, "kept_times": [], "history_start_us": None}]), label="Clock"
        )
        # j1's INIT_START and INIT_END (positions 2 and 3) wait, their rejection provisional: no clock to place them.
        assert_that(
            outputs["rejected_pending"] | beam.Map(lambda row: row["event_id"]),
            equal_to(["j1-02", "j1-03"]),
            label="Pending",
        )
        assert_that(outputs["window_vectors"], equal_to([]), label="NoWindow")
        assert_that(outputs["state"] | beam.Map(lambda row: row["key"]), equal_to(["j1"]), label="State")


# ---- SliceFiles and ReadDecodedSlices ---------------------------------------------------
# The scheduler events and the profiler sample keep their ids through decoding (runtime step events
# travel as step runs): CAPACITY, SUBMIT and ALLOCATE at 0-100 s and the sample at 240 s, then
# PREEMPT, ALLOCATE and FINISH at 360-580 s.
KEPT_IDS = {"cap-c1", "j1-00", "j1-01", "j1-07", "j1-13", "j1-14", "j1-19"}


def _scheduler_and_profiler_ids(keyed_batch) -> list[tuple[str, str]]:
    key, ids = _ids(keyed_batch)
    return [(key, event_id) for event_id in ids if event_id in KEPT_IDS]


def test_files_are_decoded_once_into_chunks_that_read_back_as_their_share(tmp_path):
    for stream, records in worked_example.records().items():
        write_events(tmp_path / "in" / f"{stream}.avro", stream, records)
    groups = [(stream, [str(tmp_path / "in" / f"{stream}.avro")]) for stream in STREAMS]
    chunks = [TimeSlice(T0, T0 + 300 * S, first=True), TimeSlice(T0 + 300 * S, None, first=False)]
    folder = str(tmp_path / "slices")
    with beam_pipeline() as p:
        # Scheduler and runtime events fall on both sides of 300 s; the one profiler sample (240 s)
        # only before it, and a later chunk reports no read count: the profiler file gives one slice.
        assert_that(p | SliceFiles(groups, SETTINGS.accelerators, chunks, folder), equal_to([2, 2, 1]))

    def read_chunk(chunk: int):
        return ReadDecodedSlices(sorted(str(path) for path in Path(chunk_folder(folder, chunk)).glob("*.marshal")))

    with beam_pipeline() as p:
        first, later = p | "First" >> read_chunk(0), p | "Later" >> read_chunk(1)
        assert_that(
            first[EVENTS] | "FirstIds" >> beam.FlatMap(_scheduler_and_profiler_ids),
            equal_to([(CAPACITY, "cap-c1"), ("j1", "j1-00"), ("j1", "j1-01"), ("j1", "j1-07")]),
            label="FirstEvents",
        )
        assert_that(
            later[EVENTS] | "LaterIds" >> beam.FlatMap(_scheduler_and_profiler_ids),
            equal_to([("j1", "j1-13"), ("j1", "j1-14"), ("j1", "j1-19")]),
            label="LaterEvents",
        )
        # Records are read, and counted, once: in the first chunk (6 scheduler, 14 runtime, 1 profiler).
        assert_that(
            first[READ_COUNTS],
            equal_to([(("scheduler", "read"), 6), (("runtime", "read"), 14), (("profiler", "read"), 1)]),
            label="FirstCounts",
        )
        assert_that(later[READ_COUNTS], equal_to([]), label="LaterCounts")
        assert_that(
            first[KEPT_TIMES] | "FirstTimes" >> beam.FlatMap(lambda times: times),
            equal_to([(T0 + 100 * S, "j1"), (T0, "j1"), (T0, CAPACITY)]),
            label="FirstTimes",
        )
        assert_that(
            later[KEPT_TIMES] | "LaterTimes" >> beam.FlatMap(lambda times: times),
            equal_to([(T0 + 580 * S, "j1"), (T0 + 460 * S, "j1"), (T0 + 360 * S, "j1")]),
            label="LaterTimes",
        )


# ---- StageRows ------------------------------------------------
def test_stage_rows_writes_the_rows_to_parquet_and_outputs_the_paths(tmp_path):
    schema = pa.schema([("key", pa.string()), ("blob", pa.binary())])
    rows = [{"key": "j1", "blob": b"\x00\x01"}, {"key": "j2", "blob": b""}]

    def read_back(paths):  # runs in the pipeline: a failed assert fails it
        assert (
            sorted((row for path in paths for row in pq.read_table(path).to_pylist()), key=lambda row: row["key"])
            == rows
        )

    with beam_pipeline() as p:
        assert_that(p | beam.Create(rows) | StageRows(schema, str(tmp_path / "state")), read_back)


# ---- StreamSessionize ----------------------------------------------------------------
def _stamped(record: dict) -> TimestampedValue:
    return TimestampedValue(record, record["event_time"] / 1e6)


def test_stream_sessionize_emits_each_window_when_it_closes_and_a_late_event_apart():
    """One-minute windows, no allowed lateness. j1 is submitted and allocated 8 chips at 0 and finishes
    at 90 s: window 0 (0-60 s) closes with 60 s of lifetime, window 1 with the last 30 s. Its SUBMIT
    delivered again after both windows closed is late: behind the last firing (120 s) by 120 s."""
    rules = key_rules(
        type(SETTINGS)(window_s=60, accelerators=SETTINGS.accelerators, size_classes=SETTINGS.size_classes),
        RunSettings(allowed_lateness_s=0, max_silence_s=600),
    )
    submit, allocate, finish = (r for n, r in enumerate(worked_example.records()["scheduler"]) if n in (0, 1, 4))
    finish = {**finish, "event_time": T0 + 90 * S}
    again = {**submit, "event_id": "j1-00-again"}
    stream = (
        TestStream()
        .add_elements([_stamped(submit), _stamped(allocate), _stamped(finish)])
        .advance_watermark_to(T0 / 1e6 + 121)
        .add_elements([_stamped(again)])
        .advance_watermark_to_infinity()
    )
    with beam_pipeline(streaming=True) as p:
        decoded = p | stream | DecodeRecords("scheduler", SETTINGS.accelerators)
        outputs = decoded[EVENTS] | StreamSessionize(rules)
        assert_that(
            outputs["window_vectors"] | beam.Map(lambda row: (row[1], row[3][FIGURES.index("lifetime")] / S)),
            equal_to([(T0, 60.0 * CHIPS), (T0 + 60 * S, 30.0 * CHIPS)]),
            label="Windows",
        )
        assert_that(
            outputs["late"] | beam.Map(lambda row: (row["event_id"], row["lateness_s"])),
            equal_to([("j1-00-again", 120.0)]),
            label="Late",
        )
