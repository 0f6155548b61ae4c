"""The event-time chunk driver: compute a run's new files into its staging, in one pipeline or chunk by chunk.

A run's new files are computed by one Beam pipeline (pipelines/goodput.py),
or, over a long input (`--chunk_hours`, or a local run given more than
`CHUNK_INPUT_BYTES` or `CHUNK_EVENTS` of new input), by one pipeline per chunk
of event time, one after the other, each continuing the state the one before
staged, so that memory follows one chunk; the run is still one commit
(fleet_goodput/runs/commit.py). Chunks cut by event time give the figures of
one pass (tests/runs/test_split_invariance.py). `heartbeat` tells the caller a
long pipeline goes on.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager

from apache_beam.io.filesystems import FileSystems

from fleet_goodput.core.asof import CLOCK_STREAM, describe_span, event_times, history_start, kept_times
from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.core.windows import window_start
from fleet_goodput.pipelines import goodput
from fleet_goodput.quoting import literal_pattern
from fleet_goodput.runs.beam_flags import is_local
from fleet_goodput.runs.inputs import matched_files, size_text
from fleet_goodput.runs.plan import RunPlan, staging_folder
from fleet_goodput.runs.scratch import run_scratch
from fleet_goodput.telemetry.avro_blocks import declared_records
from fleet_goodput.telemetry.columnar import decode_input_file, event_time_counts
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.telemetry.input_files import NotARegularFile
from fleet_goodput.transforms.read import open_input
from fleet_goodput.transforms.slices import chunk_folder

HOUR_US = 3_600_000_000
# A local run given no --chunk_hours (nor --as_of) over more new input than this, in bytes or in events
# (the records its files' Avro block headers declare), computes in chunks of event time holding about
# this much each, by whichever is the tighter. A pipeline's memory grows with its events, about 0.35 GiB a
# million on top of 0.25 GiB, whether a fleet's or one job's: 24 MiB is about 1.3 million of the simulator's
# events, but a single job's runtime events pack tighter (3 million in 16 MiB), so bytes alone let one
# job's file of millions through whole (1.25 GiB at 3 million). 1,250,000 events chunks such a file as the
# simulator's 24 MiB are chunked (a fleet's runs are as before) and holds a chunk near 0.6 GiB
# (docs/performance.md, "Scaling to 10M events" and "One job of millions of events").
CHUNK_INPUT_BYTES = 24 * 2**20
CHUNK_EVENTS = 1_250_000


def compute(
    plan: RunPlan,
    settings: Settings,
    run_settings: RunSettings,
    beam_args,
    given_as_of_us: int | None,
    chunk_hours: int | None,
    progress: Callable[[str], None],
) -> list[str]:
    """Compute the run's new files into its staging: the folders staged, the last holding the state it ends in."""
    with run_scratch():  # Beam's temporary folders, removed by the next run if this one is killed
        return _compute_in(plan, settings, run_settings, beam_args, given_as_of_us, chunk_hours, progress)


def _compute_in(
    plan: RunPlan,
    settings: Settings,
    run_settings: RunSettings,
    beam_args,
    given_as_of_us: int | None,
    chunk_hours: int | None,
    progress: Callable[[str], None],
) -> list[str]:
    new = f"{len(plan.files):,} new file(s), {size_text(f.size for f in plan.files)}"
    # Only a local run's memory is this process's; counting costs a few reads a block of every new file.
    count_events = is_local(beam_args) and (chunk_hours or given_as_of_us is None)
    events = declared_events(plan.files) if count_events else None
    if chunk_hours:
        progress(f"Computing {new} in chunks of {chunk_hours} h of event time, one pipeline each")
        return _run_in_chunks(plan, settings, run_settings, beam_args, chunk_hours * HOUR_US, progress, events)
    if (
        given_as_of_us is None
        and events is not None
        and (sum(f.size for f in plan.files) > CHUNK_INPUT_BYTES or events > CHUNK_EVENTS)
    ):
        progress(
            f"Computing {new} ({events:,} events) in chunks of event time of at most about "
            f"{size_text([CHUNK_INPUT_BYTES])} of input or {CHUNK_EVENTS:,} events each, one pipeline each, "
            "so that memory follows a chunk (--chunk_hours sets their length)"
        )
        return _run_in_chunks(plan, settings, run_settings, beam_args, None, progress, events)
    progress(f"Decoding and computing {new} in one Beam pipeline")
    computing = time.monotonic()
    with heartbeat(progress, "decoding and computing"):
        goodput.run(
            plan.files_by_stream,
            list(plan.state_files),
            staging_folder(plan),
            settings,
            run_settings,
            plan.continuation,
            given_as_of_us,
            beam_args,
        )
    progress(f"  computed in {time.monotonic() - computing:.1f} s")
    return [staging_folder(plan)]


@contextmanager
def heartbeat(progress: Callable[[str], None], doing: str, every_s: float = 30.0):
    """Tell `progress` every `every_s` seconds that `doing` goes on, until the block ends: a
    pipeline over a big input computes for minutes without a word otherwise."""
    done, started = threading.Event(), time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            progress(f"  still {doing}: {time.monotonic() - started:.0f} s so far")

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _run_in_chunks(
    plan: RunPlan,
    settings: Settings,
    run_settings: RunSettings,
    beam_args,
    chunk_us: int | None,
    progress: Callable[[str], None],
    events: int | None = None,
) -> list[str]:
    """Run the pipeline once per chunk of event time, one after the other: each computes only its
    chunk's events, continuing the state the one before staged, so memory follows one chunk. Each
    new file is decoded once, before the chunks, into its share of each (transforms/slices.py), so
    a chunk reads its own events only. Chunks cut by event time give the figures of one pass (the
    runs of a store are split-invariant, tests/runs/test_split_invariance.py). Returns every staged
    folder, in order. Without `chunk_us`, chunks of whole hours that hold about `CHUNK_INPUT_BYTES`
    or `CHUNK_EVENTS` of the input each, the tighter (`chunk_length`). Given the new files' `events`
    (a local run), chunks also begin where the runtime and profiler events would fill one past its
    share (`chunk_events`), not only where scheduler events are (`event_time_chunks`)."""
    started = time.monotonic()
    input_bytes = sum(f.size for f in plan.files)
    clock_files = [f for f in plan.files if f.stream == CLOCK_STREAM]
    clocks = [_clock_of(f.path, settings) for f in clock_files]
    new = kept_times(*(times for times, _ in clocks))
    kept = kept_times(plan.continuation.kept_times, new)
    chunk_us = chunk_us or chunk_length(input_bytes, new, events or 0)
    hours = set().union(*(hours for _, hours in clocks))
    most_events = chunk_events(input_bytes, events) if events else None
    # Where the other streams' events are matters only where a chunk could hold more than its share.
    counted = _events_by_window(plan.files, chunk_us) if most_events and events > most_events else {}
    chunks = event_time_chunks(
        new, kept, chunk_us, {window_start(hour, chunk_us) for hour in hours}, counted, most_events
    )
    read = f"Read the scheduler's clock from {len(clock_files):,} file(s)"
    if counted:
        read += f" and where the other {len(plan.files) - len(clock_files):,} file(s)' events are"
    read += f" in {time.monotonic() - started:.1f} s"
    slices = f"{staging_folder(plan)}/slices"
    if len(chunks) > 1:
        started = time.monotonic()
        with heartbeat(progress, "decoding the new files into the chunks"):
            goodput.slice_files(
                [(f.stream, f.path, f.size) for f in plan.files],
                settings,
                [chunk for _, chunk in chunks],
                slices,
                beam_args,
            )
        read += (
            f", chunks of {describe_span(chunk_us)}, and decoded the {len(plan.files):,} new file(s) once "
            f"into them in {time.monotonic() - started:.1f} s"
        )
    progress(f"{read}: {len(chunks)} chunk(s) of event time")
    # Where the fleet's history starts is the whole input's, not the first chunk's (fleet_goodput/core/asof.py).
    continuation = dataclasses.replace(plan.continuation, history_start_us=history_start(kept))
    state_files, staged = list(plan.state_files), []
    for number, (begins_us, chunk) in enumerate(chunks):
        started, folder = time.monotonic(), f"{staging_folder(plan)}/chunk-{number:04d}"
        sliced = _slices_of(slices, number) if len(chunks) > 1 else None  # one chunk reads the files themselves
        with heartbeat(progress, f"computing chunk {number + 1}"):
            goodput.run(
                plan.files_by_stream,
                state_files,
                folder,
                settings,
                run_settings,
                continuation,
                beam_args=beam_args,
                during=chunk,
                slices=sliced,
            )
        if sliced:
            FileSystems.delete([f"{chunk_folder(slices, number)}/"])  # read: its disk space back now
        begins = format_time_us(begins_us) if begins_us is not None else "no scheduler event"
        progress(f"  chunk {number + 1}/{len(chunks)} ({begins}): {time.monotonic() - started:.1f} s")
        tally = goodput.read_tally(folder)
        if tally.as_of_us is not None:
            continuation = continuation.after(
                tally.as_of_us, run_settings.allowed_lateness_s * 1_000_000, tally.kept_times
            )
        state_files = [path for path, _, _ in matched_files(f"{literal_pattern(folder)}/state_keys/*.parquet")]
        staged.append(folder)
    return staged


def _slices_of(folder: str, chunk: int) -> list[str]:
    """The slices written for chunk number `chunk`, in the order of the groups of files they came from."""
    return sorted(path for path, _, _ in matched_files(f"{literal_pattern(chunk_folder(folder, chunk))}/*.marshal"))


def _clock_of(path: str, settings: Settings) -> tuple[list[tuple[int, str]], set[int]]:
    """A scheduler file's latest and earliest (time, key) (fleet_goodput/core/asof.py), and the hours its
    events fall in (a chunk of whole hours begins where one of them does); none if it is gone."""
    try:
        decoded = decode_input_file(CLOCK_STREAM, path, settings.accelerators, open_file=open_input)
    except FileNotFoundError:
        return [], set()  # gone since it was listed: the run computes again without it (run_batch)
    return decoded.kept_times, {
        window_start(event[0], HOUR_US) for batch in decoded.batches.values() for event in batch
    }


def declared_events(files) -> int:
    """How many events the new `files` hold, as their Avro block headers declare
    (`avro_blocks.declared_records`): none for a file that is gone or not a regular one."""
    events = 0
    for file in files:
        try:
            with open_input(file.path) as handle:
                events += declared_records(handle)
        except (FileNotFoundError, NotARegularFile):
            continue  # the decode says so, or the run computes again without it (run_batch)
    return events


def _events_by_window(files, window_us: int) -> dict[int, int]:
    """How many of the runtime and profiler events of `files` fall in each window of `window_us`
    (`columnar.event_time_counts`: a file it cannot read in columns is left out)."""
    counts = Counter()
    for file in files:
        if file.stream == CLOCK_STREAM:
            continue  # the scheduler's events set the chunks' begins themselves (`_clock_of`)
        try:
            with open_input(file.path) as handle:
                data = handle.read()
        except (FileNotFoundError, NotARegularFile):
            continue
        counts.update(event_time_counts(file.stream, data, window_us))
    return dict(counts)


def chunk_events(input_bytes: int, events: int) -> int:
    """The events a chunk may hold: `CHUNK_EVENTS`, or as many as `CHUNK_INPUT_BYTES` of this input
    holds on average if that is fewer."""
    return max(min(CHUNK_EVENTS, CHUNK_INPUT_BYTES * events // max(input_bytes, 1)), 1)


def chunk_length(input_bytes: int, new: list[tuple[int, str]], events: int = 0) -> int:
    """The chunk of event time that holds about `CHUNK_INPUT_BYTES` of the input and `CHUNK_EVENTS`
    of its `events` at most, if they spread evenly over the time the new scheduler events span (their
    earliest and latest, `new`): whole days, or hours that divide a day (so that chunks start at
    midnight UTC)."""
    times = [time_us for time_us, _ in event_times(new)]
    span_hours = max((max(times) - min(times)) / HOUR_US, 1) if times else 1
    hours = span_hours * min(CHUNK_INPUT_BYTES / max(input_bytes, 1), CHUNK_EVENTS / max(events, 1))
    if hours >= 24:
        return int(hours // 24) * 24 * HOUR_US
    return max(divisor for divisor in (1, 2, 3, 4, 6, 8, 12) if divisor <= max(hours, 1)) * HOUR_US


def event_time_chunks(
    new: list[tuple[int, str]],
    kept: list[tuple[int, str]],
    chunk_us: int,
    occupied: set[int] = frozenset(),
    counted: dict[int, int] | None = None,
    most_events: int | None = None,
) -> list[tuple[int | None, TimeSlice]]:
    """The chunks a backfill computes, with the time each begins at (None: no scheduler event to say).

    UTC-aligned chunks of `chunk_us` (24 h chunks start at midnight) that hold
    new scheduler events: those `occupied` begins at, and those of the times
    `new`, leaving out a clock reset into the past that the times the store
    keeps, `kept`, show. A chunk runs up to the next one, over any stretch
    without scheduler events (cost follows events, not empty time), unless the
    other streams' events it would hold, `counted` (events by chunk-aligned
    window), would pass `most_events`: a chunk then also begins at the window
    that would take it past, so that one job's millions of runtime events
    between its SUBMIT and its FINISH are cut too. Such a begin needs the chunk
    before it and its own window to hold more than `most_events` together, so
    however the events are scattered they add fewer than 2 * events /
    `most_events` chunks. The first chunk also holds every earlier event, and
    the last every later one (runtime events before a job's SUBMIT, a clock
    ahead), so that no event falls outside.
    """
    start = history_start(kept)
    times = [time_us for time_us, _ in event_times(new) if start is None or time_us >= start]
    if not times:
        return [(None, TimeSlice())]
    first = window_start(min(times), chunk_us)
    begins = {window_start(time_us, chunk_us) for time_us in times} | {begin for begin in occupied if begin >= first}
    if counted and most_events:
        begins |= _filling_begins(counted, begins, first, most_events)
    begins = sorted(begins)
    bounds = [None, *begins[1:], None]
    return [
        (begin, TimeSlice(since, until, first=number == 0))
        for number, (begin, since, until) in enumerate(zip(begins, bounds, bounds[1:]))
    ]


def _filling_begins(counted: dict[int, int], begins: set[int], first: int, most_events: int) -> set[int]:
    """The windows where a chunk must begin besides `begins` so that none holds more than `most_events`
    of the `counted` events unless a window of them alone does. Windows before `first` are the first
    chunk's."""
    added, held = set(), sum(count for window, count in counted.items() if window < first)
    for window in sorted({window for window in counted if window >= first} | begins):
        count = counted.get(window, 0)
        if window == first:
            held += count
        elif window in begins:
            held = count
        elif held and held + count > most_events:
            added.add(window)
            held = count
        else:
            held += count
    return added
