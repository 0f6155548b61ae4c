"""The tables the pipeline writes: their columns, types and meaning.

Every table is a Delta Lake table partitioned by `date` (UTC day, YYYY-MM-DD)
under `OUTPUT/tables/<table>/` (fleet_goodput/store/delta_store.py). A table with a `key`
holds one row per key, the latest `version` of its figures: a run replaces
the rows it changes (fleet_goodput/store/keyed_tables.py), and earlier figures live
in the table's earlier Delta versions. Tables without a key (`rejected`,
`late`) are appended to, each event once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from functools import lru_cache

import pyarrow as pa

from fleet_goodput.core.figure_vector import FIGURES

TIMESTAMP = pa.timestamp("us", tz="UTC")
INTERRUPTIONS = pa.list_(
    pa.struct(
        [
            ("time", TIMESTAMP),
            ("event", pa.string()),
            ("cause", pa.string()),
            ("reason", pa.string()),
            ("run_s", pa.float64()),
            ("reallocated_s", pa.float64()),
            ("recovered_s", pa.float64()),
            ("lost_chip_s", pa.float64()),
        ]
    )
)


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    row_key: str | None = None  # the row dict's key, where it differs from `name`

    @property
    def key(self) -> str:
        return self.row_key or self.name


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    date_from: str  # the row key whose UTC day is the partition
    sort_by: tuple[str, ...]  # columns that order a partition's rows, so reruns write identical files
    key: tuple[str, ...] = ()  # what identifies a row: the table holds one row per key, the latest version

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.type) for c in self.columns])

    def to_arrow(self, rows: list[dict], *, dated: bool = False) -> pa.Table:
        """`rows` as the table's columns, in its `sort_by` order; `dated`: with the `date` partition, each
        row's UTC day of its `date_from`."""
        columns = {c.name: pa.array([row.get(c.key) for row in rows], type=c.type) for c in self.columns}
        schema = self.schema
        if dated:
            columns["date"] = pa.array([utc_day(row[self.date_from]) for row in rows], pa.string())
            schema = schema.append(pa.field("date", pa.string()))
        return pa.table(columns, schema=schema).sort_by([(name, "ascending") for name in self.sort_by])


_FIGURE_DOCS = {
    "queued": "lifetime holding no chips, × requested chips",
    "partial": "lifetime holding fewer chips than requested, × requested chips",
    "productive": "step time preserved by a checkpoint or the job's finish (serving: answered), × requested chips",
    "pending": "step time not yet preserved or lost at the as-of time, × requested chips",
    "lost": "step time thrown away by a preemption, failure, cancel or restore, or redoing steps already "
    "preserved, × requested chips",
    "data_wait": "all-allocated time waiting for input data, × requested chips",
    "compile": "all-allocated time compiling, × requested chips",
    "checkpoint_save": "all-allocated time saving checkpoints, × requested chips",
    "checkpoint_restore": "all-allocated time restoring checkpoints, × requested chips",
    "init": "all-allocated time initialising, × requested chips",
    "idle": "all-allocated time with no runtime span reported, × requested chips",
    "lifetime": "requested chips × time from SUBMIT to the end or the as-of time (= queued + partial + all_allocated)",
    "all_allocated": "requested chips × time holding all of them (= the nine runtime categories)",
    "held": "chips actually held × time, over the whole lifetime (fleet occupancy)",
    "partial_held": "chips actually held while partial: capacity taken but not usable",
    "clipped_runtime": "runtime span time reported outside all-allocated time (data quality; not in any category)",
    "profiled_productive": "productive chip-seconds of step spans that have a profiler sample (PG coverage numerator)",
}

VERSION = Column(
    "version",
    TIMESTAMP,
    "event time of the result: the as-of time in batch, the firing time in "
    "streaming; a later version of a row replaces an earlier one in the table",
    "version_us",
)

JOB_WINDOW = Table(
    name="job_window",
    doc="Chip-seconds per category for one job in one event-time window.",
    columns=(
        Column("job_id", pa.string(), "the job"),
        Column("window_start", TIMESTAMP, "start of the event-time window (UTC)", "window_start_us"),
        *(Column(f"{figure}_chip_s", pa.float64(), _FIGURE_DOCS[figure]) for figure in FIGURES),
        Column("ideal_chip_s", pa.float64(), "ideal chip-seconds of the productive steps at the accelerator's peak"),
        VERSION,
    ),
    date_from="window_start_us",
    sort_by=("job_id", "window_start", "version"),
    key=("job_id", "window_start"),
)

JOBS = Table(
    name="jobs",
    doc="One row per job: attributes from its SUBMIT and its state at the end or the as-of time.",
    columns=(
        Column("job_id", pa.string(), "the job"),
        Column("cluster", pa.string(), "cluster it was submitted to"),
        Column("accelerator", pa.string(), "accelerator catalogue key"),
        Column("workload", pa.string(), "TRAINING, SERVING or BULK_INFERENCE (null when not reported)"),
        Column("framework", pa.string(), "ML framework, when reported"),
        Column("team", pa.string(), "owning team, when reported"),
        Column("topology", pa.string(), "requested topology, when reported"),
        Column("priority", pa.int32(), "scheduling priority, when reported"),
        Column(
            "queue",
            pa.string(),
            "the queue it waited in, parent queues first, '/'-separated (Kueue: "
            "<ClusterQueue>/<namespace>/<LocalQueue>), when reported",
        ),
        Column("requested_chips", pa.int64(), "chips requested at SUBMIT"),
        Column("submit_time", TIMESTAMP, "SUBMIT event time", "submit_time_us"),
        Column("end_time", TIMESTAMP, "FINISH/FAIL/CANCEL time; null while running", "end_time_us"),
        Column(
            "status",
            pa.string(),
            "FINISHED, FAILED, CANCELLED; or, not ended at the as-of time, RUNNING "
            "(holding chips) or PENDING (holding none: waiting to start, or requeued)",
        ),
        Column(
            "interruptions",
            INTERRUPTIONS,
            "each running attempt cut by a PREEMPT below the request, a FAIL "
            "or a CANCEL: time, event, cause, reason, run_s, reallocated_s, recovered_s, lost_chip_s "
            '(docs/metric.md, "Why jobs stopped")',
        ),
        Column(
            "end_reason",
            pa.string(),
            "why it ended: the `reason` of its FINISH, FAIL or CANCEL, when reported "
            "(a Slurm State such as TIMEOUT or CANCELLED by 0)",
        ),
        Column(
            "allocations",
            pa.int32(),
            "ALLOCATE events (completing a partial allocation counts, as does a restart: "
            "not a restart count, see disruptions)",
        ),
        Column("profiler_samples", pa.int32(), "profiler samples accepted for the job"),
        Column("implicitly_closed_spans", pa.int32(), "runtime spans closed without their END (data quality)"),
        Column("checkpoint_saves", pa.int32(), "checkpoint saves completed (CHECKPOINT_SAVE_END closing an open save)"),
        Column(
            "disruptions",
            pa.int32(),
            "running attempts cut by a PREEMPT below the request or a FAIL, "
            "and runtime restarts inside an allocation after steps ran",
        ),
        Column(
            "first_running_time",
            TIMESTAMP,
            "when the job first held all its requested chips (its admission: "
            "the end of its first queue wait); null until then",
            "first_running_time_us",
        ),
        Column(
            "unended_runs",
            pa.int32(),
            "runs of its runtime that stopped without an end mark (a FINISH, FAIL, "
            "CANCEL or PREEMPT): steps, then the runtime starting again in the same attempt, or a span open "
            "when the job ended (a process SIGKILLed mid-run); its figures after each rest on what was recorded",
        ),
        VERSION,
    ),
    date_from="submit_time_us",
    sort_by=("job_id", "version"),
    key=("job_id",),
)

CAPACITY_LEVEL = Table(
    name="capacity_level",
    doc="Chips online per cluster and accelerator, one row per stretch of one CAPACITY level: from its "
    "event to the next, or to the as-of time while it holds. A level that holds for years is one row; "
    "the `capacity_window` view cuts the stretches into windows where a query reads them.",
    columns=(
        Column("cluster", pa.string(), "cluster"),
        Column("accelerator", pa.string(), "accelerator catalogue key"),
        Column("start_time", TIMESTAMP, "the CAPACITY event that set the level (UTC)", "start_time_us"),
        Column(
            "end_time",
            TIMESTAMP,
            "the next CAPACITY event of the cluster and accelerator, or the as-of "
            "time while the level still holds (UTC)",
            "end_time_us",
        ),
        Column("chips", pa.int64(), "chips online over the stretch"),
        Column(
            "changed_from",
            TIMESTAMP,
            "the earliest instant of the stretch whose chip-time this version changed: "
            "its start, or for a stretch that now ends elsewhere, the nearer of its two ends",
            "changed_from_us",
        ),
        VERSION,
    ),
    date_from="start_time_us",
    sort_by=("cluster", "accelerator", "start_time", "version"),
    key=("cluster", "accelerator", "start_time"),
)

# Not a table: the shape of the `capacity_window` view (sql/derived/capacity_window.sql), which
# cuts `capacity_level` into windows, for the checks that read it (fleet_goodput/quality/suites.py).
CAPACITY_WINDOW = Table(
    name="capacity_window",
    doc="Chips online × time per cluster and accelerator in one window (a view of capacity_level).",
    columns=(
        Column("cluster", pa.string(), "cluster"),
        Column("accelerator", pa.string(), "accelerator catalogue key"),
        Column("window_start", TIMESTAMP, "start of the event-time window (UTC)", "window_start_us"),
        Column("capacity_chip_s", pa.float64(), "chips online × seconds"),
        Column("online_s", pa.float64(), "seconds of the window some level covers"),
        VERSION,
    ),
    date_from="window_start_us",
    sort_by=("cluster", "accelerator", "window_start", "version"),
    key=("cluster", "accelerator", "window_start"),
)

REJECTED = Table(
    name="rejected",
    doc="Input that was not used, with the reason; `records` counts the events a row stands for.",
    columns=(
        Column("stream", pa.string(), "scheduler, runtime or profiler"),
        Column("event_id", pa.string(), "the event's id, when it could be read"),
        Column("job_id", pa.string(), "the event's job, when it could be read"),
        Column("event_time", TIMESTAMP, "the event's time, when it could be read", "event_time_us"),
        Column("type", pa.string(), "the event's type (PROFILE for profiler samples)"),
        Column("reason", pa.string(), "why it was rejected"),
        Column("source", pa.string(), "the file it came from, for decoding and validation failures"),
        Column("records", pa.int64(), "events this row stands for (more than 1 for an undecodable Avro block)"),
    ),
    date_from="partition_time_us",
    sort_by=("stream", "event_time", "event_id", "reason", "source"),
)

LATE = Table(
    name="late",
    doc="Events that arrived after the allowed lateness (streaming): not in any figure, counted in the manifest.",
    columns=(
        Column("stream", pa.string(), "scheduler, runtime or profiler"),
        Column("event_id", pa.string(), "the event's id"),
        Column("job_id", pa.string(), "the event's job (null for CAPACITY)"),
        Column("event_time", TIMESTAMP, "the event's time", "event_time_us"),
        Column("type", pa.string(), "the event's type (PROFILE for profiler samples)"),
        Column("lateness_s", pa.float64(), "how far behind its key's last results it arrived"),
        Column("allowed_lateness_s", pa.float64(), "the allowed lateness it exceeded"),
    ),
    date_from="event_time_us",
    sort_by=("stream", "event_time", "event_id"),
)

REJECTED_PENDING = Table(
    name="rejected_pending",
    doc="Rejections of events still inside the allowed lateness of the latest run: decided provisionally, "
    "replaced by each run; the `rejected` view shows them with `provisional` true.",
    columns=REJECTED.columns,
    date_from="partition_time_us",
    sort_by=REJECTED.sort_by,
)

QUEUE_QUOTA = Table(
    name="queue_quota",
    doc="The quota levels of Kueue's ClusterQueues and Cohorts that scheduler files state "
    "(fleet_goodput/telemetry/queue_quotas.py), each from its start on, per flavor of accelerator chips. "
    "Not computed by the pipeline: each run appends the levels its new files state, and the "
    "`queue_quota_levels` view reads each once.",
    columns=(
        Column("cluster", pa.string(), "cluster"),
        Column("kind", pa.string(), "ClusterQueue or Cohort"),
        Column("name", pa.string(), "the ClusterQueue's or Cohort's name"),
        Column("cohort", pa.string(), "a ClusterQueue's cohort; a Cohort's parent"),
        Column("flavor", pa.string(), "the ResourceFlavor"),
        Column("accelerator", pa.string(), "the flavor's accelerator catalogue key"),
        Column("start_time", TIMESTAMP, "when the level was seen (UTC)", "start_us"),
        Column("nominal_chips", pa.int64(), "nominal quota, chips", "nominal"),
        Column("borrowing_limit_chips", pa.int64(), "how many chips it may borrow (null: no limit)", "borrowing_limit"),
        Column("lending_limit_chips", pa.int64(), "how many it may lend (null: no limit)", "lending_limit"),
        Column(
            "usage_chips", pa.int64(), "chips its admitted Workloads used, as its status said (null: not said)", "usage"
        ),
        Column(
            "borrowed_chips", pa.int64(), "of those, chips over its nominal quota, borrowed from its cohort", "borrowed"
        ),
    ),
    date_from="start_us",
    sort_by=("cluster", "kind", "name", "flavor", "start_time"),
)

TABLES = {
    table.name: table for table in (JOB_WINDOW, JOBS, CAPACITY_LEVEL, REJECTED, REJECTED_PENDING, LATE, QUEUE_QUOTA)
}
# Tables a run replaces rather than appends to.
REPLACED_EACH_RUN = ("rejected_pending",)
# Tables a run writes from what its new files state, not from the pipeline's staged results.
STATED = ("queue_quota",)


DAY_US = 86_400_000_000
_EPOCH_DAY = date(1970, 1, 1).toordinal()


def utc_day(time_us: int) -> str:
    """The UTC day of a time, as a partition names it: a run writes thousands of rows of a few days."""
    return _day_name(int(time_us // DAY_US))


@lru_cache(maxsize=1024)
def _day_name(days_since_epoch: int) -> str:
    return date.fromordinal(_EPOCH_DAY + days_since_epoch).strftime("%Y-%m-%d")
