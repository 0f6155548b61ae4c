"""The Beam composites, on TestPipeline with in-memory records."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from fleet_goodput import schemas
import worked_example
from fleet_goodput.core.config import load_settings
from fleet_goodput.pipelines.goodput import build_goodput
from fleet_goodput.transforms.read import DecodeRecords

pytestmark = pytest.mark.slow  # six pipeline runs: scheduled first (tests/conftest.py)

SETTINGS = load_settings()
CHIPS = worked_example.CHIPS


def beam_pipeline():
    return TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]))


# ---- the whole graph on the worked example ------------------------------------
def _decoded(p, records_by_stream):
    return {
        stream: p
        | f"Create{stream}" >> beam.Create(records_by_stream[stream])
        | f"Decode{stream}" >> DecodeRecords(stream, SETTINGS.accelerators)
        for stream in schemas.STREAMS
    }


def _worked_example_row():
    seconds = worked_example.EXPECTED_SECONDS
    return (
        worked_example.JOB,
        worked_example.T0_US,
        seconds["lifetime"] * CHIPS,
        seconds["queued"] * CHIPS,
        seconds["productive"] * CHIPS,
        seconds["lost"] * CHIPS,
        seconds["ideal"] * CHIPS,
    )


def _row_digest(row):
    return (
        row["job_id"],
        row["window_start_us"],
        row["lifetime_chip_s"],
        row["queued_chip_s"],
        row["productive_chip_s"],
        row["lost_chip_s"],
        round(row["ideal_chip_s"], 9),
    )


def _all_rejected(outputs, label):
    """Settled and provisional rejections: one run over a story shorter than the allowed lateness
    decides every fate provisionally (the next run would settle them)."""
    return (outputs["rejected"], outputs["rejected_pending"]) | f"{label}AllRejected" >> beam.Flatten()


def _all_counts(outputs, label):
    return (
        (outputs["counts"], outputs["pending_counts"])
        | f"{label}AllCounts" >> beam.Flatten()
        | f"{label}Sum" >> beam.CombinePerKey(sum)
    )


def test_build_goodput_on_the_worked_example():
    records = worked_example.records()
    with beam_pipeline() as p:
        outputs = build_goodput(p, _decoded(p, records), SETTINGS)
        assert_that(outputs["job_window"] | beam.Map(_row_digest), equal_to([_worked_example_row()]), label="JobWindow")
        assert_that(
            outputs["jobs"] | beam.Map(lambda r: (r["job_id"], r["status"], r["allocations"])),
            equal_to([("j1", "FINISHED", 2)]),
            label="Jobs",
        )
        assert_that(
            outputs["capacity_level"] | beam.Map(lambda r: (r["end_time_us"] - r["start_time_us"], r["chips"])),
            equal_to([(580_000_000, CHIPS)]),
            label="Capacity",
        )
        assert_that(_all_rejected(outputs, "W"), equal_to([]), label="NothingRejected")


def test_bad_records_are_rejected_with_reasons_and_the_rest_is_unchanged():
    records = worked_example.records()
    records["scheduler"].append({**records["scheduler"][1], "event_id": "x1", "accelerator": "h900"})
    records["runtime"].append({**records["runtime"][0], "event_id": "x2", "type": "STEP_END", "step": 99})
    records["runtime"].append(dict(records["runtime"][3]))  # a duplicate delivery
    with beam_pipeline() as p:
        outputs = build_goodput(p, _decoded(p, records), SETTINGS)
        assert_that(outputs["job_window"] | beam.Map(_row_digest), equal_to([_worked_example_row()]), label="Unchanged")
        assert_that(
            _all_rejected(outputs, "B") | beam.Map(lambda r: (r["event_id"], r["reason"])),
            equal_to(
                [
                    ("x1", "unknown accelerator 'h900': not in the accelerator catalogue"),
                    ("x2", "STEP_END without an open STEP_START"),
                ]
            ),
            label="Rejected",
        )
        assert_that(
            _all_counts(outputs, "B"),
            equal_to(
                [
                    (("scheduler", "read"), 7),
                    (("scheduler", "accepted"), 6),
                    (("scheduler", "rejected"), 1),
                    (("runtime", "read"), 16),
                    (("runtime", "accepted"), 14),
                    (("runtime", "rejected"), 1),
                    (("runtime", "duplicate"), 1),
                    (("profiler", "read"), 1),
                    (("profiler", "accepted"), 1),
                ]
            ),
            label="Counts",
        )


def test_as_of_before_the_end_cuts_lifetimes_and_later_events_wait():
    """Events after a given as-of time are not rejected: they wait in their key's state, counted
    `waiting` per stream, for the run whose as-of time reaches them."""
    records = worked_example.records()
    as_of_us = worked_example.T0_US + 300_000_000
    later = {stream: sum(1 for r in rows if r["event_time"] > as_of_us) for stream, rows in records.items()}
    assert later["scheduler"] and later["runtime"]
    with beam_pipeline() as p:
        outputs = build_goodput(p, _decoded(p, records), SETTINGS, given_as_of_us=as_of_us)
        assert_that(
            outputs["job_window"]
            | beam.Map(lambda r: (r["lifetime_chip_s"], r["productive_chip_s"], r["pending_chip_s"])),
            equal_to([(300.0 * CHIPS, 100.0 * CHIPS, 0.0)]),
            label="CutAtAsOf",
        )
        assert_that(_all_rejected(outputs, "C"), equal_to([]), label="NothingRejected")
        assert_that(
            outputs["pending_counts"] | beam.Filter(lambda kv: kv[0][1] == "waiting"),
            equal_to([((stream, "waiting"), n) for stream, n in later.items() if n]),
            label="Waiting",
        )
