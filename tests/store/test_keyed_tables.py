"""A keyed table's latest Delta version holds one row per key: the latest figures (fleet_goodput/store/keyed_tables.py).

Small hand-made rows of `capacity_window` (key: cluster, accelerator, window_start), committed the way a run
commits them, and read back as any Delta reader would.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from fleet_goodput.store.keyed_tables import ONE_ROW_PER_KEY, commit_keyed, holds_one_row_per_key
from fleet_goodput.store.layout import delta_schema
from fleet_goodput.store.tables import CAPACITY_WINDOW, utc_day

HOUR_US = 3600 * 1_000_000
DAY1 = 1_767_225_600 * 1_000_000  # 2026-01-01T00:00Z
DAY2 = DAY1 + 24 * HOUR_US
SCHEMA = delta_schema(CAPACITY_WINDOW)


def _rows(*rows: tuple) -> pa.Table:
    """(cluster, window_start_us, capacity_chip_s, version_us) → capacity_window rows as stored."""
    dicts = [
        {"cluster": c, "accelerator": "tpu-v5e", "window_start_us": w, "capacity_chip_s": s, "version_us": v}
        for c, w, s, v in rows
    ]
    table = CAPACITY_WINDOW.to_arrow(dicts)
    return table.append_column("date", pa.array([utc_day(w) for _, w, _, _ in rows], pa.string()))


def _stage(tmp_path, name: str, rows: pa.Table) -> str:
    path = tmp_path / f"{name}.parquet"
    pq.write_table(rows, path)
    return str(path)


def _read(path) -> list[tuple]:
    rows = DeltaTable(str(path)).to_pyarrow_table().sort_by([("cluster", "ascending"), ("window_start", "ascending")])
    return [(r["cluster"], r["window_start"].timestamp(), r["capacity_chip_s"]) for r in rows.to_pylist()]


def test_a_run_replaces_the_rows_it_changed_and_keeps_the_rest(tmp_path):
    table = tmp_path / "capacity_window"
    first = _stage(tmp_path, "run1", _rows(("a", DAY1, 10.0, 1), ("a", DAY2, 20.0, 1), ("b", DAY2, 5.0, 1)))
    commit_keyed(str(table), [first], CAPACITY_WINDOW, SCHEMA, current=None)
    # The next run revises a's day-2 window twice (two chunks: the later version wins) and adds a window.
    second = _stage(tmp_path, "run2", _rows(("a", DAY2, 25.0, 2), ("a", DAY2, 30.0, 3), ("b", DAY2 + HOUR_US, 7.0, 3)))
    commit_keyed(str(table), [second], CAPACITY_WINDOW, SCHEMA, current=DeltaTable(str(table)))
    assert _read(table) == [
        ("a", DAY1 / 1e6, 10.0),
        ("a", DAY2 / 1e6, 30.0),
        ("b", DAY2 / 1e6, 5.0),
        ("b", (DAY2 + HOUR_US) / 1e6, 7.0),
    ]
    history = DeltaTable(str(table), version=0).to_pyarrow_table()  # what the first run left
    assert sorted(history.column("capacity_chip_s").to_pylist()) == [5.0, 10.0, 20.0]
    assert holds_one_row_per_key(DeltaTable(str(table)))
    # Day 1 was not touched: its file is the first run's.
    day1_files = [f for f in DeltaTable(str(table)).file_uris() if "date=2026-01-01" in f]
    assert day1_files == [f for f in DeltaTable(str(table), version=0).file_uris() if "date=2026-01-01" in f]


def test_a_first_run_with_nothing_to_write_creates_the_table_empty(tmp_path):
    table = tmp_path / "capacity_window"
    commit_keyed(str(table), [], CAPACITY_WINDOW, SCHEMA, current=None)
    read = DeltaTable(str(table)).to_pyarrow_table()
    assert read.num_rows == 0 and read.schema.names == SCHEMA.names


def test_a_table_written_before_the_rule_is_rewritten_whole_by_its_next_run(tmp_path):
    """A store kept from before held every version of a row: the first run after rewrites every
    partition to the latest row per key, and marks the table; its old versions stay as they were."""
    table = tmp_path / "capacity_window"
    old = _rows(("a", DAY1, 10.0, 1), ("a", DAY1, 12.0, 2), ("a", DAY2, 20.0, 1), ("a", DAY2, 21.0, 2))
    write_deltalake(str(table), old, partition_by=["date"])
    assert not holds_one_row_per_key(DeltaTable(str(table)))
    staged = _stage(tmp_path, "run", _rows(("a", DAY2, 22.0, 3)))  # touches day 2 only
    commit_keyed(str(table), [staged], CAPACITY_WINDOW, SCHEMA, current=DeltaTable(str(table)))
    assert _read(table) == [("a", DAY1 / 1e6, 12.0), ("a", DAY2 / 1e6, 22.0)]
    assert DeltaTable(str(table)).metadata().configuration[ONE_ROW_PER_KEY] == "cluster,accelerator,window_start"
    assert DeltaTable(str(table), version=0).to_pyarrow_table().num_rows == 4


def test_a_column_the_definition_gained_joins_a_table_made_without_it(tmp_path):
    """A store made before a column existed (jobs.queue): the next commit adds it to the Delta table,
    null in the rows written before, and the partitions it rewrites carry it."""
    table = tmp_path / "capacity_window"
    older = pa.schema([field for field in SCHEMA if field.name != "capacity_chip_s"])
    first = _stage(tmp_path, "run1", _rows(("a", DAY1, 10.0, 1), ("b", DAY2, 5.0, 1)).drop_columns(["capacity_chip_s"]))
    commit_keyed(str(table), [first], CAPACITY_WINDOW, older, current=None)
    second = _stage(tmp_path, "run2", _rows(("b", DAY2, 7.0, 2)))
    commit_keyed(str(table), [second], CAPACITY_WINDOW, SCHEMA, current=DeltaTable(str(table)))
    assert _read(table) == [("a", DAY1 / 1e6, None), ("b", DAY2 / 1e6, 7.0)]
    assert "capacity_chip_s" in {field.name for field in DeltaTable(str(table)).schema().fields}
