"""`mpg stream` on a local folder: one committed run per batch of new files.

Each time files land in the watched folder, the new ones are applied as a run
that continues the output store (fleet_goodput/runs/batch.py): the store saves
every open job's state with each run, so a stream that is killed (even with
SIGKILL) and started again on the same folders resumes from its last commit
and ends equal to `mpg run` over the same files. Results are per event-time
window as in any run: in-flight step time is `pending` until a checkpoint or
a disruption resolves it, and changed windows get new versions; events behind
the allowed lateness go to `late`. Every run's as-of time is how far the
scheduler's clock has reached (fleet_goodput/core/asof.py), as in a batch run.

A stream commits a run per poll, so it maintains the store (maintenance.maintain:
the vacuum, the Delta logs' checkpoints and clean-up) at most once every
MAINTAIN_EVERY_S rather than after every commit as other runs do, and once
more when it stops: meanwhile the store keeps a few more files and log
entries, and the runs of the last minute beyond the retention stay readable
a little longer; nothing the retention keeps is removed. A stream killed
before that leaves the maintenance to the output's next commit.

The stream shares its output with other runs, such as a daily `mpg run` from
cron: when one holds the output, the stream waits (telling `on_busy`) and
tries again at its next poll, with the files it has not applied yet; it never
stops for it. Each of its runs chooses its settings under the lock from the
run it continues, as `mpg run` does, so what another run stored meanwhile is
followed. One `Store` serves the whole stream.

On Dataflow the stream is the Beam streaming pipeline on Pub/Sub
(pipelines/streaming.py), whose state the runner keeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from fleet_goodput.core.config import Settings, SettingsFile, load_settings
from fleet_goodput.core.options import RunOptions
from fleet_goodput.core.run_settings import RunSettings, load_run_settings
from fleet_goodput.pipelines import streaming
from fleet_goodput.runs.batch import BatchOutcome, run
from fleet_goodput.runs.beam_flags import is_dry_run
from fleet_goodput.store import maintenance
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreBusy
from fleet_goodput.store.views import build_database
from fleet_goodput.telemetry.avro_io import telemetry_files


# A stream maintains its store at most this often: its runs come every few seconds, and a store keeps
# quick to open and commit to, and keeps its retention, with a minute's more runs between maintenances.
MAINTAIN_EVERY_S = 60.0


@dataclass
class StreamProgress:
    runs: int = 0
    files: int = 0
    last: BatchOutcome | None = None
    last_cpu_s: float = 0.0  # the CPU seconds of the last run, this process's (its pipeline runs in it)


def _listing(root: Path) -> tuple:
    """What the folder holds now; a change means files landed."""
    statuses = ((path, path.stat()) for path in telemetry_files(root))  # one stat a file: the folder only grows
    return tuple((str(path), status.st_size, status.st_mtime_ns) for path, status in statuses)


def run_stream(
    input_dir: str,
    output: str | Store,
    config: SettingsFile | None = None,
    *,
    allowed_lateness_s: int | None = None,
    stop_after_idle_s: float | None = None,
    beam_args: list[str] | None = None,
    replace: bool = False,
    progress=None,
    stop: threading.Event | None = None,
    on_busy: Callable[[str], None] | None = None,
) -> BatchOutcome:
    """Watch `input_dir` until `stop` is set or nothing new arrived for `stop_after_idle_s`;
    returns the last run's outcome (the output's latest run if nothing new came). While another
    run holds the output, `on_busy` is told why at each poll, and new files wait.

    Each run computes with the settings the store keeps, chosen under the output's lock from the
    run it continues, with those `config` names and `allowed_lateness_s` replacing them, as `mpg run
    --config` does: a daily run that adds an accelerator to the store's catalogue meanwhile is
    followed, not refused. `config`'s `runs:` section also sets how often the folder is listed
    and the store's retention. One `Store` (`output`, or opened here) serves every run."""
    stop = stop or threading.Event()
    store = Store.of(output)
    watching = load_run_settings(config, allowed_lateness_s=allowed_lateness_s)
    options = RunOptions(input_dir, store.root, config=config, beam_args=tuple(beam_args or ()))
    root = Path(input_dir)
    if replace:
        with store.lock():
            store.replace()
    state = StreamProgress()
    seen, last_new = None, time.monotonic()
    maintained, unmaintained = time.monotonic(), False  # the output's last commit, another run's, maintained it
    while True:
        listing = _listing(root)
        if listing != seen and listing:
            cpu_s = time.process_time()
            due = time.monotonic() - maintained >= MAINTAIN_EVERY_S
            try:
                outcome = run(
                    options,
                    store=store,
                    allowed_lateness_s=allowed_lateness_s,
                    mode="stream",
                    build_views=False,
                    maintain=due,
                )
            except StoreBusy as exc:
                if on_busy:
                    on_busy(str(exc))
                last_new = time.monotonic()  # files are waiting: the stream is not idle
                stop.wait(watching.poll_s)
                continue  # the listing is not marked seen: the next poll tries again
            seen = listing
            last_new = time.monotonic()  # idle time counts from when the stream caught up
            if outcome.committed:
                if due:
                    maintained, unmaintained = time.monotonic(), False
                else:
                    unmaintained = True
                state.runs += 1
                state.files += outcome.manifest.get("files_applied", 0)
                state.last, state.last_cpu_s = outcome, time.process_time() - cpu_s
                if progress:
                    progress(state, outcome)
            if not stop.is_set():
                continue  # look again at once: files may have landed during the run
        if stop.is_set() or (stop_after_idle_s is not None and time.monotonic() - last_new >= stop_after_idle_s):
            break
        stop.wait(watching.poll_s)
    if unmaintained:
        _maintain(store, watching)
    latest = store.latest()
    if latest is None:
        return BatchOutcome(manifest={}, database=None, seconds=0.0, run=None, committed=False)
    database = build_database(store, load_settings(config))  # the views use the settings the store keeps
    seconds = state.last.seconds if state.last else 0.0
    return BatchOutcome(
        manifest=latest.manifest, database=database, seconds=seconds, run=latest, committed=state.runs > 0, store=store
    )


def _maintain(store: Store, run_settings: RunSettings) -> None:
    """Maintain the store after the stream's last runs, unless another run holds it: that one
    maintains it after its own commit."""
    try:
        with store.lock():
            maintenance.maintain(store, run_settings.retention_hours)
    except StoreBusy:
        pass


def translate_stream(output_dir: str, settings: Settings, run_settings: RunSettings, beam_args: list[str]):
    """Build the Pub/Sub streaming pipeline and let DataflowRunner translate it
    with --dry_run: nothing is read, written or submitted. Returns the job."""
    if run_settings.source != "pubsub" or not is_dry_run(beam_args):
        raise ValueError("a Dataflow dry run of the stream needs runs.source: pubsub and --dry_run=True")
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=options)
    decoded = streaming.read_pubsub_sources(p, settings, run_settings)
    streaming.commit_streaming_outputs(
        streaming.build_streaming(decoded, settings, run_settings),
        output_dir,
        settings,
        run_settings,
        source=", ".join(run_settings.subscriptions.values()),
    )
    return p.run().job
