"""The simulated history: what each job did and when.

This is the one record of the simulation. Two independent code paths read
it: `emit` turns it into telemetry events, `truth` turns it into the expected
chip-seconds. Neither reads the other's output, so a bug in the event
encoding cannot hide itself by also bending the truth.

Times are integer microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Runtime span kinds, named as the event types without _START/_END.
INIT = "INIT"
COMPILE = "COMPILE"
STEP = "STEP"
DATA_WAIT = "DATA_WAIT"
CHECKPOINT_SAVE = "CHECKPOINT_SAVE"
CHECKPOINT_RESTORE = "CHECKPOINT_RESTORE"

# What became of the time of a step span (docs/metric.md section 3).
PRODUCTIVE = "productive"
LOST = "lost"
PENDING = "pending"

# Terminal states of a job, as in jobs.parquet.
FINISHED = "FINISHED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
RUNNING = "RUNNING"


@dataclass(frozen=True)
class Cluster:
    name: str
    accelerator: str
    capacity: int  # chips online at the start
    region: str


@dataclass(frozen=True)
class JobSpec:
    """Everything decided about a job at submission, including how it will behave."""

    job_id: str
    cluster: str
    accelerator: str
    workload: str  # TRAINING, SERVING, BULK_INFERENCE
    team: str
    framework: str
    topology: str
    priority: int
    requested_chips: int
    submit_us: int
    ready_us: int  # when the scheduler first considers it (admission delay)
    cancel_us: int | None  # when the user cancels it, if they do
    crash_after_us: int | None  # a bug: every attempt crashes this long after its full allocation
    partial_ok: bool  # accepts a partial (gang-incomplete) allocation while it waits
    profiled: bool  # emits profiler samples
    # Runtime behaviour.
    step_us: int  # nominal duration of one step
    steps_per_span: int  # steps reported by one STEP_START/STEP_END pair
    total_steps: int | None  # TRAINING, BULK_INFERENCE: the work to do
    serve_until_us: int | None  # SERVING: when the deployment is turned down
    checkpoint_every: int | None  # TRAINING: steps between checkpoints
    checkpoint_save_us: int
    checkpoint_restore_us: int
    init_us: int
    compile_us: int
    recompile_us: int  # compile after a restart, mostly served from a cache
    data_wait_prob: float  # chance of an input stall before a step span
    # Profiler.
    ideal_flops: float  # whole-job FLOPs of one step
    flops_source: str
    bytes_per_flop: float


@dataclass
class Span:
    """One runtime span. `stop_us` is its END, or the instant it was cut."""

    kind: str
    start_us: int
    stop_us: int
    attempt: int
    ended: bool = True  # False: no END event (cut by a disruption, the job's end or the horizon)
    first_step: int | None = None  # STEP: first step; CHECKPOINT_RESTORE: the step resumed from
    last_step: int | None = None  # STEP: last step; CHECKPOINT_SAVE: the step made durable
    outcome: str | None = None  # STEP only: PRODUCTIVE, LOST or PENDING
    sampled: bool = False  # the profiler samples this span's first step when it ends


@dataclass(frozen=True)
class Sample:
    """One profiler sample: one step of a completed step span."""

    time_us: int
    step: int
    duration_s: float


@dataclass(frozen=True)
class LevelChange:
    """A scheduler event that sets the chips a job holds from now on."""

    time_us: int
    chips: int
    kind: str  # ALLOCATE or PREEMPT
    reason: str | None = None  # PREEMPT: why (the scheduler event's `reason`)


@dataclass
class JobTimeline:
    spec: JobSpec
    levels: list[LevelChange] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    status: str = RUNNING
    end_us: int | None = None  # FINISH/FAIL/CANCEL time; None if running at the horizon
    end_reason: str | None = None  # why it ended (the terminal event's `reason`)


@dataclass
class FleetTimeline:
    start_us: int
    horizon_us: int
    clusters: list[Cluster]
    capacity: dict[str, list[tuple[int, int]]]  # cluster -> (time, chips online from then on)
    jobs: list[JobTimeline]
    capacity_reasons: dict[str, dict[int, str]] = field(
        default_factory=dict
    )  # cluster -> time -> why the level changed
