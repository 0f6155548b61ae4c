"""Commit and publish: a run's staged tables become one committed run of the store, then its views and manifest.

`commit_run` checks that the staged counts reconcile (read = accepted +
duplicate + rejected + late + waiting, per stream; else ReconciliationError
and nothing is committed), then commits the run's settings, tables, state and
applied files, and last its `runs` row, which makes it visible
(fleet_goodput/store/delta_store.py). It runs where the pipeline finished: in
`mpg run` (fleet_goodput/runs/batch.py), and as the last step of a Flex
Template job (fleet_goodput/runs/launcher.py). `publish` then builds the
DuckDB views and writes manifest.json, in that order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake.exceptions import CommitFailedError

from fleet_goodput.core.asof import clock_account
from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.session import STATE_FORMAT
from fleet_goodput.pipelines import goodput
from fleet_goodput.runs.inputs import quotas_stated_by
from fleet_goodput.runs.plan import RunPlan, staging_folder
from fleet_goodput.store import maintenance
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import STATE_FILES_SCHEMA, STATE_KEYS_SCHEMA, delta_schema, is_remote
from fleet_goodput.store.manifest import KEPT_TIMES_KEY, add_counts, build_manifest, manifest_path, write_manifest_copy
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.stored_settings import commit_settings
from fleet_goodput.store.tables import QUEUE_QUOTA, REPLACED_EACH_RUN, STATED, TABLES, utc_day
from fleet_goodput.store.transaction import Transaction


class ReconciliationError(RuntimeError):
    """read != accepted + duplicate + rejected + late for some stream."""


def commit_run(
    plan: RunPlan,
    settings: Settings,
    run_settings: RunSettings,
    mode: str,
    staged_folders: list[str] | None = None,
    maintain: bool = True,
) -> RunRecord:
    """Commit what the run staged as one run: tables, state, applied files, then its `runs` row,
    and maintain the store (maintenance.maintain) unless `maintain` is False (a stream does it less often).

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
    as_of_us, kept = staged[-1].as_of_us, staged[-1].kept_times
    run_id = previous.run_id + 1 if previous else 1
    lateness_us = run_settings.allowed_lateness_s * 1_000_000
    reached = plan.continuation if as_of_us is None else plan.continuation.after(as_of_us, lateness_us, kept)
    frontier_us, version_us = (None, None) if as_of_us is None else (reached.frontier_us, reached.version_us)
    quotas, refused = quotas_stated_by(plan.files)
    manifest = build_manifest(
        run_id=run_id,
        input_dir=plan.input_dir,
        as_of_us=as_of_us,
        window_s=settings.window_s,
        previous=previous.manifest if previous else None,
        counts=add_counts(*(part.counts for part in staged)),
        pending=staged[-1].pending,
        extra={
            "mode": mode,
            "version_us": version_us,
            "frontier_us": frontier_us,
            KEPT_TIMES_KEY: kept,
            "clock": clock_account([tuple(item) for item in kept or ()]),
            "allowed_lateness_s": run_settings.allowed_lateness_s,
            "files_applied": len(plan.files),
            "files_skipped": len(plan.skipped),
            "output": plan.output_dir,
            "queue_quota": {"levels": len(quotas), "refused": refused},
        },
    )
    if not manifest["reconciles"]:
        raise ReconciliationError(_reconciliation_message(manifest) + "; the run was not committed")
    transaction.check_unchanged()  # before writing anything, where another run's commit is seen
    try:
        _commit_tables(transaction, run_id, plan, settings, run_settings, folders, final, quotas)
    except CommitFailedError:  # delta-rs found another run's commit in the way
        raise transaction.lost_race() from None
    record = RunRecord(
        run_id=run_id,
        committed_at_us=time.time_ns() // 1000,
        mode=mode,
        input=str(plan.input_dir),
        as_of_us=as_of_us,
        frontier_us=frontier_us,
        files_applied=len(plan.files),
        files_skipped=len(plan.skipped),
        state_format=STATE_FORMAT,
        versions=dict(transaction.versions),
        manifest=manifest,
    )
    transaction.commit(record)
    transaction.discard()
    if maintain:
        maintenance.maintain(store, run_settings.retention_hours)
    return record


def _commit_tables(
    transaction: Transaction,
    run_id: int,
    plan: RunPlan,
    settings: Settings,
    run_settings: RunSettings,
    folders: list[str],
    final: list[str],
    quotas: list[dict],
) -> None:
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
    transaction.write(
        "state_files",
        pa.Table.from_pylist(
            [
                {
                    "sha256": f.sha256,
                    "path": f.path,
                    "stream": f.stream,
                    "size": f.size,
                    "run_id": run_id,
                    "modified_us": f.modified_us,
                }
                for f in plan.files
            ],
            schema=STATE_FILES_SCHEMA,
        ),
        STATE_FILES_SCHEMA,
    )
    transaction.compact()


def _reconciliation_message(manifest: dict) -> str:
    broken = [
        f"{name}: read {c['read']} != accepted {c['accepted']} + duplicate {c['duplicate']} "
        f"+ rejected {c['rejected']} + late {c['late']} + waiting {c['waiting']}"
        for name, c in manifest["streams"].items()
        if not c["reconciles"]
    ]
    return f"counts do not reconcile ({'; '.join(broken)})"


def publish(
    store: Store, record: RunRecord, settings: Settings, build_views: bool, progress: Callable[[str], None]
) -> Path | None:
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


def published_run(store: Store) -> int | None:
    """The run whose manifest.json the output holds (a remote output: taken to be the latest)."""
    if is_remote(store.root):
        return store.latest().run_id
    try:
        return json.loads(Path(manifest_path(store.root)).read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None
