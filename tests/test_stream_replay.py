"""A simulated fleet replayed into a watched folder through `mpg stream` ends with
the same latest per-job, per-window numbers as `mpg run` on the same files."""

from __future__ import annotations

import threading

import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.timeline import FIGURES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.replay import replay
from fleet_goodput.runs.stream_run import run_stream
from fleet_goodput.simulator import simulate
from fleet_goodput.store.views import connect

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    simulate(root / "fleet", seed=2, hours=4, jobs=40)
    settings = load_settings()
    # Files land over ~4 s, a slice every 0.08 s, while the stream polls every
    # 0.1 s, so it commits several runs (a continued run takes under a second:
    # 6 runs, measured), each over whatever slices had landed, as it would live.
    feeder = threading.Thread(target=replay, args=(root / "fleet", root / "live", 3_600.0, 300, lambda _: None))
    (root / "live").mkdir()
    feeder.start()
    streamed = run_stream(str(root / "live"), str(root / "streamed"), settings,
                          RunSettings(poll_s=0.1, allowed_lateness_s=3600), stop_after_idle_s=1)
    feeder.join()
    # Read through connect(): goodput.duckdb is not read (build_views=False).
    batch = run_batch(str(root / "fleet"), str(root / "batch"), settings, build_views=False)
    return root, streamed, batch


def _rows(output, query: str) -> list[tuple]:
    with connect(output) as connection:
        return connection.execute(query).fetchall()


def test_the_stream_committed_several_runs(runs):
    _, streamed, _ = runs
    assert streamed.run.run_id >= 3


def test_streamed_latest_job_windows_equal_the_batch_run(runs):
    root, _, _ = runs
    figures = ", ".join(f"{f}_chip_s" for f in FIGURES)
    query = f"select job_id, window_start, {figures}, round(ideal_chip_s, 6) from job_window order by all"
    assert _rows(root / "streamed", query) == _rows(root / "batch", query)


def test_streamed_capacity_and_jobs_equal_the_batch_run(runs):
    root, _, _ = runs
    for query in ("select cluster, accelerator, window_start, capacity_chip_s from capacity_window order by all",
                  "select * exclude (version) from jobs order by all"):
        assert _rows(root / "streamed", query) == _rows(root / "batch", query)


def test_stream_manifest_reconciles_with_nothing_late(runs):
    _, streamed, batch = runs
    assert streamed.manifest["reconciles"] and streamed.manifest["as_of_us"] == batch.manifest["as_of_us"]
    for name, counts in streamed.manifest["streams"].items():
        assert counts["late"] == 0
        assert counts["accepted"] == batch.manifest["streams"][name]["accepted"]


def test_a_stop_request_ends_the_stream_cleanly(runs, tmp_path):
    """What the CLI's SIGINT/SIGTERM handler does: the stream finishes the run in hand and stops."""
    root, _, batch = runs
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()  # the stream's first run over the fleet is in hand by then
    stopped = run_stream(str(root / "fleet"), str(tmp_path / "out"), load_settings(),
                         RunSettings(poll_s=0.1), stop_after_idle_s=None, stop=stop)
    assert stopped.manifest["reconciles"] and stopped.database.exists()
    assert {name: c["accepted"] for name, c in stopped.manifest["streams"].items()} == \
        {name: c["accepted"] for name, c in batch.manifest["streams"].items()}


def test_a_stream_waits_while_another_run_holds_the_output(runs, tmp_path):
    """A daily `mpg run` (here: this test holding the output's lock, as a run does) and a stream on one
    output: the stream does not stop, it waits, says so, and applies the files once the lock is free."""
    from fleet_goodput.store.delta_store import Store

    root, _, batch = runs
    busy, release = [], threading.Event()
    holder_ready = threading.Event()

    def hold_the_output():
        with Store(tmp_path / "out").lock():
            holder_ready.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_output)
    holder.start()
    holder_ready.wait(10)
    threading.Timer(1.0, release.set).start()  # the "daily run" ends after a few of the stream's polls
    waited = run_stream(str(root / "fleet"), str(tmp_path / "out"), load_settings(), RunSettings(poll_s=0.1),
                        stop_after_idle_s=0.5, on_busy=busy.append)
    holder.join()
    assert len(busy) >= 3 and all("in use by another run" in reason for reason in busy)
    assert waited.committed and waited.run.run_id == 1
    assert {name: c["accepted"] for name, c in waited.manifest["streams"].items()} == \
        {name: c["accepted"] for name, c in batch.manifest["streams"].items()}


def test_a_stream_maintains_its_store_at_most_once_a_minute_and_when_it_stops(runs, tmp_path, monkeypatch):
    """A stream commits a run per poll; the store's maintenance (its vacuum, checkpoints and log clean-up)
    runs at most once every MAINTAIN_EVERY_S and when the stream stops, where it leaves no data file that
    the latest run does not read (a retention of 0 keeps the latest run only)."""
    from pathlib import Path

    from fleet_goodput.store.delta_store import Store, table_paths

    root, _, _ = runs
    maintained = []
    maintain = Store.maintain
    monkeypatch.setattr(Store, "maintain", lambda store, hours: maintained.append(hours) or maintain(store, hours))
    feeder = threading.Thread(target=replay, args=(root / "fleet", tmp_path / "live", 7_200.0, 600, lambda _: None))
    (tmp_path / "live").mkdir()
    feeder.start()
    streamed = run_stream(str(tmp_path / "live"), str(tmp_path / "out"), load_settings(),
                          RunSettings(poll_s=0.1, retention_hours=0), stop_after_idle_s=1)
    feeder.join()
    assert streamed.run.run_id >= 2 and maintained == [0]  # a stream of a few seconds: once, when it stopped
    store = Store(tmp_path / "out")
    for name, relative in table_paths().items():
        kept = set(store.files(name, streamed.run))
        on_disk = {str(path.relative_to(tmp_path / "out")) for path in Path(store.path(relative)).rglob("*.parquet")
                   if "_delta_log" not in path.parts}
        assert on_disk == kept, name
