"""`mpg run`: the batch pipeline over a folder of Avro telemetry."""

from __future__ import annotations

import argparse
import shlex
import sys

from fleet_goodput import console, exits
from fleet_goodput.console import VERBOSITY_HELP, progress, say
from fleet_goodput.core.options import BEAM_HELP, OptionsError, RunOptions, add_options, launch_problems
from fleet_goodput.quoting import sql_string

DESCRIPTION = """\
Compute ML Productivity Goodput from Avro telemetry with Apache Beam.

Reads INPUT/scheduler/*.avro, INPUT/runtime/*.avro and INPUT/profiler/*.avro
(schemas in schemas/) and commits one run to the output store: Delta Lake
tables under OUTPUT/tables/, the state of every job still running, the run's
manifest (also copied to OUTPUT/manifest.json), and the DuckDB views in
OUTPUT/goodput.duckdb (query them with `mpg sql`; list runs with `mpg runs`).

An OUTPUT that holds earlier runs is continued: only input files whose
content no earlier run applied are read, running jobs carry on from their
saved state, and the rows that new events change are replaced (a table
holds one row per key; earlier figures stay in its Delta versions). Events
before the last run's as-of time minus the allowed lateness go to the `late`
table. --replace starts OUTPUT afresh; `mpg rollback --to RUN` undoes the runs
after RUN instead. A run that fails or is killed leaves the previous run as it was.
An --as_of more than the allowed lateness past the newest scheduler event, a
likely typo, is refused with those figures unless --confirm_as_of is given; one
before the last run's as-of is refused. By default the as-of time is how far
the sources state they observed each cluster (the earliest cluster's end;
docs/metric.md, "Time and the as-of time"); new files that state a cluster
observed only from more than 7 days after the store's observation of it ended
(a wrong folder) are refused before anything is computed, unless --confirm_as_of. OUTPUT must be new, empty, or an output of
fleet-goodput (it holds a .fleet-goodput-store file): a run, and --replace,
refuse a folder that holds anything else. A damaged output is refused with
what is damaged (exit 3; `mpg check` repairs what it can).

OUTPUT keeps the settings its figures were computed with (window_s, allowed
lateness, size classes, accelerator catalogue), stored by its first run: a
later run uses them, and --config changes only what it names. A run whose
settings would change the stored figures is refused, naming each difference;
adding an accelerator to the catalogue is allowed.

Every event ends up accepted, dropped as a duplicate event_id, late, or in the
`rejected` table with its reason; a run whose counts do not add up is not
committed.
Beam pipeline options (e.g. --runner=DataflowRunner --project=…) come after
those of the config's `beam:` section, so they override them; locally the
in-process FnApiRunner is used. --runner dask computes the run on a
dask.distributed cluster, whose scheduler --dask_client_address names (without
it, a cluster of local processes); this machine and the cluster's need the
`dask` extra (docs/scale.md). A job submitted to Dataflow prints its id and
console URL. With --dry_run=True and DataflowRunner the job is only translated
and checked: its options and steps are printed, with what a real launch would
lack. An output on gs:// gets tables/ and manifest.json but no DuckDB file.
"""

EPILOG = (
    """\
examples:
  mpg run --input fleet/ --output out/
  mpg run --input fleet/ --output out/ --as_of 2026-01-01T12:00:00Z
  mpg run --input fleet/ --output out/ --as_of 2026-01-03T00:00:00Z --confirm_as_of   # the fleet fell silent
  mpg run --input fleet/ --output out/ --runner dask --dask_client_address tcp://scheduler:8786
  mpg run --input gs://bucket/fleet --output gs://bucket/out --config configs/dataflow.yaml
  mpg run --input gs://bucket/fleet --output gs://bucket/out --config configs/dataflow.yaml \\
      --project=my-project --temp_location=gs://bucket/tmp --dry_run=True

The headline printed at the end covers the whole store (its days and as-of
time), then the days this run changed, each on its own line.

"""
    + VERBOSITY_HELP
    + "\n\n"
    + exits.describe(
        failed="the counts did not reconcile, or no event of the run was accepted (nothing committed)",
        busy="another run or stream holds the output",
        damaged=exits.DAMAGED_MEANING,
    )
)


class BeamHelp(argparse.Action):
    """--help_beam: list Beam's pipeline options and exit, as --help does for the command's own."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="list Beam's pipeline options and exit"
        )

    def __call__(self, parser, namespace, values, option_string=None):
        from fleet_goodput.pipelines.options import OptionsError, help_parser, load_runner_options

        try:
            load_runner_options(["--runner=dask"])  # the Dask runner's options too, where dask is installed
        except OptionsError:
            pass
        help_parser().print_help()
        parser.exit()


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="compute goodput tables and views from Avro telemetry",
        description=DESCRIPTION,
        epilog=EPILOG + "\n" + BEAM_HELP.format(command="run"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add_options(parser, "run")
    parser.add_argument("--help_beam", action=BeamHelp)
    parser.set_defaults(func=main, accepts_beam_args=True)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.core.config import ConfigError, SettingsFile, load_settings
    from fleet_goodput.core.timeutil import format_time_us
    from fleet_goodput.runs.batch import run
    from fleet_goodput.runs.beam_flags import beam_args_for, is_dry_run, translate_batch
    from fleet_goodput.runs.commit import ReconciliationError
    from fleet_goodput.runs.inputs import InputError
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.errors import StoreError

    try:
        config = None if args.config is None else SettingsFile.read(args.config)  # read once, here
        options = RunOptions.of(args, beam_args_for(config, args.beam_args, args.workers), config)
        if is_dry_run(list(options.beam_args)):
            settings = load_settings(options.config)
            return dry_run(
                options.beam_args,
                options.input,
                options.output,
                lambda: translate_batch(
                    options.input, options.output, settings, options.given_as_of_us, list(options.beam_args)
                ),
            )
        store = Store(options.output)  # the run's one; an output path it cannot keep is refused here, first
        progress(f"Running the goodput pipeline on {options.input} into {options.output}")
        outcome = run(options, store=store, progress=progress)
    except OptionsError as exc:
        print(f"mpg run: error: {exc}", file=sys.stderr)
        return exits.USAGE
    except (ConfigError, InputError, StoreError, ValueError) as exc:
        return refused("run", exc)
    except ReconciliationError as exc:
        print(f"mpg run: FAILED: {exc}", file=sys.stderr)
        return exits.FAILED
    if outcome.note:
        print(f"mpg run: note: {outcome.note}", file=sys.stderr)
    if outcome.skipped:
        say(f"Skipped {len(outcome.skipped)} input file(s) an earlier run already applied (same content).")
        for path in outcome.skipped:
            console.detail(f"  skipped {path}")
    if outcome.deferred:
        print(
            f"mpg run: warning: {len(outcome.deferred)} input file(s) changed or vanished while the run read them "
            "(a producer still writing? write then rename); they were not applied, the as-of time waits for "
            "them, and the next run reads them:",
            file=sys.stderr,
        )
        for path in outcome.deferred:
            print(f"  {path}", file=sys.stderr)
    if not outcome.committed and outcome.deferred and outcome.run is None:
        print(f"Nothing committed: a first run waits until every file in {options.input} reads whole.")
        return exits.OK
    if not outcome.committed:
        latest = f"run {outcome.run.run_id} stays the latest" if outcome.run else "the output holds no run"
        print(f"Nothing new in {options.input}: {latest}.")
        return exits.OK
    print(result_line(outcome))
    say(summary(outcome))
    manifest = outcome.manifest
    console.detail(
        f"Event time: as of {manifest['as_of']}; results versioned {format_time_us(manifest.get('version_us'))}; "
        f"a later run's events at or before {format_time_us(manifest.get('frontier_us'))} go to `late` "
        f"(allowed lateness {manifest.get('allowed_lateness_s')} s)"
    )
    accepted = sum(counts["accepted"] for counts in outcome.manifest.get("this_run", {}).values())
    # A run that accepted nothing but moved the as-of time (a source stating that a quiet cluster was
    # observed further) adds figures all the same: the quiet time's capacity.
    if outcome.manifest.get("as_of_us") is None or (accepted == 0 and not _moved_as_of(outcome)):
        print(
            f"mpg run: no event of this run was accepted, so it adds no figure; see why with\n"
            f"  mpg sql --output {shlex.quote(options.output)} "
            '"select provisional, reason, sum(records) from rejected group by all"\n'
            f"(a provisional rejection waits for an event that lets it in, such as a SUBMIT not yet landed)",
            file=sys.stderr,
        )
        return exits.FAILED
    if outcome.database is None:
        output = options.output.rstrip("/")
        say(
            REMOTE_NOTE.format(
                tables=shlex.quote(f"{output}/tables"), job_window_table=sql_string(f"{output}/tables/job_window")
            )
        )
        return exits.OK
    say_headline(outcome.store, outcome.run.run_id)
    return exits.OK


def refuse_damaged_or_raise(command: str, output, error: BaseException) -> int:
    """For a command that met `error` reading a store: say the damage behind it and return exits.DAMAGED, or
    raise `error` again when it is not the store's (a bug, to be seen whole)."""
    from fleet_goodput.store.store_check import damage_behind

    damaged = damage_behind(output, None, error)
    if damaged is None:
        raise error
    print(f"mpg {command}: {damaged}", file=sys.stderr)
    return exits.DAMAGED


def refused(command: str, exc: Exception) -> int:
    """Say why `mpg COMMAND` could not go on, and the exit code that tells a scheduler what to do:
    retry a busy output, check a damaged one, fix the arguments otherwise."""
    from fleet_goodput.store.errors import StoreBusy, StoreDamaged

    print(f"mpg {command}: {exc}", file=sys.stderr)
    if isinstance(exc, StoreBusy):
        return exits.BUSY
    return exits.DAMAGED if isinstance(exc, StoreDamaged) else exits.USAGE


def say_headline(output, since_run: int) -> None:
    """The headline of the latest run of `output` (a folder, or the Store a run opened), with the runs
    from `since_run` as this run's part; not under -q."""
    if console.verbosity() == console.QUIET:
        return
    from fleet_goodput.report.headline import render
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.views import connect

    store = Store.of(output)
    with connect(store) as connection:
        say()
        say(render(connection, store.runs(from_run=since_run - 1), since_run))  # the runs it needs


def dry_run(flags, input_dir: str | None, output_dir: str | None, translate) -> int:
    """Warn about what a real launch with Beam's `flags` would lack, then translate the job (`translate()`)
    and describe it."""
    from apache_beam.options.pipeline_options import PipelineOptions

    missing, warnings = launch_problems(PipelineOptions(list(flags)).get_all_options(), input_dir, output_dir)
    for problem in missing + warnings:
        print(f"warning: {problem}", file=sys.stderr)
    if missing:
        print("Dry run: the job was not translated: Beam needs the options above.", file=sys.stderr)
        return exits.USAGE
    print(describe_job(translate()))
    return exits.OK


def result_line(outcome) -> str:
    """What a run committed, in one line: what `mpg run -q` prints."""
    manifest = outcome.manifest
    read = sum(counts["read"] for counts in manifest.get("this_run", {}).values())
    return (
        f"Committed run {manifest['run_id']} to {manifest['output']} in {outcome.seconds:.1f} s: "
        f"{manifest.get('files_applied', 0)} new file(s), {read:,} events read; as of {manifest['as_of']}"
    )


def summary(outcome) -> str:
    """What became of the events, stream by stream, over every run of the output."""
    manifest = outcome.manifest
    outcomes = ["read", "accepted", "duplicate", "rejected", "late", "waiting"]
    lines = [
        "Counts cover every run of the output:",
        f"  {'stream':<10}" + "".join(f" {name:>10}" for name in outcomes),
    ]
    for name, counts in manifest["streams"].items():
        lines.append(f"  {name:<10}" + "".join(f" {counts[outcome]:>10,}" for outcome in outcomes))
    waiting = sum(counts.get("waiting", 0) for counts in manifest["streams"].values())
    if waiting:
        lines.append(
            f"{waiting:,} event(s) after the as-of time wait in the store and count in the run whose as-of "
            'reaches them (docs/metric.md, "Time and the as-of time").'
        )
    views = outcome.database or "none (remote output)"
    lines.append(f"Counts reconcile. Tables: {manifest['output']}/tables/ (Delta Lake)  Views: {views}")
    return "\n".join(lines)


REMOTE_NOTE = """\
No goodput.duckdb for a remote output: the DuckDB views are built over local Parquet. To query it,
  - copy the tables down and build the views there (docs/dataflow.md, "Querying a gs:// output"):
      gcloud storage cp -r {tables} DIR/
  - or read them in place with DuckDB's delta and httpfs extensions and a GCS secret (a Delta table:
    a glob of its Parquet files would also read files that later runs replaced, and its checkpoints):
      select * from delta_scan({job_window_table})"""


# The options that decide where and on what a Dataflow job runs, in print order.
_JOB_OPTIONS = (
    "runner",
    "project",
    "region",
    "temp_location",
    "staging_location",
    "machine_type",
    "num_workers",
    "max_num_workers",
    "autoscaling_algorithm",
    "sdk_container_image",
    "setup_file",
    "experiments",
)


def describe_job(job) -> str:
    """The effective options and top-level steps of a job translated with --dry_run."""
    options = job.options.get_all_options()
    steps = sorted(
        t.unique_name
        for t in job.proto_pipeline.components.transforms.values()
        if "/" not in t.unique_name and not t.unique_name.startswith("ref_")
    )
    lines = ["Dry run: the job was translated for Dataflow and not submitted.", "options:"]
    lines += [f"  {name}: {options[name]}" for name in _JOB_OPTIONS if options.get(name) is not None]
    lines.append(f"steps ({len(job.proto_pipeline.components.transforms)} transforms in all):")
    lines += [f"  {step}" for step in steps]
    return "\n".join(lines)


def _moved_as_of(outcome) -> bool:
    """Whether the committed run's sources state they observed further than the run before it's as-of."""
    if (outcome.manifest.get("clock") or {}).get("basis") != "stated":
        return False
    runs = outcome.store.runs() if outcome.store is not None else []
    return len(runs) < 2 or (runs[-1].as_of_us or 0) > (runs[-2].as_of_us or 0)
