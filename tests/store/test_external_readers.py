"""The Delta tables read right in any tool: polars and deltalake sum what the views sum.

A 3-day fleet arrives as three daily runs into one store, with late data: the
runtime events of each day's last 40 minutes arrive with the next day's files
(inside the allowed hour, so they revise windows an earlier run wrote), and
those of one earlier hour arrive a day late (beyond it: the `late` table).
The latest version of every table is then read with `pl.read_delta` and with
`deltalake.DeltaTable(...).to_pyarrow_table()`, and its row count and sums
compared with the DuckDB views `mpg sql` reads; an earlier run's versions
(`--run`) likewise.
"""

from __future__ import annotations

import bisect

import fastavro
import polars as pl
import pytest
from deltalake import DeltaTable

from fleet_goodput import schemas
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.timeutil import micros_of
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.tables import TABLES
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow

HOUR_US = 3600 * 1_000_000
MIDNIGHTS = [START_US + d * 24 * HOUR_US for d in (1, 2)]
ARRIVES_LATE_US = 40 * 60 * 1_000_000  # within the allowed lateness (1 h)
TOO_LATE = [(m - 4 * HOUR_US, m - 3 * HOUR_US) for m in MIDNIGHTS]  # an hour delivered a day late


def _delivery(stream: str, time_us: int) -> int:
    """Which daily run receives an event."""
    day = bisect.bisect_left(MIDNIGHTS, time_us)
    if stream == "runtime" and day < len(MIDNIGHTS):
        if time_us > MIDNIGHTS[day] - ARRIVES_LATE_US or TOO_LATE[day][0] < time_us <= TOO_LATE[day][1]:
            return day + 1
    return day


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("external")
    simulate(root / "fleet", seed=4, hours=72, jobs=40)
    parts = [root / f"day-{d}" for d in range(len(MIDNIGHTS) + 1)]
    for stream in schemas.STREAMS:
        for path in sorted((root / "fleet" / stream).glob("*.avro")):
            with open(path, "rb") as handle:
                records = list(fastavro.reader(handle))
            by_day = [[] for _ in parts]
            for record in records:
                by_day[_delivery(stream, micros_of(record["event_time"]))].append(record)
            for part, chunk in zip(parts, by_day):
                if chunk:
                    write_events(part / stream / path.name, stream, chunk)
    output = root / "out"
    outcomes = [run_batch(str(part), str(output), load_settings(), build_views=False) for part in parts]
    return output, outcomes


def _sums(columns: list[str]) -> list[str]:
    return [c for c in columns if c.endswith("_chip_s") or c in ("records", "requested_chips", "lateness_s")]


def _view_figures(output, name: str, run: int | None = None) -> dict:
    """Row count and sums of the table `name` through the DuckDB views."""
    view, where = (
        ("rejected", f"where {'' if name == 'rejected_pending' else 'not '}provisional")
        if name.startswith("rejected")
        else (name, "")
    )
    with connect(output, run=run) as connection:
        columns = [d[0] for d in connection.execute(f"select * from {view} limit 0").description]
        sums = _sums(columns)
        row = connection.execute(
            f"select count(*), {', '.join(['0', *(f'sum({c})' for c in sums)])} from {view} {where}"
        ).fetchone()
    return {"rows": row[0], **{c: row[2 + i] or 0 for i, c in enumerate(sums)}}


def _frame_figures(frame: pl.DataFrame) -> dict:
    return {"rows": frame.height, **{c: frame[c].sum() for c in _sums(frame.columns)}}


def _assert_same(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for column, value in expected.items():
        assert actual[column] == pytest.approx(value, rel=1e-12), column


def test_late_data_revised_earlier_windows_and_filled_the_late_table(store):
    output, outcomes = store
    assert [o.run.run_id for o in outcomes] == [1, 2, 3]
    assert outcomes[-1].manifest["streams"]["runtime"]["late"] > 0
    path = f"{output}/tables/job_window"
    first, last = (pl.read_delta(path, version=o.run.versions["job_window"]) for o in (outcomes[0], outcomes[-1]))
    revised = first.join(last, on=["job_id", "window_start"], suffix="_now").filter(
        pl.col("productive_chip_s") != pl.col("productive_chip_s_now")
    )
    assert revised.height > 0  # so a table holding every version would count these twice


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_sums_alike_in_polars_deltalake_and_the_views(store, name):
    output, outcomes = store
    path = f"{output}/tables/{name}"
    expected = _view_figures(output, name)
    polars_frame = pl.read_delta(path)
    _assert_same(_frame_figures(polars_frame), expected)
    _assert_same(_frame_figures(pl.from_arrow(DeltaTable(path).to_pyarrow_table())), expected)
    if TABLES[name].key:
        assert polars_frame.select(TABLES[name].key).n_unique() == polars_frame.height
    # As run 1 saw it (`mpg sql --run 1`): the version the runs table records for it.
    earlier = pl.read_delta(path, version=outcomes[0].run.versions[name])
    _assert_same(_frame_figures(earlier), _view_figures(output, name, run=1))


def test_job_goodput_sums_what_a_plain_sum_of_the_table_gives(store):
    output, _ = store
    frame = pl.read_delta(f"{output}/tables/job_window")
    with connect(output) as connection:
        (productive,) = connection.execute("select sum(productive_chip_s) from job_goodput").fetchone()
    assert frame["productive_chip_s"].sum() == pytest.approx(productive, rel=1e-12)
    assert Store(output).latest().versions["job_window"] == DeltaTable(f"{output}/tables/job_window").version()
