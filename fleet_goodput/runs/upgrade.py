"""`mpg check --upgrade`: a store whose saved state an earlier release wrote, brought to this one's format
in place, as one committed run (mode `upgrade`).

A store keeps the state of its open keys pickled (fleet_goodput/core/session.py), in the format its
`runs` rows name (`state_format`). A run of this release continues only a store of its own format;
one of format 3 (`UPGRADABLE_FROM`) is upgraded here, without its telemetry, which may be long gone:

- each key's state is brought to format 4 (fleet_goodput/core/state_formats.py);
- capacity, which format 3 kept per window in the `capacity_window` table, becomes stretches of one
  level in `capacity_level`: each window before the frontier as at most two stretches holding its
  chip-time exactly, the frontier's window up to the frontier likewise from the saved state, and from
  the frontier on the stretches the saved state and its waiting events give, advanced to the store's
  as-of time as its last run did. So every window's capacity chip-time is the one the store held,
  and the runs that continue it give the figures one run over every input gives
  (tests/store/test_store_upgrade.py). `tables/capacity_window/` stays as format 3 wrote it, unread;
- the `runs` row of the upgrade carries the last run's as-of time, frontier and manifest, with
  `upgraded_from_format`, and `state_format` 4.

What format 3 never kept stays not known: jobs' end reasons and interruptions before the upgrade
read as null. Nothing is changed unless the whole upgrade commits: a failure leaves the store as its
last run left it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from fleet_goodput.core.capacity import CapacityTimeline
from fleet_goodput.core.keys import parse_capacity_key
from fleet_goodput.core.session import STATE_FORMAT, state_from_bytes
from fleet_goodput.core.state_formats import LAST_WRITTEN_BY, UPGRADABLE_FROM, upgrade_state, window_as_stretches
from fleet_goodput.core.windows import window_start
from fleet_goodput.store import delta_arrow
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.layout import STATE_KEYS_SCHEMA, is_remote
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.rollback import restating_run
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.stored_settings import kept_settings
from fleet_goodput.store.tables import CAPACITY_LEVEL, utc_day
from fleet_goodput.store.transaction import begin

OLD_CAPACITY = "capacity_window"  # format 3's capacity table, by its name in the runs' `versions`


@dataclass(frozen=True)
class Upgrade:
    record: RunRecord | None  # the upgrade's own run; None: the store was of this format already
    from_format: int
    keys: int  # saved states brought to this format
    stretches: int  # capacity_level rows written


def refuse_other_format(state_format: int, root: str) -> None:
    """StoreError for a store whose saved state is not in this release's format: what to do with it
    (`mpg check --upgrade`, or which release continues it)."""
    if state_format > STATE_FORMAT:
        raise StoreError(
            f"{root} was written by a newer fleet-goodput (state format {state_format}, this one reads "
            f"{STATE_FORMAT}): upgrade fleet-goodput to continue it"
        )
    if state_format >= UPGRADABLE_FROM:
        raise StoreError(
            f"{root} keeps the state of its open jobs in format {state_format}, written by an older "
            f"fleet-goodput; this one keeps format {STATE_FORMAT}. Upgrade it in place first, as one "
            f"run (copy the folder first to keep it as it is): mpg check --upgrade --output {shlex.quote(root)}"
        )
    raise StoreError(
        f"{root} keeps the state of its open jobs in format {state_format}, which this fleet-goodput cannot upgrade "
        f"(it upgrades format {UPGRADABLE_FROM} and later): fleet-goodput at commit {LAST_WRITTEN_BY[state_format]}, "
        f"the last to write format {state_format}, continues and reads it (this one reads its jobs' tables, but not its "
        "capacity, kept per window then). To continue with this version, start the output afresh over every input "
        f"(copy the folder first to keep the old figures): mpg run --replace --input DIR --output {shlex.quote(root)}"
    )


def upgrade_store(output_dir: str) -> Upgrade:
    """Upgrade the store at `output_dir` to this release's state format, as one committed run (the
    caller publishes its views). StoreBusy while another process holds the output; StoreError for a
    store this release cannot upgrade, saying which release continues it."""
    store = Store(output_dir)
    if is_remote(store.root):
        raise StoreError("mpg check --upgrade works on a local output: it needs the output's lock")
    with store.lock():
        latest = require_intact(store)
        if latest is None:
            raise StoreError(f"{store.root} holds no committed run: nothing to upgrade")
        if latest.state_format == STATE_FORMAT:
            return Upgrade(None, STATE_FORMAT, 0, 0)
        if latest.state_format > STATE_FORMAT or latest.state_format < UPGRADABLE_FROM:
            refuse_other_format(latest.state_format, store.root)
        saved = store.read("state_keys", latest)
        states = [state_from_bytes(blob) for blob in (saved.column("blob").to_pylist() if saved else [])]
        rows = _capacity_rows(store, latest, states)
        transaction = begin(store)
        staged = f"{transaction.staging}/{CAPACITY_LEVEL.name}"
        pa.fs.LocalFileSystem().create_dir(staged)
        stretches = CAPACITY_LEVEL.to_arrow(rows)
        starts = stretches.column("start_time").cast(pa.int64()).to_pylist()
        pq.write_table(
            stretches.append_column("date", pa.array(map(utc_day, starts), pa.string())), f"{staged}/part-00000.parquet"
        )
        transaction.write_keyed(CAPACITY_LEVEL)
        transaction.write(
            "state_keys",
            pa.Table.from_pylist(
                [{"key": state.key, "blob": state.to_bytes()} for state in states], schema=STATE_KEYS_SCHEMA
            ),
            STATE_KEYS_SCHEMA,
            mode="overwrite",
        )
        run_id = latest.run_id + 1
        record = restating_run(
            latest,
            run_id,
            "upgrade",
            store.root,
            dict(transaction.versions),
            STATE_FORMAT,
            upgraded_from_format=latest.state_format,
        )
        transaction.commit(record)
        transaction.discard()
    return Upgrade(record, latest.state_format, len(states), len(rows))


def _capacity_rows(store: Store, latest: RunRecord, states: list) -> list[dict]:
    """The `capacity_level` rows of a format-3 store: its windows before each key's frontier as
    stretches, then what each capacity key's upgraded state holds from its frontier to the as-of time.
    Upgrades `states` in place."""
    version_us = latest.manifest.get("version_us")
    rows = []
    frontiers = {}
    for state in states:
        settled = upgrade_state(state)
        if not isinstance(state.timeline, CapacityTimeline):
            continue
        cluster, accelerator = parse_capacity_key(state.key)
        # The key's frontier, not its timeline's time: a key whose every CAPACITY event still waits has
        # none, and its windows in the old table are then all provisional, given again by `advance`.
        frontier_us = frontiers[(cluster, accelerator)] = state.frontier_us
        window_us = state.timeline.window_us
        for window, chip_us in settled.items():
            end_us = min(window + window_us, frontier_us)
            rows += [
                _row(cluster, accelerator, *stretch, version_us)
                for stretch in window_as_stretches(window, end_us, chip_us)
            ]
        if latest.as_of_us is not None:
            advance = state.advance(latest.as_of_us, latest.frontier_us)
            rows += [
                {
                    **_row(cluster, accelerator, start_us, end_us, chips, version_us),
                    "changed_from_us": advance.changed_from[start_us],
                }
                for start_us, (end_us, chips) in advance.windows.items()
            ]
    for window in _old_windows(store, latest):
        frontier_us = frontiers.get((window["cluster"], window["accelerator"]))
        window_us = window["window_us"]
        if frontier_us is not None and window["window_start_us"] >= window_start(frontier_us, window_us):
            continue  # from the frontier's window on, the saved state says it (above)
        rows += [
            _row(window["cluster"], window["accelerator"], *stretch, window["version_us"])
            for stretch in window_as_stretches(
                window["window_start_us"], window["window_start_us"] + window_us, window["chip_us"]
            )
        ]
    return rows


def _row(cluster: str, accelerator: str, start_us: int, end_us: int, chips: int, version_us: int | None) -> dict:
    return {
        "cluster": cluster,
        "accelerator": accelerator,
        "start_time_us": start_us,
        "end_time_us": end_us,
        "chips": chips,
        "changed_from_us": start_us,
        "version_us": version_us,
    }


def _old_windows(store: Store, latest: RunRecord) -> list[dict]:
    """Format 3's `capacity_window` rows as the latest run left them, the latest version of each window
    (a table written before keyed tables held one row per key may hold several), in integer microseconds."""
    version = latest.versions.get(OLD_CAPACITY)
    if version is None:
        return []
    table = delta_arrow.dataset(DeltaTable(store.path(f"tables/{OLD_CAPACITY}"), version=version)).to_table()
    window_us = kept_settings(store, latest)["window_s"] * 1_000_000
    latest_rows: dict[tuple, dict] = {}
    for row in table.cast(
        pa.schema([f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in table.schema])
    ).to_pylist():
        key = (row["cluster"], row["accelerator"], row["window_start"])
        if key not in latest_rows or row["version"] >= latest_rows[key]["version_us"]:
            # chip-seconds were stored as a float of integer chip-microseconds / 1e6: exact below 2^53 µs
            latest_rows[key] = {
                "cluster": row["cluster"],
                "accelerator": row["accelerator"],
                "window_start_us": row["window_start"],
                "window_us": window_us,
                "chip_us": round(row["capacity_chip_s"] * 1_000_000),
                "version_us": row["version"],
            }
    return list(latest_rows.values())
