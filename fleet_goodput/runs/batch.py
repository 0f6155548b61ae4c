"""One batch run end to end: new input files → the Beam pipeline → one committed run.

A run continues the output store's last run (fleet_goodput/store/delta_store.py): it
reads only input files whose content no earlier run applied, starts every key
from its saved state, and commits its tables, the new state and its manifest
as one run. Used by `mpg run`, `mpg stream` (one run per batch of new files)
and `mpg demo`. This module is the run's main flow; each step is a module of
its own, in the order the run takes them:

    fleet_goodput/runs/inputs.py      list the input files and hash the new ones (InputError)
    fleet_goodput/runs/plan.py        plan the run under the output's lock (RunPlan)
    fleet_goodput/runs/compute.py     compute the new files into staging, in chunks of event time if long
    fleet_goodput/runs/commit.py      commit the staged run, then publish its views and manifest
                                      (ReconciliationError when counts do not add up: nothing is committed)
    fleet_goodput/runs/beam_flags.py  Beam's pipeline options for the run, and the Dataflow dry run
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deltalake.exceptions import DeltaError

from fleet_goodput.core.asof import check_as_of_near_data, check_observed_continuity
from fleet_goodput.core.config import Settings
from fleet_goodput.core.options import RunOptions
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines import goodput
from fleet_goodput.runs.commit import commit_run, publish, published_run
from fleet_goodput.runs.compute import compute
from fleet_goodput.runs.inputs import InputError, changed_since_listed, check_input, stated_by
from fleet_goodput.runs.plan import RunPlan, plan_run, staging_folder
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.killed_runs import undo_killed_run
from fleet_goodput.store.layout import is_remote
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.staging import clear_staging
from fleet_goodput.store.stored_settings import ChosenSettings, refuse_figure_changes, settings_for_run

# A run whose input files change while it reads them computes again without them, this many times at most.
MAX_ATTEMPTS = 3


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


def run(
    options: RunOptions,
    *,
    store: Store | None = None,
    progress: Callable[[str], None] | None = None,
    allowed_lateness_s: int | None = None,
    mode: str = "batch",
    build_views: bool = True,
    maintain: bool = True,
) -> BatchOutcome:
    """`mpg run`, `fleet_goodput.run` and each run of `mpg stream`: one committed run as `options` ask,
    computed with the settings the store keeps, those `options.config` names (and `allowed_lateness_s`,
    a stream's flag) replacing them where that leaves the stored figures right
    (fleet_goodput/store/stored_settings.py), chosen under the output's lock from the run it continues.
    `store` is the output (`options.output`) if the caller opened it already. The outcome's `note` says
    what a store from before settings were kept now stores; `maintain=False` as in `run_batch`."""
    return _run(
        options,
        lambda plan: settings_for_run(plan.store, plan.previous, options.config, allowed_lateness_s=allowed_lateness_s),
        store=store,
        progress=progress,
        mode=mode,
        build_views=build_views,
        maintain=maintain,
    )


def run_batch(
    input_dir: str,
    output_dir: str,
    settings: Settings,
    given_as_of_us: int | None = None,
    beam_args: list[str] | None = None,
    *,
    run_settings: RunSettings | None = None,
    replace: bool = False,
    mode: str = "batch",
    build_views: bool = True,
    chunk_hours: int | None = None,
    progress: Callable[[str], None] | None = None,
    confirm_as_of: bool = False,
    maintain: bool = True,
) -> BatchOutcome:
    """`run` with these settings rather than the store's (`mpg stream`, `mpg demo`, tests); a run whose
    settings would change the stored figures is refused (SettingsConflict) before it computes.
    `maintain=False` leaves the store's maintenance after the commit to the caller (`mpg stream`)."""
    options = RunOptions(
        input_dir,
        output_dir,
        given_as_of_us,
        confirm_as_of,
        replace,
        chunk_hours=chunk_hours,
        beam_args=tuple(beam_args or ()),
    )
    given = ChosenSettings(settings, run_settings or RunSettings())

    def checked(plan: RunPlan) -> ChosenSettings:
        refuse_figure_changes(plan.store, plan.previous, given.settings, given.run_settings)
        return given

    return _run(options, checked, mode=mode, build_views=build_views, progress=progress, maintain=maintain)


def _run(
    options: RunOptions,
    settings_of_run: Callable[[RunPlan], ChosenSettings],
    *,
    store: Store | None = None,
    mode: str = "batch",
    build_views: bool = True,
    progress: Callable[[str], None] | None = None,
    maintain: bool = True,
) -> BatchOutcome:
    """Apply the input's new files to the store at `options.output` as one committed run, computed by
    one Beam pipeline, which the runner parallelises as it does (`options.beam_args`; fleet_goodput/runs/beam_flags.py),
    with the settings `settings_of_run` gives for the run's plan, and maintained after its commit
    unless `maintain` is False.

    With `chunk_hours`, the new events are computed chunk of event time by
    chunk, one pipeline after the other (fleet_goodput/runs/compute.py), so memory follows
    one chunk, not the whole input; the run is still one commit. `progress`
    is told how the chunks go. A given as-of time (`given_as_of_us`) more than the
    allowed lateness past the newest scheduler event is refused (SuspiciousAsOf, nothing
    committed) unless `confirm_as_of`.
    """
    beam_args, input_dir, given_as_of_us = list(options.beam_args), options.input, options.given_as_of_us
    check_input(input_dir)
    started = time.monotonic()
    store = store or Store(options.output)  # the run's one: the plan carries it to the commit, views and caller
    with store.lock(), _undone_if_stopped(store):
        if options.replace:
            store.replace()
        progress = progress or (lambda _: None)
        plan = plan_run(input_dir, store, given_as_of_us, progress)
        chosen = settings_of_run(plan)  # before computing: commit_run checks again
        settings, run_settings = chosen.settings, chosen.run_settings
        skipped = tuple(f.path for f in plan.skipped)
        deferred = []

        def nothing_new() -> BatchOutcome:  # the latest run stands
            previous = plan.previous
            return BatchOutcome(
                manifest=previous.manifest if previous else {},
                database=None,
                seconds=time.monotonic() - started,
                run=previous,
                skipped=skipped,
                committed=False,
                deferred=tuple(deferred),
                store=store,
            )

        if given_as_of_us is None and not options.confirm_as_of and plan.previous is not None:
            # Before any computing: a wrong folder costs nothing.
            check_observed_continuity(stated_by(plan.files), list(plan.continuation.kept_times), plan.previous.as_of_us)
        if not plan.files and plan.moves_no_time(given_as_of_us):
            if plan.previous and published_run(store) != plan.previous.run_id:  # stopped after its commit
                publish(store, plan.previous, settings, build_views, progress)
            return nothing_new()
        chunk_hours = options.chunk_hours
        for _ in range(MAX_ATTEMPTS):
            staged = compute(plan, settings, run_settings, beam_args, given_as_of_us, chunk_hours, progress)
            changed = changed_since_listed(plan.files)
            if not changed:
                break
            deferred += [f.path for f in changed]
            progress(
                f"{len(changed)} file(s) changed or vanished while the run read them (is a producer still "
                f"writing?); left for the next run: {', '.join(f.path for f in changed)}"
            )
            shutil.rmtree(staging_folder(plan), ignore_errors=True)
            plan = dataclasses.replace(plan, files=tuple(f for f in plan.files if f not in changed))
            if options.given_as_of_us is None:
                # The clock waits for them: were it to move on, their events would be judged late next run.
                # So the pipeline is given the last run's as-of time (and chunks, which end at their events
                # rather than at an as-of time, are not used).
                if plan.previous is None:
                    progress("  the first run waits for them: nothing is committed until every file reads whole")
                    return nothing_new()
                given_as_of_us, chunk_hours = plan.previous.as_of_us, None
                progress(f"  the as-of time stays run {plan.previous.run_id}'s until they are read")
            if not plan.files and plan.moves_no_time(given_as_of_us):
                return nothing_new()
        else:
            raise InputError(
                f"input files kept changing while read, {MAX_ATTEMPTS} times: nothing was committed; "
                "producers should write a file under another name, then rename it into place"
            )
        if given_as_of_us is not None and not options.confirm_as_of:
            previous = plan.previous
            check_as_of_near_data(
                given_as_of_us,
                goodput.read_tally(staged[-1]).kept_times,
                run_settings.allowed_lateness_s,
                (previous.run_id, previous.as_of_us) if previous else None,
            )
        progress(f"Committing run {plan.previous.run_id + 1 if plan.previous else 1} to {plan.output_dir}")
        record = commit_run(plan, settings, run_settings, mode, staged, maintain=maintain)
    database = publish(store, record, settings, build_views, progress)
    return BatchOutcome(
        manifest=record.manifest,
        database=database,
        seconds=time.monotonic() - started,
        run=record,
        skipped=skipped,
        deferred=tuple(deferred),
        note=chosen.note,
        store=store,
    )


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
                undo_killed_run(store)
            except (OSError, DeltaError):
                pass  # the original error says why
        raise
