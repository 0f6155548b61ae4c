"""The data-quality suites: one per table, one for capacity coverage, one for the manifest, one for the views.

Each expectation says what it checks (`description`, shown in Data Docs and in
`mpg validate`'s summary), why it exists and why its threshold is what it is
(`notes`), and how bad a failure is (`severity`):

- critical: the numbers would be wrong or incomplete; `mpg validate` fails and
  `mpg report` publishes nothing;
- warning: the numbers hold but a reader should know (printed, and shown in
  the report's data-quality section).

Thresholds come from the metric's definition (docs/metric.md) and float arithmetic,
never from profiling one run. The frames validated here are built in
batches.py; the derived columns they carry are named in the expectations.
"""

from __future__ import annotations

from dataclasses import dataclass

import great_expectations as gx
import great_expectations.expectations as gxe

from fleet_goodput.quality.period import Period
from fleet_goodput.store.tables import CAPACITY_WINDOW, JOB_WINDOW, JOBS, REJECTED, Table

CRITICAL, WARNING = "critical", "warning"

# One relative tolerance for every float comparison: conservation per row and
# the [0, 1] bounds of the ratios. Chip-time is exact integer chip-microseconds
# inside the pipeline and becomes float64 chip-seconds when written, each value
# within 2^-53 (1.1e-16) of exact. A row's conservation sums 12 values; a
# view's ratio divides two sums over up to millions of rows, which DuckDB adds
# in no fixed order, so each sum carries at most n x 1.1e-16 (1.1e-10 for a
# million rows). A fully allocated cluster therefore shows SG = 1 +- a few ulps
# (SG = 1.0000000000000002 was seen on a correct row): a bound of exactly 1
# would fail correct data. 1e-9 stays above that rounding for any realistic
# output, yet far below any real error: a single misattributed chip-second in
# an hour-long window of a 4096-chip job is 6.8e-8, and SG = 1.01 is 1e-2.
FLOAT_TOLERANCE = 1e-9
# SG x RG x PG - MPG on a view's row: a product of three float64 ratios, each
# within a few ulps (about 1e-16) of exact; 1e-12 is far above that and far
# below any figure a report prints (0.1 percentage point is 1e-3).
FACTOR_PRODUCT_TOLERANCE = 1e-12
# A share of read events rejected above which the figures may be biased.
REJECTED_SHARE_WARNING = 0.01
# Share of jobs with a team above which the by-team section is actionable.
TEAM_COVERAGE_WARNING = 0.95

WORKLOADS = ["TRAINING", "SERVING", "BULK_INFERENCE"]
STATUSES = ["FINISHED", "FAILED", "CANCELLED", "RUNNING", "PENDING"]
STREAMS = ["scheduler", "runtime", "profiler"]
# The title of the check that the as-of time reaches the period's end (mpg report explains its failure).
COMPLETE_TITLE = "the data covers the whole period"


@dataclass(frozen=True)
class SuiteInputs:
    """What the thresholds depend on: the period, the run's as-of time and window, the catalogue."""

    period: Period
    as_of_s: float
    window_s: int
    accelerators: tuple[str, ...]
    require_complete: bool = False
    # The days of the period some job was alive on (None: every day): a day no job lived on has no
    # job_window partition, as a quiet cluster's observed day has none.
    job_days: tuple[str, ...] | None = None


def expect(expectation_class, *, severity: str, title: str, why: str, **kwargs):
    return expectation_class(severity=severity, description=title, notes=why, meta={"title": title}, **kwargs)


def _columns(table: Table) -> list[str]:
    return [c.name for c in table.columns]


def _chip_s_columns(table: Table) -> list[str]:
    return [c.name for c in table.columns if c.name.endswith("_chip_s")]


def _schema(table: Table):
    return expect(
        gxe.ExpectTableColumnsToMatchSet,
        severity=CRITICAL,
        column_set=_columns(table),
        exact_match=False,
        title=f"{table.name} has every column of its definition",
        why="The views and the report read these columns by name (fleet_goodput/store/tables.py); a missing "
        "column means a writer and a reader disagree on the schema.",
    )


def _one_row_per_key(table: Table):
    # GX's compound check takes two columns at least.
    check, columns = (
        (gxe.ExpectColumnValuesToBeUnique, {"column": table.key[0]})
        if len(table.key) == 1
        else (gxe.ExpectCompoundColumnsToBeUnique, {"column_list": list(table.key)})
    )
    return expect(
        check,
        **columns,
        severity=CRITICAL,
        title=f"one row per {', '.join(table.key)}",
        why="A run replaces the rows it changes, so the table holds the latest figures of each key once "
        "(fleet_goodput/store/keyed_tables.py), and anything reading it (the views, polars, Spark) sums it "
        "as it is. Two rows for one key (a duplicated file, a hand-copied partition, a writer that "
        "appended instead of replacing) would count that key twice. No duplicate is tolerated.",
    )


def _partitions(table: Table, inputs: SuiteInputs, days: tuple[str, ...] | None = None):
    if days is not None:
        return expect(
            gxe.ExpectColumnDistinctValuesToContainSet,
            severity=CRITICAL,
            column="partition_date",
            value_set=list(days),
            title=f"{table.name} has a partition for every day a job was alive",
            why="Every job of the jobs table has a row in each window of its life, so a day some job "
            "lived on without a partition is a day the pipeline did not write (or that was deleted); "
            "goodput summed over the period would silently leave it out. A day no job lived on (a "
            "quiet cluster's observed day) has none. There is no tolerance for a missing day.",
        )
    return expect(
        gxe.ExpectColumnDistinctValuesToContainSet,
        severity=CRITICAL,
        column="partition_date",
        value_set=inputs.period.days,
        title=f"{table.name} has a partition for every day of the period",
        why="A cluster's capacity is online every day it is observed, so a day without a partition is a "
        "day the pipeline did not write (or that was deleted); goodput summed over the period would "
        "silently leave it out. Every day is required: there is no tolerance for a missing day.",
    )


def _rows_in_their_partition(table: Table, time_column: str):
    return expect(
        gxe.ExpectColumnPairValuesToBeEqual,
        severity=CRITICAL,
        column_A="partition_date",
        column_B=time_column,
        title=f"every {table.name} row sits in the partition of its own UTC day",
        why="Queries prune by partition: a row filed under another day is counted in the wrong "
        "day's figures, or twice when partitions are copied by hand.",
    )


def _aligned_windows(table: Table, inputs: SuiteInputs):
    return expect(
        gxe.ExpectColumnValuesToBeBetween,
        severity=CRITICAL,
        column="window_offset_s",
        min_value=0,
        max_value=0,
        title=f"{table.name} windows start on a multiple of window_s ({inputs.window_s} s)",
        why="Job and capacity windows are joined on window_start; a window off the grid (a run with "
        "another window_s mixed into the same output) matches nothing and its chip-time is lost "
        "from the capacity-based figures.",
    )


def _fresh(table: Table, inputs: SuiteInputs, severity: str):
    latest_expected = min(inputs.as_of_s, inputs.period.end_s)
    return expect(
        gxe.ExpectColumnMaxToBeBetween,
        severity=severity,
        column="window_start_s",
        min_value=latest_expected - inputs.window_s,
        max_value=inputs.as_of_s,
        strict_max=True,
        title=f"{table.name} reaches the as-of time (latest window within one window_s of it)",
        why="The manifest's as-of time says how far the data goes; the latest window must be the one "
        "holding the as-of time (or the period's last window), so the tables are as fresh as the "
        "manifest claims. One window_s of slack is exactly the window that contains that instant; "
        "a window starting at or after the as-of time would be time the run had not seen.",
    )


def job_window_suite(inputs: SuiteInputs) -> list:
    non_negative = [
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column=column,
            min_value=0,
            title=f"{column} is not negative",
            why="Chip-time is chips held or requested times a duration; a negative value means a sweep ran "
            "backwards and every sum it enters is wrong. Zero is the only bound the metric gives.",
        )
        for column in _chip_s_columns(JOB_WINDOW)
    ]
    return [
        _schema(JOB_WINDOW),
        *(
            expect(
                gxe.ExpectColumnValuesToNotBeNull,
                severity=CRITICAL,
                column=column,
                title=f"{column} is never null",
                why="The row's key: a null would make the row belong to no job or no window.",
            )
            for column in ("job_id", "window_start")
        ),
        _one_row_per_key(JOB_WINDOW),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="lifetime_conservation_error",
            min_value=0,
            max_value=FLOAT_TOLERANCE,
            title="chip-seconds conserved: lifetime = queued + partial + all_allocated",
            why="docs/metric.md section 3: every instant of a job's life is in exactly one scheduling state. The "
            "tolerance (relative to the row's lifetime) covers float64 rounding of exact integer "
            "chip-microseconds, see FLOAT_TOLERANCE.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="all_allocated_conservation_error",
            min_value=0,
            max_value=FLOAT_TOLERANCE,
            title="chip-seconds conserved: all_allocated = productive + pending + lost + data_wait + compile "
            "+ checkpoint_save + checkpoint_restore + init + idle",
            why="docs/metric.md section 3: every all-allocated instant is in exactly one runtime category, so RG's "
            "numerator and the badput breakdown add up to its denominator. Same float tolerance as above.",
        ),
        *non_negative,
        expect(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            severity=CRITICAL,
            column_A="productive_chip_s",
            column_B="profiled_productive_chip_s",
            or_equal=True,
            title="profiled productive chip-time is part of productive chip-time (PG coverage <= 1)",
            why="PG coverage is profiled / all productive; above 1 the PG numerator counts steps that were "
            "never productive.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=WARNING,
            column="window_pg",
            min_value=0,
            max_value=1 + FLOAT_TOLERANCE,
            title="no window's ideal chip-time passes the profiled productive chip-time it ran in",
            why="docs/metric.md section 3, 'Ideal above the time it ran in': the steps claim more FLOPs than the "
            "chips' peak allows, so the job's PG is set aside (view pg_set_aside) and no view shows PG above "
            "1; but its step numbers or its samples are wrong, and the emitter or importer wants fixing.",
        ),
        expect(
            gxe.ExpectColumnValuesToNotBeNull,
            severity=CRITICAL,
            column="known_job_id",
            title="every window belongs to a job in the jobs table",
            why="The views join windows to jobs for attributes; an orphan window vanishes from every "
            "segment view while still counting in fleet totals, so the two would disagree.",
        ),
        _rows_in_their_partition(JOB_WINDOW, "window_date"),
        _aligned_windows(JOB_WINDOW, inputs),
        _partitions(JOB_WINDOW, inputs, inputs.job_days),
        _fresh(JOB_WINDOW, inputs, WARNING),
    ]


def jobs_suite(inputs: SuiteInputs) -> list:
    return [
        _schema(JOBS),
        *(
            expect(
                gxe.ExpectColumnValuesToNotBeNull,
                severity=CRITICAL,
                column=column,
                title=f"{column} is never null",
                why="Set from the SUBMIT event or by the pipeline for every job; the views group and join on it "
                "and a null drops the job from its segment.",
            )
            for column in (
                "job_id",
                "cluster",
                "accelerator",
                "requested_chips",
                "submit_time",
                "status",
                "allocations",
            )
        ),
        _one_row_per_key(JOBS),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="status",
            value_set=STATUSES,
            title="status is FINISHED, FAILED, CANCELLED, RUNNING or PENDING",
            why="The job states docs/metric.md section 2 defines; anything else is a writer bug.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="workload",
            value_set=WORKLOADS,
            title="workload is one of the contract's enum values (or null)",
            why="The telemetry contract's enum; the by-workload section would show a bogus segment.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="accelerator",
            value_set=list(inputs.accelerators),
            title="accelerator is in the catalogue",
            why="Events naming an unknown accelerator are rejected upstream (docs/metric.md section 2); one here "
            "means a job's ideal chip-time used no known peak.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="requested_chips",
            min_value=1,
            title="requested_chips is at least 1",
            why="The demand base is requested chips x lifetime; a job asking for no chips has no size class "
            "and drops out of job_goodput and every segment view.",
        ),
        expect(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB,
            severity=CRITICAL,
            column_A="end_time",
            column_B="submit_time",
            or_equal=True,
            ignore_row_if="either_value_is_missing",
            title="a job ends at or after its submission",
            why="A negative lifetime has no meaning; it would subtract chip-time.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="end_matches_status",
            value_set=[True],
            title="end_time is null exactly when status is RUNNING or PENDING",
            why="Running jobs are closed at the as-of time and ended jobs at their end; a mismatch means "
            "the job's lifetime was cut at the wrong time.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="end_time_s",
            max_value=inputs.as_of_s,
            title="no job ends after the as-of time",
            why="The as-of time is the latest event the run saw, so nothing can have ended later.",
        ),
        expect(
            gxe.ExpectColumnValuesToNotBeNull,
            severity=CRITICAL,
            column="goodput_job_id",
            title="every job appears in job_goodput",
            why="job_goodput joins jobs to the size classes; a job it drops is missing from every per-job "
            "and per-size-class figure.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="implicitly_closed_spans",
            min_value=0,
            title="implicitly_closed_spans is not negative",
            why="A count of runtime spans closed without their END; below zero the writer mixed up counters. "
            "Zero is the only bound the contract gives: how many are too many depends on the emitters.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="disruptions",
            min_value=0,
            title="disruptions is not negative",
            why="A count of events that cut or restarted a running attempt; the checkpoint advice divides by "
            "its sum. It once came out at -1 for every job that never got its chips (allocations - 1).",
        ),
        expect(
            gxe.ExpectColumnProportionOfNonNullValuesToBeBetween,
            severity=WARNING,
            column="team",
            min_value=TEAM_COVERAGE_WARNING,
            title=f"at least {TEAM_COVERAGE_WARNING:.0%} of jobs name their team",
            why="team is optional in the contract, so a missing one is not an error, but the by-team "
            "section stops being actionable when more than 1 job in 20 is UNKNOWN.",
        ),
    ]


def capacity_window_suite(inputs: SuiteInputs) -> list:
    return [
        _schema(CAPACITY_WINDOW),
        *(
            expect(
                gxe.ExpectColumnValuesToNotBeNull,
                severity=CRITICAL,
                column=column,
                title=f"{column} is never null",
                why="Part of the row's key; fleet_daily groups capacity by it.",
            )
            for column in ("cluster", "accelerator", "window_start")
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="online_s",
            max_value=inputs.window_s,
            title="no window is covered twice by the stretches of one cluster and accelerator",
            why="capacity_level holds each stretch of one level once, and a stretch ends where the next "
            "begins, so a window's stretches cover at most its length. More means a stretch stored twice "
            "(a duplicated file, a writer that appended instead of replacing), whose chips every view "
            "would count twice. No tolerance: the seconds are integer microseconds.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="capacity_chip_s",
            min_value=0,
            title="capacity_chip_s is not negative",
            why="Chips online are a level of at least zero.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="accelerator",
            value_set=list(inputs.accelerators),
            title="accelerator is in the catalogue",
            why="Capacity for an unknown accelerator cannot be matched to jobs' peaks.",
        ),
        _rows_in_their_partition(CAPACITY_WINDOW, "window_date"),
        _aligned_windows(CAPACITY_WINDOW, inputs),
        _partitions(CAPACITY_WINDOW, inputs),
        _fresh(CAPACITY_WINDOW, inputs, CRITICAL),
    ]


def capacity_coverage_suite(inputs: SuiteInputs) -> list:
    return [
        expect(
            gxe.ExpectColumnValuesToBeNull,
            severity=CRITICAL,
            column="window_without_capacity",
            title="no chip-time is held where no capacity is online (every cluster window jobs used has capacity)",
            why="SG divides all-allocated chip-time by the capacity of the same cluster, accelerator and "
            "window. Without capacity there, SG is null (no ratio), so every [0, 1] bound passes while the "
            "fleet's capacity-base figures silently leave that chip-time out, and idle capacity goes "
            "negative. A window whose jobs held chips needs capacity above zero; no tolerance, since a "
            "missing level is not a rounding matter.",
        ),
    ]


def rejected_suite(inputs: SuiteInputs) -> list:
    return [
        _schema(REJECTED),
        expect(
            gxe.ExpectColumnValuesToNotBeNull,
            severity=CRITICAL,
            column="reason",
            title="every rejected row says why",
            why="A rejection without its reason cannot be acted on (STYLE.md: dead letters carry a reason).",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="stream",
            value_set=STREAMS,
            title="stream is scheduler, runtime or profiler",
            why="The three streams of the contract.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="records",
            min_value=1,
            title="each rejected row stands for at least one event",
            why="The manifest reconciles by summing `records`; zero or less would hide events.",
        ),
        expect(
            gxe.ExpectCompoundColumnsToBeUnique,
            severity=WARNING,
            column_list=["stream", "event_id", "reason"],
            ignore_row_if="any_value_is_missing",
            title="an event is rejected once per reason",
            why="Duplicates are dropped before validation, so a repeat here means a file was read twice; "
            "the counts would still reconcile, hence a warning.",
        ),
    ]


def manifest_suite(inputs: SuiteInputs) -> list:
    return [
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="unaccounted",
            min_value=0,
            max_value=0,
            title="every event read is accepted, a duplicate, rejected, late or waiting after the as-of time",
            why="The manifest's promise that nothing is lost silently; counts are integers, so exactly 0.",
        ),
        expect(
            gxe.ExpectColumnPairValuesToBeEqual,
            severity=CRITICAL,
            column_A="rejected",
            column_B="rejected_in_table",
            title="the manifest's rejected counts match the rejected tables (settled and provisional)",
            why="The rejected table is where a rejection's reason is kept; a count without its rows (or rows "
            "without a count) means a partition was lost or written twice.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="stream",
            value_set=STREAMS,
            title="the manifest covers the contract's streams",
            why="The three streams of docs/metric.md section 2.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeInSet,
            severity=CRITICAL,
            column="schema_version",
            value_set=[1],
            title="the telemetry schema version is 1",
            why="The suites and views are written for version 1; a new major version needs its own review.",
        ),
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=WARNING,
            column="rejected_share",
            max_value=REJECTED_SHARE_WARNING,
            title=f"at most {REJECTED_SHARE_WARNING:.0%} of a stream's events are rejected",
            why="Rejections are counted, not lost, so the figures are honest; but beyond 1 in 100 events "
            "the accepted data may no longer represent the fleet.",
        ),
        expect(
            gxe.ExpectColumnMinToBeBetween,
            severity=CRITICAL if inputs.require_complete else WARNING,
            column="as_of_s",
            min_value=inputs.period.end_s,
            title=f"{COMPLETE_TITLE} (as-of at or after {inputs.period.last} 24:00 UTC)",
            why="A report on a period the pipeline has not finished shows a partial last day. Scheduled "
            "runs pass --require-complete, making this critical so late upstream data alerts instead "
            "of publishing; interactive runs only warn.",
        ),
    ]


def views_suite(inputs: SuiteInputs) -> list:
    in_unit_interval = [
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column=factor,
            min_value=0,
            max_value=1 + FLOAT_TOLERANCE,
            title=f"{factor.upper()} is in [0, 1] on every view row",
            why="Each factor is a ratio of a part to its whole (docs/metric.md section 1); above 1 means the whole "
            "is missing chip-time (e.g. capacity below the chips jobs held) or ideal FLOPs exceed the "
            "peak. The upper bound allows 1e-9 relative (FLOAT_TOLERANCE): the sums are float64 added "
            "in no fixed order, so a full cluster's SG can be 1 plus a few ulps; SG = 1.01 still fails. "
            "Sums of non-negative values cannot round below 0, so 0 is exact.",
        )
        for factor in ("sg", "rg", "pg", "mpg", "pg_coverage")
    ]
    return [
        *in_unit_interval,
        expect(
            gxe.ExpectColumnValuesToBeBetween,
            severity=CRITICAL,
            column="factor_product_error",
            min_value=0,
            max_value=FACTOR_PRODUCT_TOLERANCE,
            title="SG x RG x PG = MPG on every view row",
            why="Every factor is a ratio of sums over the same rows, so the identity holds exactly up to "
            "float rounding (see FACTOR_PRODUCT_TOLERANCE); a break means a view mixed bases.",
        ),
    ]


SUITES = {
    "job_window": job_window_suite,
    "jobs": jobs_suite,
    "capacity_window": capacity_window_suite,
    "capacity_coverage": capacity_coverage_suite,
    "rejected": rejected_suite,
    "manifest": manifest_suite,
    "views": views_suite,
}


def build_suites(inputs: SuiteInputs) -> dict[str, gx.ExpectationSuite]:
    return {
        name: gx.ExpectationSuite(name=name, expectations=expectations(inputs), meta={"period": inputs.period.name})
        for name, expectations in SUITES.items()
    }
