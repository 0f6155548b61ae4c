"""A committed run's figures as Prometheus metric families (docs/monitoring.md).

Chip-seconds are **cumulative counters**, sampled at the end of each event-time
window: the value at time t is the sum over every window that ended at or
before t. The increase of two counters over a range is then the range's sum,
and their ratio is the range's factor, a ratio of sums as docs/metric.md
section 1 requires: SG = increase(all-allocated) / increase(capacity), and so
on. A window counts once it is complete (it ends at or before the run's as-of
time), so a sample never holds a part of a window that a later run finishes.

Two scopes, as the marts have them:

- the **fleet** (capacity base), labelled by `cluster` and `accelerator`, over
  the windows `fleet_daily` counts (capacity covers the chips held);
- the **jobs** (demand base), labelled by the job's `cluster`, `accelerator`,
  `team`, `queue`, `cluster_queue`, `workload` and `size_class`, as
  `job_window_enriched` has them: `sum by (team)` of a counter is
  `segment_daily`'s team figure. No label names a job.

`history` gives every sample of every series on the window grid, with its
timestamp (`mpg export openmetrics`, for backfilling); `current` the latest
values without timestamps, plus gauges of the last complete day's factors (what
a scrape of `mpg serve metrics` would read). `exposition` writes either as
OpenMetrics text with prometheus_client.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import duckdb
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest as prometheus_text
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

PREFIX = "fleet_goodput_"
DAY_S = 86_400
FLEET_LABELS = ("cluster", "accelerator")
JOB_LABELS = ("cluster", "accelerator", "team", "queue", "cluster_queue", "workload", "size_class")
# The jobs' categories that only grow between runs, unless data is restated (docs/monitoring.md);
# `pending` is the one that shrinks as a matter of course, so it is a gauge of its own.
CATEGORIES = (
    "queued",
    "partial",
    "productive",
    "lost",
    "data_wait",
    "compile",
    "checkpoint_save",
    "checkpoint_restore",
    "init",
    "idle",
    "unmeasured",
)
FACTORS = ("sg", "rg", "pg", "mpg", "pg_coverage")
ENDED_STATUSES = ("FINISHED", "FAILED", "CANCELLED")


@dataclass(frozen=True)
class Series:
    """One metric family: its name (without the prefix, and without `_total` for a counter), its help,
    its labels, and the SQL of its increments (`labels..., at_s, value`; `at_s` the window end a row
    counts at) over the temporary tables `_scopes` makes."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    source: str


def _sum_of(column: str, table: str, labels: tuple[str, ...], where: str = "true") -> str:
    return f"select {', '.join(labels)}, at_s, coalesce({column}, 0) as value from {table} where {where}"


def _categories() -> str:
    keys = ", ".join(JOB_LABELS)
    return " union all ".join(
        f"select {keys}, '{name}' as category, at_s, {name}_chip_s as value from jobs_w" for name in CATEGORIES
    )


FLEET_COLUMNS = {
    "held": "chips held by jobs × time",
    "all_allocated": "chip-time of jobs holding all the chips they requested",
    "productive": "productive chip-time (steps whose progress was preserved)",
    "ideal": "ideal chip-time of the productive steps at the accelerator's peak",
    "profiled_productive": "productive chip-time that has a profile (PG's denominator)",
    "runtime_measured": "all-allocated chip-time of jobs whose runtime was measured (RG, PG and MPG are "
    "unknown where it did not increase)",
}
OK_WINDOWS = "capacity_status = 'ok'"


def _fleet_sum_of(column: str, table: str, where: str) -> str:
    """A fleet series' increments: the rows of the jobs' windows (or of capacity_window) in the windows
    of `cluster_window` that `where` selects. Summed from those rows, not from cluster_window's sums,
    whose float order DuckDB does not fix: every read must give a point the same value."""
    return (
        f"select cluster, accelerator, at_s, coalesce({column}, 0) as value "
        f"from {table} join fleet_status using (cluster, accelerator, window_start) where {where}"
    )


SERIES = (
    Series(
        "capacity_chip_seconds",
        "counter",
        "Chips online × time (CAPACITY levels), over the windows whose capacity covers the chips held: the "
        "fleet base of SG",
        FLEET_LABELS,
        _fleet_sum_of("capacity_chip_s", "capacity_w", OK_WINDOWS),
    ),
    *(
        Series(
            f"fleet_{name}_chip_seconds",
            "counter",
            f"Fleet (capacity base): {meaning}, over the same windows as fleet_goodput_capacity_chip_seconds_total",
            FLEET_LABELS,
            _fleet_sum_of(f"{name}_chip_s", "jobs_w", OK_WINDOWS),
        )
        for name, meaning in FLEET_COLUMNS.items()
    ),
    Series(
        "capacity_gap_held_chip_seconds",
        "counter",
        "Chips held × time in windows left out of the fleet figures because capacity does not cover them "
        "(the view capacity_gaps)",
        FLEET_LABELS,
        _fleet_sum_of("held_chip_s", "jobs_w", f"not ({OK_WINDOWS})"),
    ),
    Series(
        "lifetime_chip_seconds",
        "counter",
        "Jobs' demand: requested chips × time from SUBMIT to the end (the demand base of SG)",
        JOB_LABELS,
        _sum_of("lifetime_chip_s", "jobs_w", JOB_LABELS),
    ),
    Series(
        "demand_chip_seconds",
        "counter",
        "Jobs' demand by category; with fleet_goodput_pending_chip_seconds they sum to "
        "fleet_goodput_lifetime_chip_seconds_total",
        (*JOB_LABELS, "category"),
        _categories(),
    ),
    Series(
        "pending_chip_seconds",
        "gauge",
        "Jobs' step chip-time not yet preserved or lost at the run's as-of time (it moves to productive or "
        "lost in a later run)",
        JOB_LABELS,
        _sum_of("pending_chip_s", "jobs_w", JOB_LABELS),
    ),
    *(
        Series(
            f"{name}_chip_seconds",
            "counter",
            f"Jobs (demand base): {FLEET_COLUMNS[name]}",
            JOB_LABELS,
            _sum_of(f"{name}_chip_s", "jobs_w", JOB_LABELS),
        )
        for name in ("all_allocated", "ideal", "profiled_productive", "runtime_measured")
    ),
    Series(
        "jobs_submitted",
        "counter",
        "Jobs submitted (counted at the end of the window of their SUBMIT)",
        JOB_LABELS,
        _sum_of("1", "submitted", JOB_LABELS),
    ),
    Series(
        "jobs_ended",
        "counter",
        "Jobs ended, by how (FINISHED, FAILED or CANCELLED)",
        (*JOB_LABELS, "status"),
        _sum_of("1", "ended", (*JOB_LABELS, "status")),
    ),
    Series(
        "interruptions",
        "counter",
        "Running attempts cut by a PREEMPT below the request, a FAIL or a CANCEL, by cause",
        (*JOB_LABELS, "cause"),
        _sum_of("1", "cuts", (*JOB_LABELS, "cause")),
    ),
    Series(
        "interruption_cost_chip_seconds",
        "counter",
        "Chip-time interruptions cost: work lost and recovery (the interruptions view's cost_chip_s)",
        (*JOB_LABELS, "cause"),
        _sum_of("cost_chip_s", "cuts", (*JOB_LABELS, "cause")),
    ),
)


@dataclass(frozen=True)
class Grid:
    """The window ends of the store, from its first window's start `first_s` to `last_s`, the end of the last
    complete window, every `step_s`; samples are written from `emit_from_s` on. The sums always start at
    `first_s`, so that every export and every scrape gives a point the same value, to the bit."""

    first_s: int
    emit_from_s: int
    last_s: int
    step_s: int


def window_s(connection: duckdb.DuckDBPyConnection) -> int:
    """The store's window length, which must divide a day so that a day's windows end inside it."""
    value = json.loads(connection.execute("select value from settings where setting = 'window_s'").fetchone()[0])
    if DAY_S % value:
        raise ValueError(f"window_s {value} does not divide a day: day figures cannot be taken from window samples")
    return value


def _scopes(connection: duckdb.DuckDBPyConnection, window: int) -> None:
    """The rows the series read, each with `at_s`: the end of the window it counts in."""

    def ends(time_us: str) -> str:
        return f"(({time_us}) // {window * 1_000_000}) * {window} + {window}"

    connection.execute(f"""
        create or replace temp table jobs_w as
            select *, {ends("epoch_us(window_start)")} as at_s from job_window_enriched;
        create or replace temp table capacity_w as
            select *, {ends("epoch_us(window_start)")} as at_s from capacity_window;
        create or replace temp table fleet_status as
            select cluster, accelerator, window_start, capacity_status from cluster_window;
        create or replace temp table submitted as
            select *, {ends("epoch_us(submit_time)")} as at_s from job_attributes;
        create or replace temp table ended as
            select *, {ends("epoch_us(end_time)")} as at_s from job_attributes
            where status in {tuple(ENDED_STATUSES)};
        create or replace temp table cuts as
            select cuts.*, attributes.cluster_queue, {ends("epoch_us(cuts.time)")} as at_s
            from interruptions as cuts join job_attributes as attributes using (job_id);
    """)


def grid(connection: duckdb.DuckDBPyConnection, as_of_us: int, since_us: int | None = None) -> Grid | None:
    """From the first window (samples from the window holding `since_us`) to the last complete one; None when
    there is nothing to sample."""
    window = window_s(connection)
    first_us = connection.execute("""select least((select min(epoch_us(window_start)) from job_window),
                                                  (select min(epoch_us(window_start)) from capacity_window))""").fetchone()[
        0
    ]
    if first_us is None:
        return None
    first_s, last_s = first_us // 1_000_000 // window * window, as_of_us // 1_000_000 // window * window
    emit_from_s = first_s if since_us is None else max(first_s, since_us // 1_000_000 // window * window)
    return Grid(first_s, emit_from_s, last_s, window) if emit_from_s <= last_s else None


def _cumulative(connection: duckdb.DuckDBPyConnection, series: Series, on: Grid) -> Iterator[tuple]:
    """Each of the series' label sets at every grid point from `on.emit_from_s`, with the sum of its
    increments up to there (those after the last point, in an incomplete window, count nowhere yet).

    Summed in a fixed order, one point after the other, never by a SQL window function: a float sum
    taken in another order can come out an ulp lower at a later point, which Prometheus reads as a
    counter reset, and two exports must give a point the same value to the bit."""
    keys = ", ".join(series.labels)
    rows = connection.execute(f"""
        with increments as ({series.source})
        select {keys}, at_s, sum(value order by value) as value
        from increments where at_s <= {on.last_s} group by all order by all
    """).fetchall()
    points = range(on.first_s, on.last_s + 1, on.step_s)
    for labels, group in itertools.groupby(rows, key=lambda row: row[:-2]):
        increments = {at_s: value for *_, at_s, value in group}
        total = 0.0
        for at_s in points:
            total += increments.get(at_s, 0.0)
            if at_s >= on.emit_from_s:
                yield (*labels, at_s, total)


def _family(series: Series) -> Metric:
    kind = CounterMetricFamily if series.kind == "counter" else GaugeMetricFamily
    return kind(PREFIX + series.name, series.help, labels=series.labels)


def history(connection: duckdb.DuckDBPyConnection, as_of_us: int, since_us: int | None = None) -> Iterator[Metric]:
    """Every series at every window end from the first window (or `since_us`) to the last complete one,
    timestamped: what `promtool tsdb create-blocks-from openmetrics` backfills. One family at a time,
    read while the connection is open: written out as they come, a long history holds one family in
    memory, not all of them."""
    on = grid(connection, as_of_us, since_us)
    return _families(connection, on, timestamps=True)


def _families(connection: duckdb.DuckDBPyConnection, on: Grid | None, timestamps: bool) -> Iterator[Metric]:
    if on is not None:
        _scopes(connection, on.step_s)
    for series in SERIES:
        family = _family(series)
        for *labels, at_s, value in _cumulative(connection, series, on) if on is not None else ():
            family.add_metric([str(label) for label in labels], value, timestamp=at_s if timestamps else None)
        yield family


def current(connection: duckdb.DuckDBPyConnection, as_of_us: int, run_id: int) -> list[Metric]:
    """The counters at the last complete window, without timestamps (a scrape stamps them), and gauges
    of the run and of the last complete day's factors."""
    on = grid(connection, as_of_us)
    if on is not None:
        on = Grid(on.first_s, on.last_s, on.last_s, on.step_s)
    families = list(_families(connection, on, timestamps=False))
    run = GaugeMetricFamily(PREFIX + "run_id", "The committed run the figures come from")
    run.add_metric([], run_id)
    as_of = GaugeMetricFamily(
        PREFIX + "as_of_timestamp_seconds", "The run's as-of time: the store is complete up to here"
    )
    as_of.add_metric([], as_of_us / 1_000_000)
    return [*families, run, as_of, *last_day(connection, as_of_us)]


def last_day(connection: duckdb.DuckDBPyConnection, as_of_us: int) -> list[Metric]:
    """Gauges of the last complete UTC day's factors, 0 to 1: per cluster and accelerator (fleet_daily),
    for the whole fleet (its sums, through the same macro), and per segment (segment_daily). A factor
    that is unknown (null) has no sample, never 0 or NaN."""
    day_s = as_of_us // 1_000_000 // DAY_S * DAY_S - DAY_S
    day = f"to_timestamp({day_s})::date"
    stamp = GaugeMetricFamily(
        PREFIX + "last_day_timestamp_seconds", "Start (UTC) of the day the last_day gauges describe"
    )
    stamp.add_metric([], day_s)
    families = [stamp]
    scopes = (
        (
            "",
            FLEET_LABELS,
            "per cluster and accelerator, capacity base (fleet_daily)",
            f"select cluster, accelerator, {', '.join(FACTORS)} from fleet_daily where day = {day}",
        ),
        (
            "fleet_",
            (),
            "the whole fleet, capacity base (the sums of fleet_daily)",
            f"""select unnest(goodput_factors(sum(all_allocated_chip_s), sum(productive_chip_s), sum(ideal_chip_s),
                                            sum(profiled_productive_chip_s), sum(capacity_chip_s),
                                            sum(runtime_measured_chip_s)))
             from fleet_daily where day = {day} having count(*) > 0""",
        ),
        (
            "segment_",
            ("dimension", "segment"),
            "per segment of each dimension, demand base (segment_daily)",
            f"select dimension, segment, {', '.join(FACTORS)} from segment_daily where day = {day}",
        ),
    )
    for infix, labels, base, query in scopes:
        rows = connection.execute(query).fetchall()
        for index, factor in enumerate(FACTORS):
            family = GaugeMetricFamily(
                f"{PREFIX}last_day_{infix}{factor}_ratio",
                f"{factor.upper()} of the last complete UTC day, {base}",
                labels=labels,
            )
            for row in rows:
                value = row[len(labels) + index]
                if value is not None:
                    family.add_metric([str(label) for label in row[: len(labels)]], value)
            families.append(family)
    return families


EOF = b"# EOF\n"


class _Families:
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self):
        return iter(self.families)


def family_text(family: Metric) -> bytes:
    """One family's OpenMetrics text, as prometheus_client writes it, without the `# EOF` that ends
    a whole exposition (EOF, once, after the last family)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([family]))
    return generate_latest(registry).removesuffix(EOF)


def text_format(families: Iterable[Metric]) -> bytes:
    """Prometheus's text format (0.0.4) of families without timestamps: node_exporter's textfile
    collector reads it, not OpenMetrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families)))
    return prometheus_text(registry)


def exposition(families: Iterable[Metric]) -> bytes:
    """OpenMetrics text of every family, ending `# EOF`."""
    return b"".join(family_text(family) for family in families) + EOF
