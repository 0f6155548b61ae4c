"""The one committed run a validation or a report reads, from one `Store` checked whole once.

`mpg validate` and `mpg report` (and the demo's report) open the output's
`Store` where they start and check it whole there (store_check.require_intact:
the latest run's table versions and data files, about 50 CPU ms), before the
period is worked out or anything else reads it, as `mpg sql` does. The run
checked is pinned with the settings it was computed with, and every suite and
the report read that run through that Store: a run committed meanwhile is
neither read unchecked nor mixed with the one validated.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.core.config import Settings, SettingsFile
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.killed_runs import undo_killed_run_if_idle
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stored_settings import reader_settings


@dataclass(frozen=True)
class CheckedRun:
    output: str | Path  # as the reader named it, for its messages and the report's page
    store: Store
    record: RunRecord | None  # the latest committed run when checked; None: the store held none
    settings: Settings  # those `record` was computed with

    def committed(self) -> RunRecord:
        """The run checked; StoreError, as `Store.run` words it, when the store held none."""
        if self.record is None:
            raise StoreError(
                f"{self.store.root} holds no committed run: "
                f"run `mpg run --input DIR --output {shlex.quote(self.store.root)}` first"
            )
        return self.record


def open_checked_run(output: str | Path | Store, config: str | Path | SettingsFile | None = None) -> CheckedRun:
    """`output`'s latest committed run, its store checked whole (StoreDamaged, naming the damage), and
    what a killed run left in its tables undone if no run holds it (as `views.connect` does). `config`
    is refused if it differs from the run's settings in anything (SettingsConflict); where the store
    keeps none (an older store) it gives them, as the defaults do without it."""
    store = Store.of(output)
    named = store.root if isinstance(output, Store) else output
    record = require_intact(store)
    undo_killed_run_if_idle(store)
    return CheckedRun(named, store, record, reader_settings(store, record, config, named))
