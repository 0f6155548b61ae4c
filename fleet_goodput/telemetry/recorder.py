"""Recording a training job's runtime and profiler events from inside its training loop.

    from fleet_goodput.telemetry.recorder import Recorder

    recorder = Recorder("/data/telemetry", job_id="llama-7b-0412", attempt=restart_count)
    with recorder.span("INIT"):
        state = init()
    for step in range(first_step, last_step + 1):
        with recorder.step(step):
            state = train_step(state)
        if step % 1000 == 0:
            with recorder.span("CHECKPOINT_SAVE", step):   # END: the step made durable
                save(state, step)
    recorder.close()                                       # also run at exit

The events go to FOLDER/runtime/*.avro and FOLDER/profiler/*.avro in the
contract's schemas (schemas/), beside the job's scheduler stream for
`mpg run --input FOLDER`. Recording never blocks the training step: a call
appends a tuple to a bounded queue (a deque; no lock, no I/O) and a background
thread writes a file per stream every `roll_seconds`. A file is written under
a temporary name (`.NAME.tmp`, which `mpg run` does not read) and renamed
when complete, so a job killed at any instant leaves only complete files; what
it loses is at most the last `roll_seconds` of events (in its first minute, at
most the last half of what it ran: the first rolls come after 1, 2, 4, ... s). At interpreter exit
(atexit) and on `close()` the rest is written. SIGTERM (a preemption's first
word) skips atexit: with `close_on_sigterm=True` the recorder writes the rest
first, then lets the signal do what it did before (the previous handler, or
the default: the process ends).

A job that no cluster exporter reports states its scheduling with
`Recorder(..., scheduling=Scheduling(accelerator, chips))`: the recorder then
also writes FOLDER/scheduler/*.avro, the job's SUBMIT (first attempt),
ALLOCATE and the attempt's end (FINISH at close, FAIL on an uncaught
exception, PREEMPT on SIGTERM; docs/recorder.md).

Event ids are derived from the event itself (job, attempt, type, step and
time), so a file written twice dedupes in `mpg run`, and two runs of a job
never collide. The module imports fastavro and the project's Avro writer
(fleet_goodput.telemetry.avro_io) only: neither Beam nor DuckDB.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

from fleet_goodput.telemetry.avro_io import write_events

SPAN_KINDS = ("INIT", "COMPILE", "STEP", "CHECKPOINT_SAVE", "CHECKPOINT_RESTORE", "DATA_WAIT")
FLOPS_SOURCES = ("HLO_UNOPTIMIZED", "ANALYTIC", "EXECUTED")
DEFAULT_ROLL_SECONDS = 60.0
FIRST_ROLL_SECONDS = 1.0  # the first roll; each next one twice as long, up to roll_seconds
# About 100 MB of queued tuples: hours of steps, should the disk stall.
DEFAULT_MAX_QUEUED = 1_000_000
_PROFILE = "PROFILE"
_SAVE_END = "CHECKPOINT_SAVE_END"
_DURABLE_ENDS = (_SAVE_END, "CHECKPOINT_RESTORE_END")  # a save's step, or the step a restore resumed from
WORKLOADS = ("TRAINING", "SERVING", "BULK_INFERENCE")
ENDS = ("FINISH", "FAIL", "CANCEL", "PREEMPT")  # how an attempt ends, in its scheduler stream
_SCHEDULER_TYPES = ("SUBMIT", "ALLOCATE", *ENDS)
MAX_REASON = 256  # the contract's limit on a scheduler event's reason
_log = logging.getLogger(__name__)


def _now_us() -> int:
    return time.time_ns() // 1000


class _Span:
    """`with recorder.span(kind, step)`: KIND_START on entry, KIND_END on exit (also on an exception, but
    for a checkpoint save: a save that raised made nothing durable, see `__exit__`)."""

    __slots__ = ("recorder", "start", "end", "step")

    def __init__(self, recorder: Recorder, kind: str, step: int | None):
        self.recorder, self.start, self.end, self.step = recorder, f"{kind}_START", f"{kind}_END", step

    def __enter__(self):
        self.recorder._put((self.start, _now_us(), self.step))
        return self

    def __exit__(self, exc_type, exc, traceback):
        step = self.step
        if self.end == _SAVE_END and exc_type is not None:
            # The save raised: its END says only what was durable before it, so the steps since count
            # as lost at a crash, not preserved. With nothing known durable it stays open (closed by
            # the next save or the job's end, counted as implicitly closed).
            step = self.recorder._durable_before()
            if step is None:
                return False
        elif self.end in _DURABLE_ENDS and step is not None:
            self.recorder._made_durable(step)
        self.recorder._put((self.end, _now_us(), step))
        return False


@dataclass(frozen=True)
class Scheduling:
    """A job's scheduling, stated by the job itself where no cluster exporter reports it (a workstation, a
    cloud VM, a launcher of its own): the recorder writes the job's scheduler stream. Its first attempt
    (`attempt` 0 or None) writes SUBMIT; every attempt writes ALLOCATE of `chips` when the recorder starts
    and its end when the recorder closes: FINISH, FAIL when the process ends with an uncaught exception
    (its reason `CRASHED: Type: message`), PREEMPT when SIGTERM closes it (`close_on_sigterm`). With
    `restarted_on_failure` (a launcher that restarts a failed attempt: torchrun --max-restarts, a
    Kubernetes Job's backoffLimit) a crash writes PREEMPT, so the next attempt continues the job. An
    attempt killed outright (SIGKILL) writes no end; its job is flagged (`jobs.unended_runs`)."""

    accelerator: str  # a key of the accelerator catalogue (configs/accelerators.yaml)
    chips: int
    cluster: str = "local"
    workload: str = "TRAINING"
    team: str | None = None
    framework: str | None = None
    restarted_on_failure: bool = False

    def __post_init__(self):
        if isinstance(self.chips, bool) or not isinstance(self.chips, int) or self.chips <= 0:
            raise ValueError(f"chips must be a positive whole number, not {self.chips!r}")
        if self.workload not in WORKLOADS:
            raise ValueError(f"unknown workload {self.workload!r}; expected one of {', '.join(WORKLOADS)}")
        if not self.accelerator or not self.cluster:
            raise ValueError("accelerator and cluster must be named")


class Recorder:
    """Records one job's runtime and profiler events into rolling Avro files under `folder`.

    `attempt` is the job's restart count where the launcher knows it (a
    Kubernetes restart count, a Slurm requeue count); it goes into every event.
    Calls are for one training thread; the writing is on a thread of its own.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        job_id: str,
        *,
        attempt: int | None = None,
        roll_seconds: float = DEFAULT_ROLL_SECONDS,
        max_queued: int = DEFAULT_MAX_QUEUED,
        close_on_sigterm: bool = False,
        scheduling: Scheduling | None = None,
    ):
        if not job_id:
            raise ValueError("job_id is required: the id of the job in its scheduler stream")
        if roll_seconds <= 0 or max_queued <= 0:
            raise ValueError("roll_seconds and max_queued must be positive")
        self.folder, self.job_id, self.attempt = os.fspath(folder), job_id, attempt
        self.roll_seconds, self.max_queued = roll_seconds, max_queued
        self.dropped = 0  # events refused because the queue was full (the writer could not keep up)
        self.files_written = 0
        self._queue: collections.deque = collections.deque()
        # Files of this recorder: job, host, process and start time keep them apart from any other's.
        safe_job, host = (re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] for name in (job_id, socket.gethostname()))
        self._file_stem = f"{safe_job}-{host}-{os.getpid()}-{_now_us()}"
        self._sequence = 0
        # Reentrant: a SIGTERM handler's close() may interrupt a flush() of the same thread. The files it
        # writes twice then hold the same event ids, which mpg run drops as duplicates.
        self._write_lock = threading.RLock()
        self._unwritten: dict[str, list[dict]] = {"runtime": [], "profiler": [], "scheduler": []}  # retried
        self._held = 0  # events in _unwritten: a write that failed keeps them, inside max_queued
        self._durable: int | None = None  # the step the last save that returned (or a restore) made durable
        self._first_step: int | None = None  # the first step this attempt ran
        self._closed = False
        self.scheduling = scheduling
        if scheduling is not None:
            now_us = _now_us()
            if not attempt:  # the first attempt (0, or unknown) submits the job; a restart continues it
                self._queue.append(("SUBMIT", now_us, scheduling.chips, None))
            self._queue.append(("ALLOCATE", now_us, scheduling.chips, None))
        if close_on_sigterm:  # signal handlers belong to the main thread: this raises ValueError elsewhere
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._wake = threading.Event()
        self._writer = threading.Thread(target=self._write_loop, name="fleet-goodput-recorder", daemon=True)
        self._writer.start()
        atexit.register(self.close)

    @property
    def pending(self) -> int:
        """Events recorded and not yet on disk (queued, or kept by a write that failed): at most max_queued."""
        return len(self._queue) + self._held

    # ---- recording (the training thread) --------------------------------
    def _put(self, event: tuple) -> None:
        # The bound holds what is queued and what a failed write kept for the next (a full disk): past it,
        # the newest events are dropped and counted, and memory stays bounded however long the disk stays full.
        if len(self._queue) + self._held >= self.max_queued:
            self.dropped += 1
            return
        self._queue.append(event)

    def step(self, step: int) -> _Span:
        """`with recorder.step(n):` one training step, STEP_START and STEP_END at step n."""
        if self._first_step is None:
            self._first_step = step
        return _Span(self, "STEP", step)

    def span(self, kind: str, step: int | None = None) -> _Span:
        """`with recorder.span(kind, step):` a span of INIT, COMPILE, STEP, CHECKPOINT_SAVE (step: the
        step made durable), CHECKPOINT_RESTORE (step: the step resumed from) or DATA_WAIT."""
        return _Span(self, self._kind(kind), step)

    def start(self, kind: str, step: int | None = None) -> None:
        """KIND_START now, for spans that do not fit a `with` block (STEP_START: the first step of the span)."""
        self._put((f"{self._kind(kind)}_START", _now_us(), step))

    def end(self, kind: str, step: int | None = None) -> None:
        """KIND_END now (STEP_END: the last step of the span; CHECKPOINT_SAVE_END: the step made durable)."""
        if kind in ("CHECKPOINT_SAVE", "CHECKPOINT_RESTORE") and step is not None:
            self._made_durable(step)
        self._put((f"{self._kind(kind)}_END", _now_us(), step))

    def _made_durable(self, step: int) -> None:
        self._durable = step if self._durable is None else max(self._durable, step)

    def _durable_before(self) -> int | None:
        """The step known durable before a save that failed: the last save's or restore's, else the step
        before this attempt's first (none of its own steps), else None (nothing known)."""
        if self._durable is not None:
            return self._durable
        return self._first_step - 1 if self._first_step else None

    def profile(
        self,
        step: int,
        duration_s: float,
        chips: int,
        ideal_flops: float,
        flops_source: str = "ANALYTIC",
        precision: str | None = None,
    ) -> None:
        """A profiler sample: step `step` took `duration_s` on `chips` chips and needed `ideal_flops`
        (the whole job's FLOPs of one step, all chips); `precision` None means bf16."""
        if flops_source not in FLOPS_SOURCES:
            raise ValueError(f"unknown flops_source {flops_source!r}; expected one of {', '.join(FLOPS_SOURCES)}")
        self._put(
            (_PROFILE, _now_us(), step, float(duration_s), int(chips), float(ideal_flops), flops_source, precision)
        )

    @staticmethod
    def _kind(kind: str) -> str:
        if kind not in SPAN_KINDS:
            raise ValueError(f"unknown span kind {kind!r}; expected one of {', '.join(SPAN_KINDS)}")
        return kind

    # ---- writing (the writer thread) -------------------------------------
    def flush(self) -> None:
        """Write what is queued now, from the calling thread, as complete files."""
        self._write_queued()

    def close(self, end: str | None = None, reason: str | None = None) -> None:
        """Stop the writer and write what is left. Idempotent; run at exit. With `scheduling`, the attempt's
        end is written too: `end` (one of ENDS, with its `reason`), else FAIL (or PREEMPT) when the process
        is ending with an uncaught exception, else FINISH."""
        if self._closed:
            return
        if end is not None and end not in ENDS:
            raise ValueError(f"unknown end {end!r}; expected one of {', '.join(ENDS)}")
        self._closed = True
        atexit.unregister(self.close)
        if self.scheduling is not None:
            self._put_end(end, reason)
        self._wake.set()
        self._writer.join()
        self._write_queued()
        if self.dropped:
            _log.warning(
                "fleet-goodput recorder dropped %d events of job %s: the queue was full", self.dropped, self.job_id
            )

    def _put_end(self, end: str | None, reason: str | None) -> None:
        """Queue the attempt's end (`close`): past the queue's bound if need be, as it is the last event."""
        if end is None:
            crash = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # set for an uncaught one
            if crash is not None:
                end = "PREEMPT" if self.scheduling.restarted_on_failure else "FAIL"
                reason = f"CRASHED: {type(crash).__name__}: {crash}"
            else:
                end = "FINISH"
        if reason is not None:
            reason = "".join(c if c.isprintable() else " " for c in reason)[:MAX_REASON]
        self._queue.append((end, _now_us(), 0, reason))

    def _on_sigterm(self, signum, frame) -> None:
        self.close("PREEMPT", "SIGTERM")
        previous = self._previous_sigterm
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default (or a handler not set from Python): the process ends
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if exc_type is None or self.scheduling is None:
            self.close()
        else:  # the `with` block raised: the attempt crashed
            self.close(
                "PREEMPT" if self.scheduling.restarted_on_failure else "FAIL", f"CRASHED: {exc_type.__name__}: {exc}"
            )
        return False

    def _write_loop(self) -> None:
        # The first rolls come sooner, doubling up to roll_seconds (1, 2, 4, ... s): an attempt killed in
        # its first minute (SIGKILL skips every handler) still leaves its start on disk, losing at most
        # the last half of what it ran, where one roll of 60 s would leave nothing at all.
        wait = min(FIRST_ROLL_SECONDS, self.roll_seconds)
        while not self._wake.wait(wait):
            wait = min(wait * 2, self.roll_seconds)
            try:
                self._write_queued()
            except Exception:  # never let the writer die: the next roll tries again
                _log.exception("fleet-goodput recorder could not write events of job %s", self.job_id)

    def _write_queued(self) -> None:
        with self._write_lock:  # flush() and the writer thread may both write
            unwritten, queue = self._unwritten, self._queue
            while queue:  # only a writer, holding the lock, takes from the queue
                # Counted held before it leaves the queue: the training thread's bound (_put) never sees an
                # event in neither, which let the queue refill past max_queued while a batch was moved.
                self._held += 1
                event = queue.popleft()
                unwritten[_stream_of(event[0])].append(self._record(event))
            for stream, records in unwritten.items():
                if records:
                    name = f"{self._file_stem}-{self._sequence:06d}.avro"
                    self._sequence += 1  # before writing: a reentrant write takes the next name
                    write_events(os.path.join(self.folder, stream, name), stream, records)  # raises: kept for later
                    self.files_written += 1
                    self._held -= len(records)
                    records.clear()

    def _record(self, event: tuple) -> dict:
        type_, time_us, step = event[:3]
        attempt = "-" if self.attempt is None else self.attempt
        if type_ in _SCHEDULER_TYPES:
            chips, reason = event[2:]
            scheduling, submit = self.scheduling, type_ == "SUBMIT"
            return {
                "event_id": f"rec/{self.job_id}/{attempt}/{type_}/-/{time_us}",
                "event_time": time_us,
                "job_id": self.job_id,
                "type": type_,
                "cluster": scheduling.cluster,
                "accelerator": scheduling.accelerator,
                "chips": chips,
                "workload": scheduling.workload if submit else None,
                "framework": scheduling.framework if submit else None,
                "team": scheduling.team if submit else None,
                "topology": None,
                "priority": None,
                "queue": None,
                "reason": reason,
            }
        event_id = f"rec/{self.job_id}/{attempt}/{type_}/{'-' if step is None else step}/{time_us}"
        if type_ == _PROFILE:
            duration_s, chips, ideal_flops, flops_source, precision = event[3:]
            return {
                "event_id": event_id,
                "event_time": time_us,
                "job_id": self.job_id,
                "step": step,
                "duration_s": duration_s,
                "chips": chips,
                "ideal_flops": ideal_flops,
                "flops_source": flops_source,
                "bytes_accessed": None,
                "precision": precision,
            }
        return {
            "event_id": event_id,
            "event_time": time_us,
            "job_id": self.job_id,
            "type": type_,
            "step": step,
            "attempt": self.attempt,
        }


def _stream_of(type_: str) -> str:
    if type_ == _PROFILE:
        return "profiler"
    return "scheduler" if type_ in _SCHEDULER_TYPES else "runtime"
