"""One batch run end to end: new input files → the Beam pipeline → one committed run.

A run continues the output store's last run (fleet_goodput/store/delta_store.py): it
reads only input files whose content no earlier run applied, starts every key
from its saved state, and commits its tables, the new state and its manifest
as one run. Used by `mpg run`, `mpg stream` (one run per batch of new files)
and `mpg demo`. Raises `ReconciliationError` when counts do not add up (the
run is not committed); `translate_batch` hands the pipeline to DataflowRunner
with --dry_run, which checks and translates it offline.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions
from deltalake.exceptions import CommitFailedError, DeltaError

from fleet_goodput import schemas
from fleet_goodput.core.asof import (CLOCK_STREAM, check_as_of_near_data, check_observed_continuity, clock_account,
                                     default_as_of, describe_span, event_times, history_start, latest_times,
                                     newest_known)
from fleet_goodput.core.config import Settings, SettingsFile
from fleet_goodput.core.options import RunOptions
from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.core.windows import window_start
from fleet_goodput.pipelines import goodput
from fleet_goodput.pipelines.options import beam_flags_for
from fleet_goodput.quoting import literal_pattern
from fleet_goodput.runs.scratch import run_scratch
from fleet_goodput.store.delta_store import (STAGING, STATE_FILES_SCHEMA, STATE_KEYS_SCHEMA, RunRecord, Store,
                                             StoreError, Transaction, claim_staging, clear_staging, delta_schema,
                                             is_remote)
from fleet_goodput.store.manifest import add_counts, build_manifest, manifest_path, write_manifest_copy
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stored_settings import ChosenSettings, check_run, commit_settings, settings_for_run
from fleet_goodput.store.tables import QUEUE_QUOTA, REPLACED_EACH_RUN, STATED, TABLES, utc_day
from fleet_goodput.telemetry import observed, queue_quotas
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.telemetry.input_files import NotARegularFile
from fleet_goodput.transforms.read import open_input
from fleet_goodput.transforms.sessionize import Continuation
from fleet_goodput.transforms.slices import chunk_folder


class ReconciliationError(RuntimeError):
    """read != accepted + duplicate + rejected + late for some stream."""


class InputError(ValueError):
    """The input folder is missing or holds no telemetry."""


@dataclass(frozen=True)
class InputFile:
    stream: str
    path: str
    sha256: str
    size: int
    modified_us: int | None = None  # when it was last written, as listed


@dataclass(frozen=True)
class BatchOutcome:
    manifest: dict
    database: Path | None  # None for a remote output
    seconds: float
    run: RunRecord | None = None
    skipped: tuple[str, ...] = ()  # input files an earlier run already applied
    committed: bool = True  # False when nothing was new: the latest run stands
    deferred: tuple[str, ...] = ()  # input files that changed or vanished while read: left for the next run
    note: str | None = None  # what a run on a store from before settings were kept stored (stored_settings.py)
    store: Store | None = None  # the output's, as the run opened it: its readers need not open it again


def check_input(input_dir: str) -> None:
    if is_remote(input_dir):
        return  # remote inputs are matched by Beam's file IO
    root = Path(input_dir)
    if not root.is_dir():
        raise InputError(f"input folder {input_dir} does not exist")
    for stream in schemas.STREAMS:  # a stream folder that cannot be listed would be read as empty
        folder = root / stream
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{folder} is not a folder: the run would miss the {stream} stream; nothing was committed")
        if folder.exists() and not os.access(folder, os.R_OK | os.X_OK):  # a fault: fleet_goodput/faults.py
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
    if not any(root.glob("*/*.avro")):
        raise InputError(f"no telemetry in {input_dir}: expected {input_dir}/scheduler/*.avro, "
                         f"{input_dir}/runtime/*.avro and {input_dir}/profiler/*.avro "
                         f"(try `mpg simulate --out {shlex.quote(input_dir)}`)")


def list_input(input_dir: str, applied: dict[tuple, str] | None = None,
               progress: Callable[[str], None] = lambda _: None) -> list[InputFile]:
    """Every Avro file of every stream, with the hash of its content.

    A file an earlier run applied under the same path, size and modification
    time is taken to be the same file, so a daily run does not read a growing
    input's history again; any other file is hashed, so a copy under another
    name is known, and a corrected file delivered again in place is new.
    """
    applied = applied or {}
    listed = [(stream, listed_as) for stream in schemas.STREAMS
              for listed_as in sorted(_avro_files(f"{input_dir.rstrip('/')}/{stream}"))]
    unknown = [listed_as for _, listed_as in listed if listed_as not in applied]
    hashing = (f"hashing the {len(unknown):,} no earlier run applied ({_size(size for _, size, _ in unknown)})"
               if unknown else "every one known from an earlier run by path, size and time")
    progress(f"Listed {len(listed):,} input file(s), {_size(size for _, (_, size, _) in listed)}; {hashing}")
    return [InputFile(stream, listed_as[0], applied.get(listed_as) or _sha256(listed_as[0]), *listed_as[1:])
            for stream, listed_as in listed]


def _avro_files(folder: str) -> list[tuple[str, int, int | None]]:
    """(path, size, modification time) of each `.avro` file in `folder`. The folder's name is data:
    a local one is listed, not matched, and a remote one is matched with its pattern characters quoted."""
    if is_remote(folder):
        return _matched(f"{literal_pattern(folder)}/*.avro")
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.endswith(".avro")]
    except (FileNotFoundError, NotADirectoryError):
        return []  # a stream with no folder has no files (check_input refused one that cannot be listed)
    listed = []
    for entry in entries:
        path = os.path.join(folder, entry.name)
        # A pipe or a device is listed, and rejected with its reason when decoded; a file gone since
        # the folder was read, or a broken link, is not there to read.
        if not entry.is_dir() and (status := _status(path)) is not None:
            listed.append((path, *status))
    return listed


def _matched(pattern: str) -> list[tuple[str, int, int | None]]:
    """(path, size, modification time) of each file a Beam file-system pattern matches (gs://)."""
    return [(m.path, m.size_in_bytes, _micros(m.last_updated_in_seconds))
            for m in FileSystems.match([pattern])[0].metadata_list]


def _status(path: str) -> tuple[int, int | None] | None:
    """(size, modification time) of a file as listing sees it now; None if it is gone."""
    if is_remote(path):
        matched = _matched(literal_pattern(path))
        return matched[0][1:] if matched else None
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, _micros(status.st_mtime)


def _size(sizes) -> str:
    """A total size in bytes as people read it (KiB, MiB or GiB)."""
    total = sum(sizes)
    unit = next(unit for unit in (3, 2, 1) if total >= 1024**unit or unit == 1)
    return f"{total / 1024**unit:,.1f} {'KMG'[unit - 1]}iB"


def _micros(seconds: float | None) -> int | None:
    return None if not seconds else round(seconds * 1_000_000)


def changed_since_listed(files) -> list[InputFile]:
    """The files whose size or modification time is not what was listed, or that are gone: a
    producer still writing (or replacing) them while the run read them."""
    return [item for item in files if _status(item.path) != (item.size, item.modified_us)]


def _sha256(path: str) -> str:
    """The hash of the file's content. A local path that is not a regular file (a pipe, a device:
    never read, fleet_goodput/telemetry/input_files.py) has the hash of its path instead, so the run rejects
    it with the reason once, and the next run, finding it listed the same, knows it applied."""
    digest = hashlib.sha256()
    try:
        with open_input(path) as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except NotARegularFile:
        return hashlib.sha256(f"not a regular file: {path}".encode()).hexdigest()
    except PermissionError:
        raise  # a fault with an exit code of its own (fleet_goodput/faults.py), not a bad input
    except OSError as exc:
        raise InputError(f"cannot read input file {path} ({exc.strerror or exc}): nothing was committed; "
                         "fix its permissions, or move it out of the input folder") from None
    return digest.hexdigest()


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, decided under the output's lock before the pipeline starts."""

    input_dir: str
    store: Store  # the output's; the run's one (a Flex Template job's commit step gets it with the plan)
    token: str  # names the run's staging folder
    previous: RunRecord | None
    files: tuple[InputFile, ...]
    skipped: tuple[InputFile, ...]
    state_files: tuple[str, ...]

    @property
    def output_dir(self) -> str:
        return self.store.root

    @property
    def continuation(self) -> Continuation:
        previous = self.previous
        if previous is None:
            return Continuation()
        manifest = previous.manifest
        return Continuation(previous.as_of_us, previous.frontier_us, manifest.get("version_us"),
                            tuple(map(tuple, manifest.get("latest_times") or ())))

    def moves_no_time(self, as_of_us: int | None) -> bool:
        """Whether a run with no new file would leave the store as it is: its as-of time (given, or
        the scheduler's clock, which a run given an earlier --as_of left ahead) is the last run's."""
        previous = self.previous
        if previous is None:
            return as_of_us is None
        continuation = self.continuation
        target = as_of_us if as_of_us is not None else default_as_of(list(continuation.latest_times),
                                                                      continuation.as_of_us)
        return target == previous.as_of_us

    @property
    def files_by_stream(self) -> dict[str, list[str]]:
        return {stream: [f.path for f in self.files if f.stream == stream] for stream in schemas.STREAMS}


def plan_run(input_dir: str, store: Store, as_of_us: int | None,
             progress: Callable[[str], None] = lambda _: None) -> RunPlan:
    """Undo what a killed run left, check the continuation, and pick the input files no run applied."""
    require_intact(store)  # a damaged store is refused before a run changes anything
    clear_staging(store.root)
    transaction = store.begin()
    claim_staging(store.root, transaction.token)
    previous = transaction.previous
    _check_continuation(previous, as_of_us, store.root)
    applied = store.applied_files(previous)
    hashes = set(applied.values())
    files, skipped = [], []
    for item in list_input(input_dir, applied, progress):
        (skipped if item.sha256 in hashes else files).append(item)
        hashes.add(item.sha256)
    state_files = tuple(store.path(f) for f in store.files("state_keys", previous))
    return RunPlan(input_dir, store, transaction.token, previous, tuple(files), tuple(skipped), state_files)


def run(options: RunOptions, *, store: Store | None = None, progress: Callable[[str], None] | None = None,
        allowed_lateness_s: int | None = None, mode: str = "batch", build_views: bool = True,
        maintain: bool = True) -> BatchOutcome:
    """`mpg run`, `fleet_goodput.run` and each run of `mpg stream`: one committed run as `options` ask,
    computed with the settings the store keeps, those `options.config` names (and `allowed_lateness_s`,
    a stream's flag) replacing them where that leaves the stored figures right
    (fleet_goodput/store/stored_settings.py), chosen under the output's lock from the run it continues.
    `store` is the output (`options.output`) if the caller opened it already. The outcome's `note` says
    what a store from before settings were kept now stores; `maintain=False` as in `run_batch`."""
    return _run(options, lambda plan: settings_for_run(plan.store, plan.previous, options.config,
                                                       allowed_lateness_s=allowed_lateness_s),
                store=store, progress=progress, mode=mode, build_views=build_views, maintain=maintain)


def run_batch(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
              beam_args: list[str] | None = None, *, run_settings: RunSettings | None = None,
              replace: bool = False, mode: str = "batch", build_views: bool = True,
              chunk_hours: int | None = None, progress: Callable[[str], None] | None = None,
              confirm_as_of: bool = False, maintain: bool = True) -> BatchOutcome:
    """`run` with these settings rather than the store's (`mpg stream`, `mpg demo`, tests); a run whose
    settings would change the stored figures is refused (SettingsConflict) before it computes.
    `maintain=False` leaves the store's maintenance after the commit to the caller (`mpg stream`)."""
    options = RunOptions(input_dir, output_dir, as_of_us, confirm_as_of, replace, chunk_hours=chunk_hours,
                         beam_args=tuple(beam_args or ()))
    given = ChosenSettings(settings, run_settings or RunSettings())

    def checked(plan: RunPlan) -> ChosenSettings:
        check_run(plan.store, plan.previous, given.settings, given.run_settings)
        return given
    return _run(options, checked, mode=mode, build_views=build_views, progress=progress, maintain=maintain)


def _run(options: RunOptions, settings_of_run: Callable[[RunPlan], ChosenSettings], *, store: Store | None = None,
         mode: str = "batch", build_views: bool = True, progress: Callable[[str], None] | None = None,
         maintain: bool = True) -> BatchOutcome:
    """Apply the input's new files to the store at `options.output` as one committed run, computed by
    one Beam pipeline, which the runner parallelises as it does (`options.beam_args`; `beam_args_for`),
    with the settings `settings_of_run` gives for the run's plan, and maintained after its commit
    unless `maintain` is False.

    With `chunk_hours`, the new events are computed chunk of event time by
    chunk, one pipeline after the other (`_run_in_chunks`), so memory follows
    one chunk, not the whole input; the run is still one commit. `progress`
    is told how the chunks go. An `as_of_us` more than the allowed lateness
    past the newest scheduler event is refused (SuspiciousAsOf, nothing
    committed) unless `confirm_as_of`.
    """
    beam_args, input_dir, as_of_us = list(options.beam_args), options.input, options.as_of_us
    check_input(input_dir)
    started = time.monotonic()
    store = store or Store(options.output)  # the run's one: the plan carries it to the commit, views and caller
    with store.lock(), _undone_if_stopped(store):
        if options.replace:
            store.replace()
        progress = progress or (lambda _: None)
        plan = plan_run(input_dir, store, as_of_us, progress)
        chosen = settings_of_run(plan)  # before computing: commit_run checks again
        settings, run_settings = chosen.settings, chosen.run_settings
        skipped = tuple(f.path for f in plan.skipped)
        deferred = []

        def nothing_new() -> BatchOutcome:  # the latest run stands
            previous = plan.previous
            return BatchOutcome(manifest=previous.manifest if previous else {}, database=None,
                                seconds=time.monotonic() - started, run=previous, skipped=skipped,
                                committed=False, deferred=tuple(deferred), store=store)

        if as_of_us is None and not options.confirm_as_of and plan.previous is not None:
            # Before any computing: a wrong folder costs nothing.
            check_observed_continuity(_stated_by(plan.files), list(plan.continuation.latest_times),
                                      plan.previous.as_of_us)
        if not plan.files and plan.moves_no_time(as_of_us):
            if plan.previous and _published_run(store) != plan.previous.run_id:  # stopped after its commit
                _publish(store, plan.previous, settings, build_views, progress)
            return nothing_new()
        chunk_hours = options.chunk_hours
        for _ in range(MAX_ATTEMPTS):
            staged = _compute(plan, settings, run_settings, beam_args, as_of_us, chunk_hours, progress)
            changed = changed_since_listed(plan.files)
            if not changed:
                break
            deferred += [f.path for f in changed]
            progress(f"{len(changed)} file(s) changed or vanished while the run read them (is a producer still "
                     f"writing?); left for the next run: {', '.join(f.path for f in changed)}")
            shutil.rmtree(staging_folder(plan), ignore_errors=True)
            plan = dataclasses.replace(plan, files=tuple(f for f in plan.files if f not in changed))
            if options.as_of_us is None:
                # The clock waits for them: were it to move on, their events would be judged late next run.
                if plan.previous is None:
                    progress("  the first run waits for them: nothing is committed until every file reads whole")
                    return nothing_new()
                as_of_us, chunk_hours = plan.previous.as_of_us, None  # chunks end at their events, not at an as-of
                progress(f"  the as-of time stays run {plan.previous.run_id}'s until they are read")
            if not plan.files and plan.moves_no_time(as_of_us):
                return nothing_new()
        else:
            raise InputError(f"input files kept changing while read, {MAX_ATTEMPTS} times: nothing was committed; "
                             "producers should write a file under another name, then rename it into place")
        if as_of_us is not None and not options.confirm_as_of:
            previous = plan.previous
            check_as_of_near_data(as_of_us, goodput.read_tally(staged[-1]).latest_times,
                                  run_settings.allowed_lateness_s,
                                  (previous.run_id, previous.as_of_us) if previous else None)
        progress(f"Committing run {plan.previous.run_id + 1 if plan.previous else 1} to {plan.output_dir}")
        record = commit_run(plan, settings, run_settings, mode, staged, maintain=maintain)
    database = _publish(store, record, settings, build_views, progress)
    return BatchOutcome(manifest=record.manifest, database=database, seconds=time.monotonic() - started, run=record,
                        skipped=skipped, deferred=tuple(deferred), note=chosen.note,
                        store=store)


def _publish(store: Store, record: RunRecord, settings: Settings, build_views: bool,
             progress: Callable[[str], None]) -> Path | None:
    """Build the committed run's DuckDB views (locally), then write its manifest.json: last, so a
    manifest.json of the latest run says its views are built too. A run stopped in between (a full
    disk, Ctrl-C) leaves both behind, and the next run, finding nothing new, publishes them."""
    from fleet_goodput.store.views import build_database  # DuckDB: not installed on Dataflow workers, which commit here

    database = None
    if build_views and not is_remote(store.root):
        progress("Building the DuckDB views")
        database = build_database(store, settings)
    write_manifest_copy(store.root, record.manifest)
    return database


def _published_run(store: Store) -> int | None:
    """The run whose manifest.json the output holds (a remote output: taken to be the latest)."""
    if is_remote(store.root):
        return store.latest().run_id
    try:
        return json.loads(Path(manifest_path(store.root)).read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None


@contextmanager
def _undone_if_stopped(store: Store):
    """If the block stops before its run is committed (a full disk, Ctrl-C, SIGTERM, a failed step),
    remove what it staged (on a full disk, the space back) and put back any table it moved. What
    cannot be done here (on a read-only disk) the next run does first, and readers never see it
    meanwhile (fleet_goodput/store/delta_store.py). The caller holds the lock."""
    try:
        yield
    except BaseException:
        if not is_remote(store.root):
            clear_staging(store.root)
            try:
                store.undo_killed_run()
            except (OSError, DeltaError):
                pass  # the original error says why
        raise


# A run whose input files change while it reads them computes again without them, this many times at most.
MAX_ATTEMPTS = 3
HOUR_US = 3_600_000_000
# A local run given no --chunk_hours (nor --as_of) over more new input than this computes in chunks of event
# time holding about this much each: a pipeline's memory grows with its events, about 0.35 GiB a million
# (19 MiB of the simulator's Avro) on top of 0.25 GiB, so a chunk of this much stays well under 1 GiB
# (docs/performance.md, "Scaling to 10M events").
CHUNK_INPUT_BYTES = 24 * 2**20


def _compute(plan: RunPlan, settings: Settings, run_settings: RunSettings, beam_args, as_of_us: int | None,
             chunk_hours: int | None, progress: Callable[[str], None]) -> list[str]:
    """Compute the run's new files into its staging: the folders staged, the last holding the state it ends in."""
    with run_scratch():  # Beam's temporary folders, removed by the next run if this one is killed
        return _compute_in(plan, settings, run_settings, beam_args, as_of_us, chunk_hours, progress)


def _compute_in(plan: RunPlan, settings: Settings, run_settings: RunSettings, beam_args, as_of_us: int | None,
                chunk_hours: int | None, progress: Callable[[str], None]) -> list[str]:
    new = f"{len(plan.files):,} new file(s), {_size(f.size for f in plan.files)}"
    if chunk_hours:
        progress(f"Computing {new} in chunks of {chunk_hours} h of event time, one pipeline each")
        return _run_in_chunks(plan, settings, run_settings, beam_args, chunk_hours * HOUR_US, progress)
    if as_of_us is None and is_local(beam_args) and sum(f.size for f in plan.files) > CHUNK_INPUT_BYTES:
        progress(f"Computing {new} in chunks of event time of at most about {_size([CHUNK_INPUT_BYTES])} of input "
                 "each, one pipeline each, so that memory follows a chunk (--chunk_hours sets their length)")
        return _run_in_chunks(plan, settings, run_settings, beam_args, None, progress)
    progress(f"Decoding and computing {new} in one Beam pipeline")
    computing = time.monotonic()
    with heartbeat(progress, "decoding and computing"):
        goodput.run(plan.files_by_stream, list(plan.state_files), staging_folder(plan), settings,
                    run_settings, plan.continuation, as_of_us, beam_args)
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


def staging_folder(plan: RunPlan) -> str:
    return f"{plan.output_dir}/{STAGING}/{plan.token}"


def _run_in_chunks(plan: RunPlan, settings: Settings, run_settings: RunSettings, beam_args,
                   chunk_us: int | None, progress: Callable[[str], None]) -> list[str]:
    """Run the pipeline once per chunk of event time, one after the other: each computes only its
    chunk's events, continuing the state the one before staged, so memory follows one chunk. Each
    new file is decoded once, before the chunks, into its share of each (transforms/slices.py), so
    a chunk reads its own events only. Chunks cut by event time give the figures of one pass (the
    runs of a store are split-invariant, tests/runs/test_split_invariance.py). Returns every staged
    folder, in order. Without `chunk_us`, chunks of whole hours that hold about `CHUNK_INPUT_BYTES`
    of the input each (`chunk_length`)."""
    started = time.monotonic()
    clock_files = [f for f in plan.files if f.stream == CLOCK_STREAM]
    clocks = [_clock_of(f.path, settings) for f in clock_files]
    new = latest_times(*(times for times, _ in clocks))
    kept = latest_times(plan.continuation.latest_times, new)
    chunk_us = chunk_us or chunk_length(sum(f.size for f in plan.files), new)
    hours = set().union(*(hours for _, hours in clocks))
    chunks = event_time_chunks(new, kept, chunk_us, {window_start(hour, chunk_us) for hour in hours})
    read = f"Read the scheduler's clock from {len(clock_files):,} file(s) in {time.monotonic() - started:.1f} s"
    slices = f"{staging_folder(plan)}/slices"
    if len(chunks) > 1:
        started = time.monotonic()
        with heartbeat(progress, "decoding the new files into the chunks"):
            goodput.slice_files([(f.stream, f.path, f.size) for f in plan.files], settings,
                                [chunk for _, chunk in chunks], slices, beam_args)
        read += (f", chunks of {describe_span(chunk_us)}, and decoded the {len(plan.files):,} new file(s) once "
                 f"into them in {time.monotonic() - started:.1f} s")
    progress(f"{read}: {len(chunks)} chunk(s) of event time")
    # Where the fleet's history starts is the whole input's, not the first chunk's (fleet_goodput/core/asof.py).
    continuation = dataclasses.replace(plan.continuation, history_start_us=history_start(kept))
    state_files, staged = list(plan.state_files), []
    for number, (begins_us, chunk) in enumerate(chunks):
        started, folder = time.monotonic(), f"{staging_folder(plan)}/chunk-{number:04d}"
        sliced = _slices_of(slices, number) if len(chunks) > 1 else None  # one chunk reads the files themselves
        with heartbeat(progress, f"computing chunk {number + 1}"):
            goodput.run(plan.files_by_stream, state_files, folder, settings, run_settings, continuation,
                        beam_args=beam_args, during=chunk, slices=sliced)
        if sliced:
            FileSystems.delete([f"{chunk_folder(slices, number)}/"])  # read: its disk space back now
        begins = format_time_us(begins_us) if begins_us is not None else "no scheduler event"
        progress(f"  chunk {number + 1}/{len(chunks)} ({begins}): {time.monotonic() - started:.1f} s")
        tally = goodput.read_tally(folder)
        if tally.as_of_us is not None:
            continuation = continuation.after(tally.as_of_us, run_settings.allowed_lateness_s * 1_000_000,
                                              tally.latest_times)
        state_files = [path for path, _, _ in _matched(f"{literal_pattern(folder)}/state_keys/*.parquet")]
        staged.append(folder)
    return staged


def _scheduler_headers(files):
    """(path, header metadata) of each readable scheduler file among `files`: the statements a source makes
    with its telemetry. An unreadable header is skipped: the read step rejects the file with the reason."""
    for item in files:
        if item.stream != CLOCK_STREAM:
            continue
        try:
            with open_input(item.path) as handle:
                meta = observed.header_meta(handle)
        except Exception:  # noqa: BLE001 - fastavro raises many kinds on a header that is no header
            continue
        yield item.path, meta


def _stated_by(files) -> dict[str, tuple[int, int]]:
    """What the scheduler files among `files` state they observed, together."""
    stated = []
    for _, meta in _scheduler_headers(files):
        try:
            stated.append(observed.statement_in(meta) or {})
        except observed.BadStatement:
            continue  # the read step rejects the file's events with the reason
    return observed.union(*stated)


def _quotas_stated_by(files) -> tuple[list[dict], list[str]]:
    """The queue quota levels the scheduler files among `files` state (fleet_goodput/telemetry/queue_quotas.py),
    and, for each file whose statement is malformed, the file and why (its events are read all the same)."""
    levels, refused = [], []
    for path, meta in _scheduler_headers(files):
        try:
            levels += queue_quotas.levels_in(meta)
        except queue_quotas.BadQuotas as exc:
            refused.append(f"{path}: {exc}")
    return levels, refused


def _slices_of(folder: str, chunk: int) -> list[str]:
    """The slices written for chunk number `chunk`, in the order of the groups of files they came from."""
    return sorted(path for path, _, _ in _matched(f"{literal_pattern(chunk_folder(folder, chunk))}/*.marshal"))


def _clock_of(path: str, settings: Settings) -> tuple[list[tuple[int, str]], set[int]]:
    """A scheduler file's latest and earliest (time, key) (fleet_goodput/core/asof.py), and the hours its
    events fall in (a chunk of whole hours begins where one of them does); none if it is gone."""
    try:
        decoded = decode_input_file(CLOCK_STREAM, path, settings.accelerators, open_file=open_input)
    except FileNotFoundError:
        return [], set()  # gone since it was listed: the run computes again without it (run_batch)
    return decoded.latest_times, {window_start(event[0], HOUR_US) for batch in decoded.batches.values()
                                  for event in batch}


def chunk_length(input_bytes: int, new: list[tuple[int, str]]) -> int:
    """The chunk of event time that holds about `CHUNK_INPUT_BYTES` of the input at most, if its
    `input_bytes` spread evenly over the time the new scheduler events span (their earliest and
    latest, `new`): whole days, or hours that divide a day (so that chunks start at midnight UTC)."""
    times = [time_us for time_us, _ in event_times(new)]
    span_hours = max((max(times) - min(times)) / HOUR_US, 1) if times else 1
    hours = CHUNK_INPUT_BYTES * span_hours / max(input_bytes, 1)
    if hours >= 24:
        return int(hours // 24) * 24 * HOUR_US
    return max(divisor for divisor in (1, 2, 3, 4, 6, 8, 12) if divisor <= max(hours, 1)) * HOUR_US


def event_time_chunks(new: list[tuple[int, str]], kept: list[tuple[int, str]], chunk_us: int,
                      occupied: set[int] = frozenset()) -> list[tuple[int | None, TimeSlice]]:
    """The chunks a backfill computes, with the time each begins at (None: no scheduler event to say).

    UTC-aligned chunks of `chunk_us` (24 h chunks start at midnight) that hold
    new scheduler events: those `occupied` begins at, and those of the times
    `new`, leaving out a clock reset into the past that the times the store
    keeps, `kept`, show. A chunk runs up to the next one, over any stretch
    without scheduler events (cost follows events, not empty time). The first
    chunk also holds every earlier event, and the last every later one (runtime
    events before a job's SUBMIT, a clock ahead), so that no event falls outside.
    """
    start = history_start(kept)
    times = [time_us for time_us, _ in event_times(new) if start is None or time_us >= start]
    if not times:
        return [(None, TimeSlice())]
    first = window_start(min(times), chunk_us)
    begins = sorted({window_start(time_us, chunk_us) for time_us in times}
                    | {begin for begin in occupied if begin >= first})
    bounds = [None, *begins[1:], None]
    return [(begin, TimeSlice(since, until, first=number == 0))
            for number, (begin, since, until) in enumerate(zip(begins, bounds, bounds[1:]))]


def _check_continuation(previous: RunRecord | None, as_of_us: int | None, output_dir: str) -> None:
    if previous is None:
        return
    if previous.state_format > STATE_FORMAT:
        raise StoreError(f"{output_dir} was written by a newer fleet-goodput (state format {previous.state_format}, "
                         f"this one reads {STATE_FORMAT}): upgrade fleet-goodput to continue it")
    if previous.state_format < STATE_FORMAT:
        raise StoreError(
            f"{output_dir} keeps the state of its running jobs in format {previous.state_format}, written by an older "
            f"fleet-goodput; this one keeps format {STATE_FORMAT} (it counts disruptions and preserved steps "
            "differently) and cannot continue it. Its tables still read (`mpg sql`, `mpg report`). To continue with "
            "this version, start the output afresh over every input (copy the folder first to keep the old figures): "
            f"mpg run --replace --input DIR --output {shlex.quote(output_dir)}")
    if as_of_us is not None and previous.as_of_us is not None and as_of_us < previous.as_of_us:
        newest_us = newest_known(tuple(map(tuple, previous.manifest.get("latest_times") or ())))
        newest = f"; the newest scheduler event is {format_time_us(newest_us)}" if newest_us is not None else ""
        lateness = previous.manifest.get("allowed_lateness_s")
        allowed = f", the allowed lateness {describe_span(lateness * 1_000_000)}" if lateness is not None else ""
        raise StoreError(f"--as_of {format_time_us(as_of_us)} is earlier than run {previous.run_id}'s as-of "
                         f"{format_time_us(previous.as_of_us)}{newest}{allowed}: a run continues from where the last "
                         "one ended (read an earlier run with `mpg sql --run ID`, undo the runs after it with "
                         "`mpg rollback --to ID`, or start afresh with --replace)")


def commit_run(plan: RunPlan, settings: Settings, run_settings: RunSettings, mode: str,
               staged_folders: list[str] | None = None, maintain: bool = True) -> RunRecord:
    """Commit what the run staged as one run: tables, state, applied files, then its `runs` row,
    and maintain the store (Store.maintain) unless `maintain` is False (a stream does it less often).

    Runs where the pipeline finished: in `mpg run`, and as the last step of a
    Flex Template job. The last staged folder (a backfill's last chunk's)
    holds the state the run ends in and what still waits. Raises
    `ReconciliationError` (committing nothing) when the counts do not add up.
    """
    store = plan.store
    transaction = Transaction(store, plan.previous, plan.token)
    folders = staged_folders or [staging_folder(plan)]
    final = folders[-1:]
    staged = [goodput.read_tally(folder) for folder in folders]
    previous = plan.previous
    as_of_us, latest = staged[-1].as_of_us, staged[-1].latest_times
    run_id = previous.run_id + 1 if previous else 1
    lateness_us = run_settings.allowed_lateness_s * 1_000_000
    reached = plan.continuation if as_of_us is None else plan.continuation.after(as_of_us, lateness_us, latest)
    frontier_us, version_us = (None, None) if as_of_us is None else (reached.frontier_us, reached.version_us)
    quotas, refused = _quotas_stated_by(plan.files)
    manifest = build_manifest(
        run_id=run_id, input_dir=plan.input_dir, as_of_us=as_of_us, window_s=settings.window_s,
        previous=previous.manifest if previous else None,
        counts=add_counts(*(part.counts for part in staged)), pending=staged[-1].pending,
        extra={"mode": mode, "version_us": version_us, "frontier_us": frontier_us, "latest_times": latest,
               "clock": clock_account([tuple(item) for item in latest or ()]),
               "allowed_lateness_s": run_settings.allowed_lateness_s, "files_applied": len(plan.files),
               "files_skipped": len(plan.skipped), "output": plan.output_dir,
               "queue_quota": {"levels": len(quotas), "refused": refused}})
    if not manifest["reconciles"]:
        raise ReconciliationError(_reconciliation_message(manifest) + "; the run was not committed")
    transaction.check_unchanged()  # before writing anything, where another run's commit is seen
    try:
        _commit_tables(transaction, run_id, plan, settings, run_settings, folders, final, quotas)
    except CommitFailedError:  # delta-rs found another run's commit in the way
        raise transaction.lost_race() from None
    record = RunRecord(run_id=run_id, committed_at_us=time.time_ns() // 1000, mode=mode, input=str(plan.input_dir),
                       as_of_us=as_of_us, frontier_us=frontier_us, files_applied=len(plan.files),
                       files_skipped=len(plan.skipped), state_format=STATE_FORMAT, versions=dict(transaction.versions),
                       manifest=manifest)
    transaction.commit(record)
    transaction.discard()
    if maintain:
        store.maintain(run_settings.retention_hours)
    return record


def _commit_tables(transaction: Transaction, run_id: int, plan: RunPlan, settings: Settings,
                   run_settings: RunSettings, folders: list[str], final: list[str], quotas: list[dict]) -> None:
    """Commit the run's settings, tables, state and applied files, table by table (not yet visible)."""
    commit_settings(transaction, run_id, settings, run_settings)
    for name, table in TABLES.items():
        if name in STATED:  # the queue quota levels the new files state
            rows = QUEUE_QUOTA.to_arrow(quotas)
            rows = rows.append_column("date", pa.array([utc_day(q["start_us"]) for q in quotas], pa.string()))
            transaction.write(name, rows, delta_schema(table), partition_by=["date"])
        elif name in REPLACED_EACH_RUN:
            transaction.write_staged(name, delta_schema(table), partition_by=["date"], mode="overwrite", folders=final)
        elif table.key:  # one row per key: the latest figures (fleet_goodput/store/keyed_tables.py)
            transaction.write_keyed(table, folders)
        else:  # each event once: what a run rejects or finds late is new
            transaction.write_staged(name, delta_schema(table), partition_by=["date"], folders=folders)
    transaction.write_staged("state_keys", STATE_KEYS_SCHEMA, mode="overwrite", folders=final)
    transaction.write("state_files", pa.Table.from_pylist(
        [{"sha256": f.sha256, "path": f.path, "stream": f.stream, "size": f.size, "run_id": run_id,
          "modified_us": f.modified_us} for f in plan.files], schema=STATE_FILES_SCHEMA), STATE_FILES_SCHEMA)
    transaction.compact()


def _reconciliation_message(manifest: dict) -> str:
    broken = [f"{name}: read {c['read']} != accepted {c['accepted']} + duplicate {c['duplicate']} "
              f"+ rejected {c['rejected']} + late {c['late']} + waiting {c['waiting']}"
              for name, c in manifest["streams"].items() if not c["reconciles"]]
    return f"counts do not reconcile ({'; '.join(broken)})"


def is_dry_run(beam_args: list[str]) -> bool:
    # Beam itself tests the flag's raw value for truth, so any value asks for a dry run.
    return bool(PipelineOptions(beam_args).view_as(TestOptions).dry_run)


def is_local(beam_args: list[str] | None) -> bool:
    """Whether the run computes in this machine's processes: no --runner, or one of Beam's local runners."""
    runner = PipelineOptions(beam_args or []).view_as(StandardOptions).runner or goodput.DEFAULT_RUNNER
    return runner.lower().removesuffix("runner") in ("fnapi", "direct", "bundlebaseddirect", "switchingdirect")


def beam_args_for(config: str | SettingsFile | None, flags: list[str], workers: int | None,
                  where: str = "") -> tuple[str, ...]:
    """Beam's pipeline options for a batch run: the `beam:` section of `config` (a settings file's path, or
    the file read already), then `flags`, each checked to be Beam's (`where` says where `flags` came
    from), then what `--workers` is short for."""
    checked = beam_flags_for("run", config, flags, where)
    return (*checked, *worker_flags(workers, checked))


def worker_flags(workers: int | None, beam_args: list[str] | None) -> list[str]:
    """Beam's own flags for `--workers N`: its local runner computes the run's one pipeline in N
    processes. Another runner spreads the work itself (Dataflow: --max_num_workers)."""
    if workers is None:
        return []
    if workers < 1:
        raise ValueError(f"--workers must be at least 1 (got {workers})")
    if not is_local(beam_args):
        raise ValueError("--workers sets how many processes Beam's local runner computes in; another runner "
                         "spreads the work itself (on Dataflow, set --max_num_workers)")
    return [] if workers == 1 else [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]


def translate_batch(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
                    beam_args: list[str] | None = None):
    """Build the batch pipeline and let DataflowRunner translate it with --dry_run.

    Nothing is read, written or submitted; returns the runner's job, whose
    `options` are the effective pipeline options and whose `proto_pipeline`
    is the graph Dataflow would run. (A real launch lists the input's new
    files and the saved state first; here each stream's file pattern stands in.)
    """
    options = PipelineOptions(beam_args or [])
    runner = (options.view_as(StandardOptions).runner or "").lower().removesuffix("runner")
    if not runner.endswith("dataflow") or not is_dry_run(beam_args or []):
        raise ValueError("--dry_run needs --runner=DataflowRunner: other runners ignore it and run the job")
    p = beam.Pipeline(options=options)
    files = {stream: [f"{input_dir.rstrip('/')}/{stream}/*.avro"] for stream in schemas.STREAMS}
    state = [f"{output_dir.rstrip('/')}/state/keys/*.parquet"]
    goodput.build_batch(p, files, state, f"{output_dir.rstrip('/')}/_staging/dry-run", settings, RunSettings(),
                        Continuation(), as_of_us)
    return p.run().job
