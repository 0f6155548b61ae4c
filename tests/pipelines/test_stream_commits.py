"""A streaming pipeline commits to the Delta store: the path Dataflow runs, run here on a local folder.

docs/metric.md's worked example (tests/worked_example.py) goes through the
streaming pipeline as Dataflow would run it (`build_streaming`, then
`commit_streaming_outputs`), on Beam's streaming DirectRunner with one
`TestStream`: events arrive in event-time order, a minute of processing time
passes after each third of them, so the sink commits a run each time, and the
stream drains. It commits to a `file://` URI, which takes the paths a gs://
store takes. The store it leaves, read as a local folder, is compared with a
batch run (`mpg run`) over the same events written as Avro files, figure by
figure. (tests/pipelines/test_streaming.py commits to a local folder.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

import worked_example
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines.streaming import build_streaming, commit_streaming_outputs
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.stream_commit import STREAM_MODE
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.transforms.read import DecodeRecords

pytestmark = pytest.mark.slow  # two pipelines end to end: scheduled first (tests/conftest.py)

STREAMS = ("scheduler", "runtime", "profiler")
SETTINGS = load_settings()
SETTINGS = type(SETTINGS)(window_s=60, accelerators=SETTINGS.accelerators, size_classes=SETTINGS.size_classes)
# Capacity keeps firing every window for max_silence_s after its last event: ten minutes, not six hours.
RUN_SETTINGS = RunSettings(allowed_lateness_s=120, max_silence_s=600)
COMMIT_EVERY_S = 60
MARTS = Path(__file__).parents[2] / "sql" / "marts"


def story(records: dict[str, list[dict]]) -> TestStream:
    """Every record at its event time, in three parts; after each, the watermark and a minute of processing time."""
    stream = TestStream(output_tags=set(STREAMS))
    timed = sorted(
        ((record["event_time"], stream_name, record) for stream_name in STREAMS for record in records[stream_name]),
        key=lambda item: (item[0], item[2]["event_id"]),
    )
    for part in (timed[:8], timed[8:16], timed[16:]):
        for _, tag, record in part:
            stream.add_elements([TimestampedValue(record, record["event_time"] / 1e6)], tag=tag)
        for tag in STREAMS:
            stream.advance_watermark_to(part[-1][0] / 1e6, tag=tag)
        stream.advance_processing_time(COMMIT_EVERY_S + 1)
    # Past every timer the keys still set (a job's last windows settle one allowed lateness after they
    # close; capacity fires up to max_silence_s after its last event), before the end: Beam's DirectRunner
    # does not hold the watermark for timers that fire as it jumps to infinity, so their rows would come
    # after the sink's last pane.
    settled_s = (
        timed[-1][0] / 1e6 + RUN_SETTINGS.max_silence_s + RUN_SETTINGS.allowed_lateness_s + 2 * SETTINGS.window_s
    )
    for tag in STREAMS:
        stream.advance_watermark_to(settled_s, tag=tag)
    stream.advance_processing_time(COMMIT_EVERY_S + 1)
    stream.advance_watermark_to_infinity()
    return stream


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-commits")
    records = worked_example.records()
    streamed = root / "streamed"
    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(options=options) as p:
        sources = p | story(records)
        decoded = {tag: sources[tag] | f"Decode{tag}" >> DecodeRecords(tag, SETTINGS.accelerators) for tag in STREAMS}
        # Through a URI, as on gs:// (no lock file, no maintenance: tests/store/test_store_on_object_storage.py).
        commit_streaming_outputs(
            build_streaming(decoded, SETTINGS, RUN_SETTINGS),
            f"file://{streamed}",
            SETTINGS,
            RUN_SETTINGS,
            source="test stream",
            commit_every_s=COMMIT_EVERY_S,
        )
    for stream_name in STREAMS:
        write_events(root / "input" / stream_name / "part-0.avro", stream_name, records[stream_name])
    as_of_us = Store(streamed).latest().as_of_us  # the batch run ends where the stream's results reach
    batch = root / "batch"
    run_batch(str(root / "input"), str(batch), SETTINGS, as_of_us, run_settings=RUN_SETTINGS, confirm_as_of=True)
    return Store(streamed), Store(batch)


def rows(store: Store, sql: str) -> list[tuple]:
    with connect(store, settings=SETTINGS) as connection:
        return connection.sql(sql).fetchall()


FIGURES = (
    "queued",
    "partial",
    "productive",
    "pending",
    "lost",
    "data_wait",
    "compile",
    "checkpoint_save",
    "checkpoint_restore",
    "init",
    "idle",
    "lifetime",
    "all_allocated",
    "ideal",
)


def test_the_stream_commits_runs_of_the_store_as_it_goes(stores):
    streamed, _ = stores
    runs = streamed.runs()
    assert len(runs) >= 2  # panes while it ran, and the last as it drained
    assert {run.mode for run in runs} == {STREAM_MODE}
    assert [run.manifest["stream"]["pane"] for run in runs] == list(range(len(runs)))
    assert all(run.manifest["reconciles"] for run in runs)


def test_every_window_of_the_job_has_the_batch_runs_figures(stores):
    columns = ", ".join(f"{figure}_chip_s" for figure in FIGURES)
    sql = f"select job_id, epoch_us(window_start), {columns} from job_window order by all"
    streamed, batch = (rows(store, sql) for store in stores)
    assert streamed == batch
    # docs/metric.md section 4, by hand: 580 s of 8 chips, 200 s of them productive.
    assert sum(row[2 + FIGURES.index("lifetime")] for row in streamed) == 580 * 8
    assert sum(row[2 + FIGURES.index("productive")] for row in streamed) == 200 * 8


@pytest.mark.parametrize("view", [path.stem for path in sorted(MARTS.glob("*.sql"))])
def test_every_view_people_query_agrees_with_the_batch_run(stores, view):
    streamed, batch = (rows(store, f"select * from {view} order by all") for store in stores)
    assert streamed == batch


def test_the_fleets_capacity_agrees_with_the_batch_run(stores):
    # Not `version`: the commit that last changed a window, which the stream's commits make at each firing.
    sql = "select * exclude (version) from capacity_window order by all"
    streamed, batch = (rows(store, sql) for store in stores)
    assert streamed == batch
    # One level of 8 chips from T0 to the as-of time.
    assert sum(row[3] for row in streamed) == 8 * (stores[0].latest().as_of_us - worked_example.T0_US) / 1e6


def test_the_job_has_the_batch_runs_record(stores):
    sql = "select job_id, workload, team, epoch_us(submit_time), epoch_us(end_time), end_reason from jobs"
    streamed, batch = (rows(store, sql) for store in stores)
    assert (
        streamed
        == batch
        == [
            (
                "j1",
                "TRAINING",
                "research",
                worked_example.T0_US,
                worked_example.T0_US + 580 * 1_000_000,
                streamed[0][-1],
            )
        ]
    )


def test_every_event_is_counted_once_as_in_the_batch_run(stores):
    streamed, batch = (store.latest().manifest["streams"] for store in stores)
    assert streamed == batch
    records = worked_example.records()
    assert {name: counts["read"] for name, counts in streamed.items()} == {name: len(records[name]) for name in STREAMS}
    assert all(counts["waiting"] == 0 for counts in streamed.values())  # drained: every event settled
