"""The Python API, for notebooks: simulate a fleet, run the pipeline, query the views.

    import fleet_goodput as fg

    fg.simulate("fleet", hours=6, jobs=40, seed=3)    # telemetry and its truth, as `mpg simulate`
    outcome = fg.run("fleet", "out")                   # one committed run, as `mpg run`
    con = fg.open("out")                               # DuckDB, as `mpg sql`
    con.sql("select day, cluster, sg, rg, pg, mpg from fleet_daily").df()

Each function does what its command does, with the same checks and the same
errors, raised instead of printed. Importing `fleet_goodput` stays light: DuckDB,
Beam and the simulator load when a function first needs them.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from fleet_goodput.core.timeutil import EPOCH, ONE_MICROSECOND, parse_time_us

if TYPE_CHECKING:
    import duckdb

    from fleet_goodput.runs.batch import BatchOutcome
    from fleet_goodput.simulator import SimulationSummary
    from fleet_goodput.store.sql_guard import Confined

__all__ = ["open", "run", "simulate"]


def open(
    output: str | Path, run: int | None = None, *, confined: bool = True, config: str | Path | None = None
) -> Confined | duckdb.DuckDBPyConnection:
    """A DuckDB connection with the goodput views of one committed run of `output`.

    `run` picks the run by id (`mpg runs --output OUTPUT` lists them); the
    default is the latest committed run, so a run still being written is
    never half-seen, and run N reads as it did when N was committed (versions
    older than the retention, a week by default, are vacuumed). The views are those
    of `mpg sql` (docs/tables-and-views.md): `job_goodput`, `fleet_daily`,
    `goodput_by_segment`, `badput_breakdown`, `capacity_window`, ... and the
    tables `job_window`, `jobs`, `capacity_level`, `rejected`, `late`.

    Query it the DuckDB way: `con.sql(q).df()` (pandas), `.pl()` (polars),
    `.arrow()`, `.fetchall()`; `con.register("mine", dataframe)` joins your own
    data in.

    `confined` (the default) locks the connection down as `mpg sql` does
    (fleet_goodput/store/sql_guard.py): it reads files under `output` only, reaches
    no network, loads no extension, and its settings cannot be changed.
    DuckDB has no read-only switch for a folder (it may write wherever it may
    read), so the connection given is DuckDB's wrapped (`sql_guard.Confined`):
    every attribute is DuckDB's, but SQL that is not a query (`COPY ... TO`,
    `EXPORT DATABASE`, `SET`, ...) raises QueryRefused before it runs, as in
    `mpg sql`, and so does a relation's `write_parquet`, `write_csv`,
    `to_parquet` or `to_csv`. `confined=False` gives DuckDB's own connection
    with its defaults (any file, the network, extensions), like
    `mpg sql --unsafe-allow-writes-and-files`.

    The views use the settings the output keeps, those its figures were
    computed with (the `settings` view shows them). `config` is not needed: a
    settings file given is checked against them, and one that differs raises
    fleet_goodput.store.stored_settings.SettingsConflict naming each difference (for
    an output written before outputs kept their settings, it gives the size
    classes, as the defaults do without it). Raises FileNotFoundError when
    `output` holds no committed run, fleet_goodput.store.errors.StoreDamaged for a
    damaged output (naming the damage: `mpg check --output OUTPUT` says how
    to recover), and fleet_goodput.store.errors.StoreError for a run that does not
    exist or an output on gs:// (query a local copy).
    """
    from fleet_goodput.core.config import load_settings, settings_file
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.sql_guard import Confined, lock_down
    from fleet_goodput.store.stored_settings import reader_settings
    from fleet_goodput.store.views import connect

    config = None if config is None else settings_file(config)  # read once: the views and the check take it
    store = Store(output)  # the one the views and the check read; `connect` checks it whole, once
    # The views take the store's settings; the file's serve only where it keeps none (an older store).
    connection = connect(store, run=run, settings=None if config is None else load_settings(config))
    if config is not None:
        try:
            reader_settings(store, store.run(run), config, output)
        except BaseException:
            connection.close()
            raise
    if confined:
        lock_down(connection, [output])
        return Confined(connection)
    return connection


def run(
    input: str | Path,
    output: str | Path,
    *,
    as_of: datetime | str | None = None,
    replace: bool = False,
    config: str | Path | None = None,
    beam_args: list[str] | tuple[str, ...] = (),
    workers: int | None = None,
    confirm_as_of: bool = False,
) -> BatchOutcome:
    """Run the batch pipeline on `input`'s telemetry and commit one run to `output`; as `mpg run`.

    `input` holds `scheduler/`, `runtime/` and `profiler/` Avro files. An
    `output` that holds earlier runs is continued: only files no earlier run
    applied are read, and running jobs carry on from their saved state.
    `replace=True` starts `output` afresh instead.

    `as_of` ends still-running jobs and capacity there (a datetime, taken as
    UTC when it has no time zone, or an ISO-8601 string such as
    "2026-01-01T12:00:00Z"); the default is how far the scheduler's clock has reached (docs/metric.md).
    `config` is a settings file overriding configs/default.yaml, or on an
    output with runs, the settings it keeps (the first run stores them); `beam_args`
    are Beam pipeline flags (`["--runner=DataflowRunner", "--project=p"]`),
    after those of the config's `beam:` section, so they win. `workers` is
    how many processes Beam's local runner computes the run in (by default
    Beam's: one). Beam flags are checked as `mpg run` checks them: an
    unknown one raises fleet_goodput.core.options.OptionsError naming the nearest.
    An `as_of` more than the allowed lateness past the newest scheduler event
    raises fleet_goodput.core.asof.SuspiciousAsOf (nothing committed) unless
    `confirm_as_of=True`.

    Returns a `BatchOutcome`: `.run` (the committed run record: `.run_id`,
    `.as_of_us`, ...), `.manifest` (what was read, accepted, rejected and
    late, per stream), `.skipped` (input files an earlier run already
    applied), `.committed` (False when nothing was new and the latest run
    stands) and `.seconds`. Raises fleet_goodput.runs.inputs.InputError for a
    missing or empty input, fleet_goodput.store.errors.StoreError for an as-of
    before the last run's, an output another run holds, a folder that holds
    files of someone else (NotAStore) or a damaged output (StoreDamaged),
    fleet_goodput.store.stored_settings.SettingsConflict when `config` would change
    the figures the output holds (naming each difference; `replace=True`
    starts afresh), and fleet_goodput.runs.commit.ReconciliationError (nothing
    committed) when counts do not add up. On an output written before outputs
    kept their settings, warns (UserWarning) what this run stores.
    """
    from fleet_goodput.core.config import SettingsFile
    from fleet_goodput.core.options import OPTIONS, OptionsError, RunOptions
    from fleet_goodput.runs import batch
    from fleet_goodput.runs.beam_flags import beam_args_for

    for flag in beam_args:
        name = str(flag).split("=", 1)[0]
        if name.startswith("--") and name[2:] in OPTIONS:  # `mpg run`'s own, which this function takes as arguments
            raise OptionsError(
                f"{name} in beam_args is an option of `mpg run`, not a Beam pipeline flag: "
                "fleet_goodput.run takes it as an argument where it has one (as_of=, replace=, "
                "config=, workers=, confirm_as_of=)"
            )
    settings_file = None if config is None else SettingsFile.read(config)  # read once: all the run takes from it
    options = RunOptions(
        str(input),
        str(output),
        given_as_of_us=_time_us(as_of),
        confirm_as_of=confirm_as_of,
        replace=replace,
        config=settings_file,
        beam_args=beam_args_for(settings_file, list(beam_args), workers, where=" (in beam_args)"),
    )
    outcome = batch.run(options)
    if outcome.note:
        warnings.warn(outcome.note, stacklevel=2)
    return outcome


def simulate(
    out: str | Path,
    *,
    seed: int = 0,
    hours: float = 24.0,
    jobs: int | None = None,
    steady: bool = False,
    config: str | Path | None = None,
    overwrite: bool = False,
    node_failures: bool = False,
) -> SimulationSummary:
    """Write a simulated fleet's telemetry and its ground truth into `out`; as `mpg simulate`.

    `hours` of 3-5 clusters of TPUs and GPUs from 2026-01-01T00:00Z, with
    `jobs` jobs (default: about 54 an hour); the same `seed` always writes the
    same bytes. `out/scheduler/`, `out/runtime/` and `out/profiler/` get the
    Avro telemetry `run` reads; `out/truth/` the chip-seconds the pipeline
    should find (job_window, jobs and capacity_window as Parquet, and
    truth.json), computed from the simulated timeline, not from the events.
    `steady=True` keeps the events per hour the same whatever `hours` is
    (`mpg simulate --steady`), for comparing inputs of different lengths.
    `node_failures=True` adds hosts failing and repaired, with their causes
    (`mpg simulate --node-failures`).

    Returns a `SimulationSummary` (`.jobs`, `.clusters`, `.events` per
    stream, `.as_of_us`, `.describe()`). Refuses (FileExistsError) an `out`
    that already holds telemetry, unless `overwrite=True`.
    """
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.simulator import simulate as simulate_fleet
    from fleet_goodput.telemetry.avro_io import clear_telemetry, telemetry_files

    if telemetry_files(out):
        if not overwrite:
            raise FileExistsError(f"{out} already holds telemetry; pass overwrite=True to replace it")
        clear_telemetry(out, also=("truth",))
    settings = load_settings(config)
    return simulate_fleet(
        out,
        seed=seed,
        hours=hours,
        jobs=jobs,
        steady=steady,
        window_s=settings.window_s,
        settings=settings,
        node_failures=node_failures,
    )


def _time_us(moment: datetime | str | None) -> int | None:
    if moment is None:
        return None
    if isinstance(moment, str):
        return parse_time_us(moment)
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return (moment - EPOCH) // ONE_MICROSECOND
    raise TypeError(f"as_of must be a datetime or an ISO-8601 string, not {type(moment).__name__}")
