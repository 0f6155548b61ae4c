"""A run whose keys are split over processes (fleet_goodput/shards.py) is one run with one process's results.

One simulated fleet is run once in one process; again as two runs (the
second continuing the first's saved state) in two processes each; and again
as one run in chunks of four hours, each shared by two processes. The
first of the two runs, and the first chunk, end with a runtime event of a job
never submitted: it must not move the as-of time, which every shard reads
from the scheduler's clock, and it waits (counted) until a run's as-of time
reaches it, when its timeline rejects it once. The input also holds a file
that cannot be read, whose rejection must be counted once, not once a shard.
"""

from __future__ import annotations

import pytest

from fleet_goodput.avro_io import split_by_time, write_events
from fleet_goodput.batch import run_batch
from fleet_goodput.config import load_settings
from fleet_goodput.shards import start_process_server
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store import Store
from fleet_goodput.timeline import FIGURES
from fleet_goodput.views import connect

pytestmark = pytest.mark.slow  # each run starts two processes: scheduled first (tests/conftest.py)

HOUR_US = 3600 * 1_000_000
CUT_US = START_US + 3 * HOUR_US + 1_000_123_456  # not on a window edge, where capacity events fall


def _passes(progress: list[str]) -> list[str]:
    """The lines that say how the computing went (not the run's other stages, nor the heartbeat of a slow host)."""
    return [line for line in progress if line.startswith(("  ", "Decoded ")) and not line.startswith("  still ")]


def _rows(output, query: str) -> list[tuple]:
    with connect(output) as connection:
        return sorted(connection.execute(query).fetchall(), key=repr)


def test_a_run_split_over_processes_equals_one_process(tmp_path):
    simulate(tmp_path / "fleet", seed=7, hours=6, jobs=12)
    # The first part's latest event: a job nobody submitted, which its timeline rejects once reached.
    # So is the first four-hour chunk's: the same job's, just before the chunk ends.
    write_events(tmp_path / "fleet" / "runtime" / "stray.avro", "runtime", [
        {"event_id": f"stray-{number}", "event_time": time_us, "job_id": "job-never-submitted", "type": "STEP_START",
         "step": 1, "attempt": None} for number, time_us in enumerate([CUT_US, START_US + 4 * HOUR_US - 1])])
    first, second = split_by_time(tmp_path / "fleet", [CUT_US], tmp_path / "parts")
    for folder in (tmp_path / "fleet", first):
        (folder / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")
    settings = load_settings()
    # As `mpg run` does before importing Beam; the sharded runs below then fork from this server.
    assert start_process_server(str(first), workers=2)
    whole = run_batch(str(tmp_path / "fleet"), str(tmp_path / "whole"), settings, build_views=False, workers=1)

    progress = []
    started = run_batch(str(first), str(tmp_path / "split"), settings, build_views=False, workers=2,
                        progress=progress.append)
    assert progress[0].startswith("Listed 11 input file(s), ") and progress[-1].startswith("Committing run 1 to ")
    assert progress[1].startswith("Decoding and computing 11 new file(s), ") and \
        progress[1].endswith(" in 2 processes, each a share of the keys")
    assert [line.split(":")[0] for line in _passes(progress)] == ["  2 processes, each a share of the keys"]
    assert started.manifest["as_of_us"] < CUT_US  # the stray event does not move the as-of, and waits
    assert started.manifest["streams"]["runtime"]["waiting"] >= 1 and started.manifest["reconciles"]
    last = run_batch(str(second), str(tmp_path / "split"), settings, build_views=False, workers=2)
    assert last.run.run_id == 2 and last.manifest["as_of_us"] == whole.manifest["as_of_us"]

    progress = []
    chunked = run_batch(str(tmp_path / "fleet"), str(tmp_path / "chunked"), settings, build_views=False,
                        chunk_hours=4, workers=2, progress=progress.append)
    progress = _passes(progress)
    assert progress[0].startswith("Decoded ") and progress[0].endswith("(2 processes)")
    assert [line.split(" (")[0] for line in progress[1:]] == ["  chunk 1/2", "  chunk 2/2"]
    assert all(" in 2 processes in " in line for line in progress[1:])
    assert chunked.run.run_id == 1 and chunked.manifest["as_of_us"] == whole.manifest["as_of_us"]

    for output in ("split", "chunked"):
        _assert_same_tables(tmp_path / output, tmp_path / "whole")
        assert _rows(tmp_path / output, "select count(*) from rejected where source like '%damaged.avro'") == [(1,)]


def _assert_same_tables(output, expected_output) -> None:
    assert Store(output).latest().manifest["streams"] == Store(expected_output).latest().manifest["streams"]
    # Ideal chip-seconds are a ratio of FLOPs, shared between windows in float: a chunked or
    # continued run may add a window's shares in another order (as in test_split_invariance.py).
    ideal = "select job_id, window_start, coalesce(ideal_chip_s, -1) from job_window"
    expected_ideal = {(job, window): value for job, window, value in _rows(expected_output, ideal)}
    actual_ideal = {(job, window): value for job, window, value in _rows(output, ideal)}
    assert actual_ideal == pytest.approx(expected_ideal, rel=1e-9)
    figures = ", ".join(f"{f}_chip_s" for f in FIGURES)
    for query in (f"select job_id, window_start, {figures} from job_window",
                  "select * exclude (version, date) from jobs",
                  "select cluster, accelerator, window_start, capacity_chip_s from capacity_window",
                  # The damaged file's path differs (fleet/ or parts/part-00/), not its name.
                  "select stream, event_id, reason, regexp_extract(source, '[^/]*$'), records, provisional "
                  "from rejected"):
        expected = _rows(expected_output, query)
        assert expected and _rows(output, query) == expected, (output, query)


def test_the_process_server_starts_early_only_for_a_run_that_will_shard(tmp_path):
    simulate(tmp_path / "fleet", seed=3, hours=1, jobs=2)  # far below 8 MiB a process
    fleet = str(tmp_path / "fleet")
    assert not start_process_server(fleet, workers=None)
    assert not start_process_server(fleet, workers=1)
    assert not start_process_server(str(tmp_path / "missing"), workers=2)
    assert not start_process_server("gs://bucket/fleet", workers=2)
    with pytest.raises(ValueError, match="--chunk_hours decodes the input on this machine"):
        run_batch("gs://bucket/fleet", str(tmp_path / "out"), load_settings(), chunk_hours=24)
