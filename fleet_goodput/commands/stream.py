"""`mpg stream`: the goodput pipeline on telemetry that keeps arriving."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from fleet_goodput import exits, faults
from fleet_goodput.commands.run import BeamHelp, dry_run, refused, say_headline, summary
from fleet_goodput.console import VERBOSITY_HELP, progress, say
from fleet_goodput.core.options import BEAM_HELP, OptionsError, add_options

DESCRIPTION = """\
Run the goodput pipeline on a stream: locally, a folder that keeps receiving
Avro files (INPUT/<stream>/*.avro); on Dataflow, Pub/Sub subscriptions selected
by the `runs:` section of --config.

Locally, each batch of new files is applied as one run committed to the
output store, exactly as `mpg run` continues an output: results are per
event-time window, with in-flight step time as `pending`, and a window gets a
new version whenever new events, late events (within --allowed_lateness_s) or
later resolutions (a checkpoint: pending → productive; a disruption: → lost)
change it. The tables hold the latest version; `mpg sql` reads the latest
committed run while the stream goes on. Events later than the allowed
lateness go to the `late` table and are counted in the manifest.

Locally, OUTPUT keeps the settings its figures were computed with, as for
`mpg run`: a stream continuing it uses them, and one whose --config or
--allowed_lateness_s would change the stored figures is refused. Each run
takes them as it starts, so settings another run stores meanwhile (an
accelerator a daily run adds to the catalogue) are followed.

It stops on Ctrl-C / SIGTERM, once the run in progress has committed (the
same signal again stops it at once, committing nothing), or after
--stop_after_idle_s seconds without a new file. Killed any other way (even SIGKILL), it loses nothing committed: start
it again on the same folders and it resumes from its last run, ending equal to
`mpg run` over the same files.
"""

EPILOG = (
    """\
examples:
  mpg stream --input live/ --output live-out/ --stop_after_idle_s 60
  mpg replay --from fleet/ --to live/ --speed 600      (in another terminal)

"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe(
        failed="the counts did not reconcile (that run was not committed), or no telemetry arrived",
        busy="--replace while another run holds the output (otherwise the stream waits for it)",
        damaged=exits.DAMAGED_MEANING,
    )
)


STOPPING = (
    b"mpg stream: stopping once the run in progress has committed (the same signal again stops at once, "
    b"committing nothing and losing nothing)\n"
)


def _stop_after_the_run(stop: threading.Event) -> None:
    """The first Ctrl-C or SIGTERM lets the run in progress commit, then stops the stream (exit 0): systemd's
    stop timeout, 90 s by default, leaves a run time to finish. A second one stops at once, as `mpg run` stops
    (130 or 143), with nothing committed and nothing lost."""

    def handle(signum, frame):
        if stop.is_set():
            faults.raise_stop(KeyboardInterrupt() if signum == signal.SIGINT else faults.Terminated())
        stop.set()
        os.write(sys.stderr.fileno(), STOPPING)  # not print: the signal may land inside a print

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "stream",
        help="run the pipeline on a growing folder (or Pub/Sub) with event-time updates",
        description=DESCRIPTION,
        epilog=EPILOG + "\n" + BEAM_HELP.format(command="stream"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_options(parser, "stream")
    parser.add_argument("--help_beam", action=BeamHelp)
    parser.set_defaults(func=main, accepts_beam_args=True)


def _progress(committed: list[int]):
    """Tell each committed run, and keep its id in `committed`."""

    def committed_run(state, outcome) -> None:
        manifest = outcome.manifest
        committed.append(manifest["run_id"])
        progress(
            f"run {manifest['run_id']}: {manifest['files_applied']} new file(s) in {outcome.seconds:.1f} s "
            f"({state.last_cpu_s:.2f} CPU s); as-of {manifest['as_of']}"
        )

    return committed_run


def _busy_notice(poll_s: float):
    """Say that the output is held and the stream waits for it: at once, then every ten minutes
    (the stream tries at every poll)."""
    said = {"at": None}

    def notice(reason: str) -> None:
        now = time.monotonic()
        if said["at"] is None or now - said["at"] > 10 * 60:
            progress(f"{reason}: the stream waits, and tries again every {poll_s:g} s with the files not yet applied")
            said["at"] = now

    return notice


def main(args: argparse.Namespace) -> int:
    from fleet_goodput import schemas
    from fleet_goodput.core.config import ConfigError, SettingsFile, load_settings
    from fleet_goodput.core.run_settings import load_run_settings
    from fleet_goodput.pipelines.options import beam_flags_for
    from fleet_goodput.runs.beam_flags import is_dry_run
    from fleet_goodput.runs.commit import ReconciliationError
    from fleet_goodput.runs.stream_run import run_stream, translate_stream
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.errors import StoreError
    from fleet_goodput.store.stored_settings import settings_for_output
    from fleet_goodput.telemetry.avro_io import telemetry_files

    try:
        config = None if args.config is None else SettingsFile.read(args.config)  # read once, for all below
        flags = beam_flags_for("stream", config, args.beam_args)
        settings = load_settings(config)
        run_settings = load_run_settings(config, allowed_lateness_s=args.allowed_lateness_s)
        if run_settings.source == "directory":  # the runs commit to the store: its settings
            store = Store(args.output)  # the stream's one: every run's too
            chosen = settings_for_output(
                store, config, replace=args.replace, allowed_lateness_s=args.allowed_lateness_s
            )
            settings, run_settings = chosen.settings, chosen.run_settings
            if chosen.note:
                print(f"mpg stream: note: {chosen.note}", file=sys.stderr)
    except OptionsError as exc:
        print(f"mpg stream: error: {exc}", file=sys.stderr)
        return exits.USAGE
    except (ConfigError, StoreError, ValueError) as exc:
        return refused("stream", exc)
    if run_settings.source == "pubsub":
        if not is_dry_run(flags):
            print(
                "mpg stream: a Pub/Sub source runs on Dataflow: submit it with the Flex Template (docs/dataflow.md), "
                "or check it here with --dry_run=True",
                file=sys.stderr,
            )
            return exits.USAGE
        return dry_run(flags, None, args.output, lambda: translate_stream(args.output, settings, run_settings, flags))
    for stream in schemas.STREAMS:
        Path(args.input, stream).mkdir(parents=True, exist_ok=True)
    waiting = len(telemetry_files(args.input))
    if waiting:
        progress(f"{waiting} files already in {args.input}; those no earlier run applied are read first.")
    stop = threading.Event()
    _stop_after_the_run(stop)
    idle_s = args.stop_after_idle_s
    idle = f"; stops after {idle_s:g} s without new files" if idle_s else "; Ctrl-C stops"
    progress(
        f"Watching {args.input} (window {settings.window_s} s, allowed lateness "
        f"{run_settings.allowed_lateness_s} s{idle}) ..."
    )
    committed: list[int] = []
    try:
        outcome = run_stream(
            args.input,
            store,
            config,
            allowed_lateness_s=args.allowed_lateness_s,
            stop_after_idle_s=idle_s,
            beam_args=flags,
            replace=args.replace,
            progress=_progress(committed),
            stop=stop,
            on_busy=_busy_notice(run_settings.poll_s),
        )
    except (StoreError, ConfigError) as exc:
        return refused("stream", exc)
    except ReconciliationError as exc:
        print(f"mpg stream: FAILED: {exc}", file=sys.stderr)
        return exits.FAILED
    if outcome.run is None:
        print(f"mpg stream: no telemetry arrived in {args.input}; nothing was computed", file=sys.stderr)
        return exits.FAILED
    latest = outcome.manifest
    if not committed:
        print(f"Nothing new in {args.input}: run {latest['run_id']} stays the latest.")
        return exits.OK
    runs = f"run {committed[0]}" if len(committed) == 1 else f"runs {committed[0]} .. {committed[-1]}"
    print(f"Stream stopped: committed {runs} to {args.output}; as of {latest['as_of']}")
    say(summary(outcome))
    say_headline(args.output, committed[0])
    return exits.OK
