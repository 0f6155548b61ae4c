"""The slim event tuples that travel between pipeline stages.

Decoded Avro records are validated and reduced to `Event` tuples right after
reading: Beam's cost is per element and per byte, so what is shuffled is kept
to what the timeline needs. Field meanings follow docs/metric.md section 2.
"""

from __future__ import annotations

import marshal
from typing import NamedTuple

RUNTIME_TYPES = (
    "INIT_START",
    "INIT_END",
    "COMPILE_START",
    "COMPILE_END",
    "STEP_START",
    "STEP_END",
    "CHECKPOINT_SAVE_START",
    "CHECKPOINT_SAVE_END",
    "CHECKPOINT_RESTORE_START",
    "CHECKPOINT_RESTORE_END",
    "DATA_WAIT_START",
    "DATA_WAIT_END",
)
PROFILE = "PROFILE"  # the code of a profiler sample, which has no `type` field
STEP_RUN = (
    "STEP_RUN"  # the code of a job's spans that follow one another, as one event (fleet_goodput/core/step_runs.py)
)
TERMINAL_TYPES = ("FINISH", "FAIL", "CANCEL")

# Events at the same microsecond are applied in this order, so that a step that
# ends at the instant of a preemption counts as ended before it, and a span that
# starts at the instant of an allocation starts inside it.
SAME_INSTANT_ORDERS = 5
_SUBMIT, _RUNTIME_END, _SCHEDULER, _TERMINAL, _RUNTIME_START = range(SAME_INSTANT_ORDERS)


def same_instant_order(code: str) -> int:
    if code == "SUBMIT":
        return _SUBMIT
    if code.endswith("_END") or code == PROFILE:
        return _RUNTIME_END
    if code in TERMINAL_TYPES:
        return _TERMINAL
    if code.endswith("_START"):
        return _RUNTIME_START
    return _SCHEDULER


_STREAM_OF_CODE = {PROFILE: "profiler", STEP_RUN: "runtime"} | dict.fromkeys(RUNTIME_TYPES, "runtime")


def stream_of(code: str) -> str:
    return _STREAM_OF_CODE.get(code, "scheduler")


class Event(NamedTuple):
    """One accepted-so-far event of one job (or of one capacity key)."""

    time_us: int
    order: int  # same_instant_order(code)
    event_id: str
    code: str  # the event's type, or PROFILE
    payload: tuple  # depends on code, see the *_payload helpers below


class Submit(NamedTuple):
    cluster: str
    accelerator: str
    chips: int
    workload: str | None
    framework: str | None
    team: str | None
    topology: str | None
    priority: int | None
    queue: str | None = None  # parent queues first, '/'-separated; None in a state saved before the field


class Sample(NamedTuple):
    step: int
    duration_s: float
    chips: int
    ideal_flops: float
    flops_source: str
    precision: str | None = None  # None: bf16


def reason_of(event: Event) -> str | None:
    """The `reason` of a PREEMPT (chips, reason) or a FINISH/FAIL/CANCEL (reason,); None where the
    payload carries none (events built by hand, as the tests do)."""
    position = 1 if event.code == "PREEMPT" else 0
    return event.payload[position] if len(event.payload) > position else None


def make_event(time_us: int, event_id: str, code: str, payload: tuple = ()) -> Event:
    return Event(time_us, same_instant_order(code), event_id, code, payload)


def pack(events: list[tuple]) -> tuple[int, bytes]:
    """A batch of event tuples as it travels between pipeline steps: (its latest event time, the tuples).

    Beam encodes and decodes what it shuffles element by element, and a
    million events decoded into Python objects cost seconds at every step
    that reads them. Marshalled into one bytes value, a batch crosses as a
    copy of bytes and is unpacked only where its events are used (marshal
    is the fastest serialiser for plain tuples of ints, floats and strings,
    and the bytes never outlive one pipeline run). The latest time rides
    beside it, for steps that need no more than that.
    """
    return max(event[0] for event in events), marshal.dumps(events)


def unpack(packed: tuple[int, bytes]) -> list[tuple]:
    return marshal.loads(packed[1])


def saved(blob: bytes) -> tuple[None, bytes]:
    """A key's saved state as it travels beside the key's packed batches, in the same collection:
    (None, the state blob), where a batch has its latest time. The key step joins a key's batches
    and its state with one grouping of one collection (transforms/sessionize.py): two collections
    would be flattened first, and every event would cross Beam's shuffle twice."""
    return None, blob


def is_saved(value: tuple) -> bool:
    """Whether a value `saved` made (else it is a packed batch)."""
    return value[0] is None
