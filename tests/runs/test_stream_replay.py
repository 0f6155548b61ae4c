"""A simulated fleet replayed into a watched folder through `mpg stream` ends with
the same latest per-job, per-window numbers as `mpg run` on the same files."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import yaml

from fleet_goodput.core.config import SettingsFile, load_settings
from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.replay import replay
from fleet_goodput.runs.stream_run import run_stream
from fleet_goodput.simulator import simulate
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import telemetry_files

pytestmark = pytest.mark.slow


class StreamPacedFeed:
    """replay()'s clock and sleep for a feed the stream paces, not the wall clock: a slice lands once the
    stream has applied every file landed before it, so each slice is a run of its own however loaded the
    host is (on the wall clock, a slow run took in several slices at once and the stream committed fewer
    runs). `replay_then_stop` is the feeding thread; `committed` is run_stream's progress."""

    def __init__(self, live: Path):
        self.live, self.now, self.applied = live, 0.0, 0
        self.changed = threading.Condition()
        self.stop = threading.Event()

    def committed(self, state, outcome) -> None:
        with self.changed:
            self.applied = state.files
            self.changed.notify_all()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.wait_for_the_stream()
        self.now += seconds

    def wait_for_the_stream(self, timeout_s: float = 120) -> None:
        """Until the stream has applied every file landed so far (a test comparing figures fails otherwise)."""
        with self.changed:
            self.changed.wait_for(lambda: self.applied >= len(telemetry_files(self.live)), timeout_s)

    def replay_then_stop(self, source: Path, slice_s: int) -> threading.Thread:
        def feed():
            try:
                # On this clock replay() sleeps, that is waits for the stream, before each slice after the first.
                replay(source, self.live, 1.0, slice_s, lambda _: None, clock=self.clock, sleep=self.sleep)
                self.wait_for_the_stream()
            finally:
                self.stop.set()  # the stream stops once it has applied everything, or the feed failed

        self.live.mkdir()
        feeder = threading.Thread(target=feed, daemon=True)  # a stream that raised leaves no thread behind
        feeder.start()
        return feeder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    simulate(root / "fleet", seed=2, hours=4, jobs=40)
    settings = load_settings()
    # The fleet lands an hour at a time in the folder the stream polls, each hour once the stream has
    # applied the ones before, so the stream commits a run per hour, as it would live keeping up.
    feed = StreamPacedFeed(root / "live")
    feeder = feed.replay_then_stop(root / "fleet", slice_s=3_600)
    streamed = run_stream(
        str(root / "live"),
        str(root / "streamed"),
        _streaming(root, poll_s=0.1),
        allowed_lateness_s=3600,
        stop=feed.stop,
        progress=feed.committed,
    )
    feeder.join()
    # Read through connect(): goodput.duckdb is not read (build_views=False).
    batch = run_batch(str(root / "fleet"), str(root / "batch"), settings, build_views=False)
    return root, streamed, batch


def _streaming(folder, **section) -> SettingsFile:
    """A settings file with a `runs:` section of its own, as `mpg stream --config` reads it."""
    path = folder / "stream-settings.yaml"
    path.write_text(yaml.safe_dump({"runs": section}))
    return SettingsFile.read(path)


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
    for query in (
        "select cluster, accelerator, window_start, capacity_chip_s from capacity_window order by all",
        "select * exclude (version) from jobs order by all",
    ):
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
    stopped = run_stream(
        str(root / "fleet"), str(tmp_path / "out"), _streaming(tmp_path, poll_s=0.1), stop_after_idle_s=None, stop=stop
    )
    assert stopped.manifest["reconciles"] and stopped.database.exists()
    assert {name: c["accepted"] for name, c in stopped.manifest["streams"].items()} == {
        name: c["accepted"] for name, c in batch.manifest["streams"].items()
    }


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
    waited = run_stream(
        str(root / "fleet"),
        str(tmp_path / "out"),
        _streaming(tmp_path, poll_s=0.1),
        stop_after_idle_s=0.5,
        on_busy=busy.append,
    )
    holder.join()
    assert len(busy) >= 3 and all("in use by another run" in reason for reason in busy)
    assert waited.committed and waited.run.run_id == 1
    assert {name: c["accepted"] for name, c in waited.manifest["streams"].items()} == {
        name: c["accepted"] for name, c in batch.manifest["streams"].items()
    }


def test_a_stream_maintains_its_store_at_most_once_a_minute_and_when_it_stops(runs, tmp_path, monkeypatch):
    """A stream commits a run per poll; the store's maintenance (its vacuum, checkpoints and log clean-up)
    runs at most once every MAINTAIN_EVERY_S and when the stream stops, where it leaves no data file that
    the latest run does not read (a retention of 0 keeps the latest run only)."""

    from fleet_goodput.store import maintenance
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.layout import table_paths

    root, _, _ = runs
    maintained = []
    maintain = maintenance.maintain
    monkeypatch.setattr(
        maintenance, "maintain", lambda store, hours: maintained.append(hours) or maintain(store, hours)
    )
    feed = StreamPacedFeed(tmp_path / "live")
    feeder = feed.replay_then_stop(root / "fleet", slice_s=7_200)  # two hours a run
    streamed = run_stream(
        str(tmp_path / "live"),
        str(tmp_path / "out"),
        _streaming(tmp_path, poll_s=0.1, retention_hours=0),
        stop=feed.stop,
        progress=feed.committed,
    )
    feeder.join()
    assert streamed.run.run_id >= 2 and maintained == [0]  # a stream of a few seconds: once, when it stopped
    store = Store(tmp_path / "out")
    for name, relative in table_paths().items():
        kept = set(store.files(name, streamed.run))
        on_disk = {
            str(path.relative_to(tmp_path / "out"))
            for path in Path(store.path(relative)).rglob("*.parquet")
            if "_delta_log" not in path.parts
        }
        assert on_disk == kept, name


def test_a_stream_follows_the_settings_another_run_stores_meanwhile(runs, tmp_path):
    """Each of a stream's runs takes its settings under the output's lock from the run it continues: a
    daily run that adds an accelerator to the store's catalogue between two of the stream's runs is
    followed (the stream's next run keeps it), not taken for an accelerator removed and refused."""
    from fleet_goodput.configs import DEFAULT_CONFIG
    from fleet_goodput.core.config import read_yaml
    from fleet_goodput.core.options import RunOptions
    from fleet_goodput.runs.batch import run
    from fleet_goodput.simulator import START_US
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.stored_settings import kept_settings
    from fleet_goodput.telemetry.avro_io import split_by_time

    root, _, _ = runs
    hour_us = 3_600_000_000
    first, daily, last = split_by_time(root / "fleet", [START_US + hour_us, START_US + 2 * hour_us], tmp_path / "parts")

    def deliver(part):  # into the watched folder, under names of their own
        for path in telemetry_files(part):
            (tmp_path / "live" / path.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, tmp_path / "live" / path.parent.name / f"{part.name}-{path.name}")

    catalogue = read_yaml(Path(str(DEFAULT_CONFIG)).parent / "accelerators.yaml")
    catalogue["tpu-v9"] = {**catalogue["tpu-v7"], "source": "a future part"}
    (tmp_path / "catalogue.yaml").write_text(yaml.safe_dump(catalogue))
    (tmp_path / "extended.yaml").write_text(f"accelerators: {tmp_path / 'catalogue.yaml'}\n")

    def daily_run_then_more_files(state, _outcome):
        if state.runs == 1:
            run(
                RunOptions(str(daily), str(tmp_path / "out"), config=SettingsFile.read(tmp_path / "extended.yaml")),
                build_views=False,
            )
            deliver(last)

    deliver(first)
    streamed = run_stream(
        str(tmp_path / "live"),
        str(tmp_path / "out"),
        _streaming(tmp_path, poll_s=0.1),
        stop_after_idle_s=0.5,
        progress=daily_run_then_more_files,
    )
    store = Store(tmp_path / "out")
    assert [run.mode for run in store.runs()] == ["stream", "batch", "stream"] and streamed.committed
    assert "tpu-v9" in kept_settings(store, store.latest())["accelerators"]
