"""Streaming semantics with one TestStream: a tag per source, watermarks advanced per tag.

One TRAINING job on 8 chips, one-minute windows, two minutes of allowed
lateness. The story, in event time (seconds after T0):

    0      SUBMIT, ALLOCATE 8 chips
    10-50  steps 1-4                         window 0 closes with them pending
    20-25  a data wait, delivered late       inside the lateness: window 0 updated
    70-75  checkpoint of step 4              arrives after window 0 closed: pending → productive
    130-170 steps 5-8                        window 2 closes with them pending
    185    PREEMPT to 0 chips                arrives after window 2 closed: pending → lost
    45     a profiler sample (ideal 5 s per step): the first, so it prices steps 1-4
    15     another sample, delivered last beyond the lateness: the `late` table

Assertions are per window, on the versions the pipeline emitted: the sink commits
a run after each step of the story, so a window's versions are in the runs' snapshots.
"""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

import worked_example
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines.streaming import build_streaming, commit_streaming_outputs
from fleet_goodput.store.delta_store import Store
from fleet_goodput.transforms.read import DecodeRecords

pytestmark = pytest.mark.slow  # end to end, tens of seconds: scheduled first (tests/conftest.py)

T0 = worked_example.T0_US
CHIPS = 8
SETTINGS = load_settings()
SETTINGS = type(SETTINGS)(window_s=60, accelerators=SETTINGS.accelerators, size_classes=SETTINGS.size_classes)
# A silent job keeps getting a result per window for max_silence_s, each one a timer
# firing that the DirectRunner runs through every step: ten minutes, not the default six hours.
STREAMING = RunSettings(allowed_lateness_s=120, max_silence_s=600)
STREAMS = ("scheduler", "runtime", "profiler")
COMMIT_EVERY_S = 60


def at(seconds: float) -> int:
    return T0 + int(seconds * 1_000_000)


def scheduler(n, seconds, kind, chips=CHIPS):
    return {
        "event_id": f"s{n}",
        "event_time": at(seconds),
        "job_id": "j1",
        "type": kind,
        "cluster": "c1",
        "accelerator": "tpu-v5e",
        "chips": chips,
        "workload": "TRAINING" if kind == "SUBMIT" else None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
    }


def runtime(n, seconds, kind, step=None):
    return {"event_id": f"r{n}", "event_time": at(seconds), "job_id": "j1", "type": kind, "step": step, "attempt": 0}


def profile(n, seconds):
    return {
        "event_id": f"p{n}",
        "event_time": at(seconds),
        "job_id": "j1",
        "step": 2,
        "duration_s": 10.0,
        "chips": CHIPS,
        "ideal_flops": 8 * 197e12 * 5,
        "flops_source": "ANALYTIC",
        "bytes_accessed": None,
    }


def stamped(record):
    return TimestampedValue(record, record["event_time"] / 1e6)


def story() -> TestStream:
    stream = TestStream(output_tags=set(STREAMS))

    def send(tag, *records):
        stream.add_elements([stamped(r) for r in records], tag=tag)

    def watermark(seconds):
        for tag in STREAMS:  # each source advances its own watermark
            stream.advance_watermark_to(at(seconds) / 1e6, tag=tag)
        stream.advance_processing_time(COMMIT_EVERY_S + 1)  # the sink commits what the firings emitted

    send("scheduler", scheduler(1, 0, "SUBMIT"), scheduler(2, 0, "ALLOCATE"))
    send("runtime", runtime(2, 50, "STEP_END", 4), runtime(1, 10, "STEP_START", 1))  # out of order
    send("profiler", profile(2, 45))
    watermark(61)  # window 0 closes: steps 1-4 are pending
    send("runtime", runtime(3, 20, "DATA_WAIT_START"), runtime(4, 25, "DATA_WAIT_END"))  # late, within lateness
    send("runtime", runtime(5, 70, "CHECKPOINT_SAVE_START"), runtime(6, 75, "CHECKPOINT_SAVE_END", 4))
    watermark(121)  # window 1 closes; window 0 is updated
    send("runtime", runtime(7, 130, "STEP_START", 5), runtime(8, 170, "STEP_END", 8))
    watermark(181)  # window 2 closes: steps 5-8 are pending
    send("scheduler", scheduler(3, 185, "PREEMPT", chips=0))
    watermark(241)  # the preemption loses them
    watermark(400)
    send("profiler", profile(1, 15))  # 385 s late, with 120 s allowed: `late`
    stream.advance_watermark_to_infinity()
    return stream


def seconds(row, figure):
    return row[f"{figure}_chip_s"] / CHIPS


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run the story once through the real streaming pipeline and its sink, which commits the store a
    run a minute; read back every job_window version from the runs' snapshots, and the late rows."""
    output = tmp_path_factory.mktemp("stream")
    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    options.view_as(StandardOptions).streaming = True
    with TestPipeline(options=options) as p:
        sources = p | story()
        decoded = {tag: sources[tag] | f"Decode{tag}" >> DecodeRecords(tag, SETTINGS.accelerators) for tag in STREAMS}
        commit_streaming_outputs(
            build_streaming(decoded, SETTINGS, STREAMING),
            str(output),
            SETTINGS,
            STREAMING,
            source="story",
            commit_every_s=COMMIT_EVERY_S,
        )
    store = Store(output)
    job_window = {}
    for run in store.runs():  # a window's versions are in the runs that committed them
        for row in store.read("job_window", run).to_pylist():
            job_window[(row["window_start"], row["version"])] = {
                **row,
                "window_start_us": _micros(row["window_start"]),
                "version_us": _micros(row["version"]),
            }
    return {"job_window": list(job_window.values()), "late": store.read("late", store.latest()).to_pylist()}


def _micros(moment) -> int:
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def versions(results, window_seconds: int) -> list[dict]:
    window = at(window_seconds)
    return sorted((r for r in results["job_window"] if r["window_start_us"] == window), key=lambda r: r["version_us"])


def test_window_is_emitted_when_it_closes_with_steps_pending(results):
    first = versions(results, 0)[0]
    assert first["version_us"] == at(60)
    assert (seconds(first, "pending"), seconds(first, "productive"), seconds(first, "idle")) == (40, 0, 20)


def test_late_event_inside_the_lateness_updates_its_window(results):
    later = [r for r in versions(results, 0) if r["data_wait_chip_s"] > 0]
    assert later and seconds(later[0], "data_wait") == 5


def test_checkpoint_after_the_window_closed_turns_pending_into_productive(results):
    latest = versions(results, 0)[-1]
    assert (seconds(latest, "productive"), seconds(latest, "pending"), seconds(latest, "data_wait")) == (35, 0, 5)
    assert seconds(latest, "lifetime") == 60 and latest["ideal_chip_s"] == pytest.approx(4 * 5 * CHIPS)


def test_disruption_turns_pending_into_lost(results):
    window_2 = versions(results, 120)
    assert seconds(window_2[0], "pending") == 40
    assert (seconds(window_2[-1], "lost"), seconds(window_2[-1], "pending")) == (40, 0)


def test_event_beyond_the_lateness_goes_to_late_with_its_lateness(results):
    assert [(row["event_id"], row["lateness_s"], row["allowed_lateness_s"]) for row in results["late"]] == [
        ("p1", pytest.approx(385.0, abs=61), 120.0)
    ]


def test_every_version_conserves_chip_time(results):
    categories = (
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
    )
    for row in results["job_window"]:
        assert row["lifetime_chip_s"] == pytest.approx(sum(row[f"{c}_chip_s"] for c in categories))
