"""The output is a store people rely on: no half-written run is ever visible.

`mpg run` and `mpg stream` are killed with SIGKILL at several points of a run
that continues an output. Whatever the moment, readers see either the
previous run's snapshot, unchanged, or the new run whole; and running again
(or restarting the stream) ends equal to a clean run.
"""

from __future__ import annotations

import os
import shutil
import threading
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import table_paths
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time

pytestmark = pytest.mark.slow

HOUR_US = 3600 * 1_000_000


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A 6-hour fleet cut in two, the output after the first part, and a clean run of both parts."""
    root = tmp_path_factory.mktemp("crash")
    simulate(root / "fleet", seed=9, hours=6, jobs=30)
    parts = split_by_time(root / "fleet", [START_US + 3 * HOUR_US], root / "parts")
    # Snapshots are read through connect(): no run here needs goodput.duckdb (build_views=False).
    run_batch(str(parts[0]), str(root / "after-first"), load_settings(), build_views=False)
    shutil.copytree(root / "after-first", root / "clean")
    run_batch(str(parts[1]), str(root / "clean"), load_settings(), build_views=False)
    return root, parts


def _snapshot(output) -> list[tuple]:
    """Every figure of every latest job window and capacity window, and the run id readers see."""
    figures = ", ".join(f"{f}_chip_s" for f in FIGURES)
    with connect(output) as connection:
        rows = connection.execute(
            f"select job_id, window_start, {figures}, round(ideal_chip_s, 6) from job_window order by all"
        ).fetchall()
        rows += connection.execute(
            "select cluster, accelerator, window_start, capacity_chip_s from capacity_window order by all"
        ).fetchall()
    return rows


def _mpg(*args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fleet_goodput.cli", *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _kill_when(process: subprocess.Popen, ready, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert process.poll() is None, f"finished before the kill point: {process.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.002)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def _staging_started(output: Path):
    def started() -> bool:
        try:
            return any((output / "_staging").glob("*/*"))
        except FileNotFoundError:  # the run clears what killed runs staged as it starts
            return False

    return started


def _first_table_committed(output: Path):
    # The first table run 2 commits is job_window, one version past what run 1 left.
    version = Store(output).latest().versions["job_window"] + 1
    return lambda: (output / "tables" / "job_window" / "_delta_log" / f"{version:020d}.json").exists()


def _runs_committed(output: Path):
    return lambda: (output / "runs" / "_delta_log" / f"{1:020d}.json").exists()


@pytest.mark.parametrize(
    "kill_point",
    [_staging_started, _first_table_committed, _runs_committed],
    ids=["while-computing", "between-table-commits", "after-the-run-commit"],
)
def test_a_killed_run_leaves_a_whole_snapshot_and_its_rerun_equals_a_clean_run(fleet, tmp_path, kill_point):
    root, parts = fleet
    output = tmp_path / "out"
    shutil.copytree(root / "after-first", output)
    before, clean = _snapshot(root / "after-first"), _snapshot(root / "clean")

    ready = kill_point(output)
    _kill_when(_mpg("run", "--input", parts[1], "--output", output), ready)

    seen = _snapshot(output)
    latest = Store(output).latest()
    assert seen == (clean if latest.run_id == 2 else before)
    # Reading undid what the killed run left: the tables' latest versions, which polars or Spark
    # read, are the committed run's again.
    for name, relative in table_paths().items():
        table = DeltaTable(str(output / relative))
        assert set(table.file_uris()) == set(
            DeltaTable(str(output / relative), version=latest.versions[name]).file_uris()
        )
    rerun = run_batch(str(parts[1]), str(output), load_settings(), build_views=False)
    assert rerun.run.run_id == 2 and _snapshot(output) == clean


def test_a_second_run_on_a_busy_output_fails_with_the_retry_code_and_a_stream_waits(fleet, tmp_path, capsys):
    """While a run holds the output, a second `mpg run` exits 75 (retry later) and changes nothing; a
    stream says so and waits, then applies its files once the output is free (it never exits for it)."""
    root, parts = fleet
    output = tmp_path / "out"
    shutil.copytree(root / "after-first", output)
    # What a run in progress holds: an flock on the output's lock file, which a second
    # open of the file cannot take, in this process or another.
    with Store(output).lock():
        assert main(["run", "--input", str(parts[1]), "--output", str(output)]) == 75  # EX_TEMPFAIL: retry later
    assert Store(output).latest().run_id == 1 and _snapshot(output) == _snapshot(root / "after-first")
    held = threading.Event()

    def a_run_in_progress():  # holds the output for 1.5 s, as a daily run would for its length
        with Store(output).lock():
            held.set()
            time.sleep(1.5)

    holder = threading.Thread(target=a_run_in_progress)
    holder.start()
    held.wait(10)
    assert main(["stream", "--input", str(parts[1]), "--output", str(output), "--stop_after_idle_s", "1"]) == 0
    holder.join()
    err = capsys.readouterr().err
    assert err.count("is in use by another run (pid") == 2, err
    assert "the stream waits, and tries again" in err
    assert Store(output).latest().run_id == 2


def test_a_killed_stream_resumes_and_ends_equal_to_mpg_run(fleet, tmp_path):
    root, parts = fleet
    live, output = tmp_path / "live", tmp_path / "out"
    shutil.copytree(parts[0], live)
    stream = _mpg("stream", "--input", live, "--output", output)
    _kill_when(stream, lambda: (output / "runs" / "_delta_log" / f"{0:020d}.json").exists())
    assert Store(output).latest().run_id == 1
    for path in parts[1].rglob("*.avro"):  # the rest arrives while it is down
        target = live / path.relative_to(parts[1]).parent / f"later-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    # The restart need not be killed: it runs here, as `mpg stream` (no second interpreter to start).
    assert main(["stream", "--input", str(live), "--output", str(output), "--stop_after_idle_s", "1"]) == 0
    assert _snapshot(output) == _snapshot(root / "clean")
