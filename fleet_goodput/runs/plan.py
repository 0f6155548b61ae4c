"""The run plan: what a run will do, decided under the output's lock before any pipeline starts.

`plan_run` undoes what a killed run left, checks that this fleet-goodput can
continue the store's last run (its state format, an --as_of not before that
run's), and picks the input files no earlier run applied
(fleet_goodput/runs/inputs.py). The plan carries the store, the run's staging
folder and where the last run left off (`Continuation`) to the pipeline and
the commit (fleet_goodput/runs/commit.py); a Flex Template job's commit step
gets it pickled with the job (fleet_goodput/runs/launcher.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleet_goodput import schemas
from fleet_goodput.core.asof import default_as_of, describe_span, newest_known
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.core.timeutil import format_time_us
from fleet_goodput.runs.inputs import InputFile, list_input
from fleet_goodput.runs.redelivered import refuse_changed_in_place
from fleet_goodput.runs.upgrade import refuse_other_format
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.manifest import KEPT_TIMES_KEY
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.staging import claim_staging, clear_staging
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stream_commit import refuse_stream_store
from fleet_goodput.store.transaction import begin


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
        return Continuation(
            previous.as_of_us,
            previous.frontier_us,
            manifest.get("version_us"),
            tuple(map(tuple, manifest.get(KEPT_TIMES_KEY) or ())),
        )

    def moves_no_time(self, given_as_of_us: int | None) -> bool:
        """Whether a run with no new file would leave the store as it is: its as-of time (given, or
        the scheduler's clock, which a run given an earlier --as_of left ahead) is the last run's."""
        previous = self.previous
        if previous is None:
            return given_as_of_us is None
        continuation = self.continuation
        as_of_us = given_as_of_us
        if as_of_us is None:
            as_of_us = default_as_of(list(continuation.kept_times), continuation.as_of_us)
        return as_of_us == previous.as_of_us

    @property
    def files_by_stream(self) -> dict[str, list[str]]:
        return {stream: [f.path for f in self.files if f.stream == stream] for stream in schemas.STREAMS}


def plan_run(
    input_dir: str, store: Store, given_as_of_us: int | None, progress: Callable[[str], None] = lambda _: None
) -> RunPlan:
    """Undo what a killed run left, check the continuation, and pick the input files no run applied."""
    require_intact(store)  # a damaged store is refused before a run changes anything
    clear_staging(store.root)
    transaction = begin(store)
    claim_staging(store.root, transaction.token)
    previous = transaction.previous
    _check_continuation(previous, given_as_of_us, store.root)
    applied = store.applied_files(previous)
    hashes = set(applied.values())
    files, skipped = [], []
    for item in list_input(input_dir, applied, progress):
        (skipped if item.sha256 in hashes else files).append(item)
        hashes.add(item.sha256)
    refuse_changed_in_place(store, previous, files, applied)  # fleet_goodput/runs/redelivered.py
    state_files = tuple(store.path(f) for f in store.files("state_keys", previous))
    return RunPlan(input_dir, store, transaction.token, previous, tuple(files), tuple(skipped), state_files)


def staging_folder(plan: RunPlan) -> str:
    """Where the run stages what it computes, for its commit (the store's layout: delta_store.py)."""
    return plan.store.staging_folder(plan.token)


def _check_continuation(previous: RunRecord | None, given_as_of_us: int | None, output_dir: str) -> None:
    refuse_stream_store(previous, output_dir)
    if previous is None:
        return
    if previous.state_format != STATE_FORMAT:
        refuse_other_format(previous.state_format, output_dir)  # fleet_goodput/runs/upgrade.py
    if given_as_of_us is not None and previous.as_of_us is not None and given_as_of_us < previous.as_of_us:
        newest_us = newest_known(tuple(map(tuple, previous.manifest.get(KEPT_TIMES_KEY) or ())))
        newest = f"; the newest scheduler event is {format_time_us(newest_us)}" if newest_us is not None else ""
        lateness = previous.manifest.get("allowed_lateness_s")
        allowed = f", the allowed lateness {describe_span(lateness * 1_000_000)}" if lateness is not None else ""
        raise StoreError(
            f"--as_of {format_time_us(given_as_of_us)} is earlier than run {previous.run_id}'s as-of "
            f"{format_time_us(previous.as_of_us)}{newest}{allowed}: a run continues from where the last "
            "one ended (read an earlier run with `mpg sql --run ID`, undo the runs after it with "
            "`mpg rollback --to ID`, or start afresh with --replace)"
        )
