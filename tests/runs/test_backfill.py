"""A run however it is computed, in chunks of event time or in Beam's worker processes, has one pass's results.

One simulated fleet is run once in one pipeline; again as two runs (the
second continuing the first's saved state); again as one run in chunks of
four hours (`--chunk_hours`: one pipeline a chunk, each continuing the one
before); and again in two of Beam's worker processes (`--workers 2`). The
first of the two runs, and the first chunk, end with a runtime event of a job
never submitted: the as-of time follows what the files state they observed
(the first part, up to its cut), and the event's timeline rejects it once. The input also holds a file that
cannot be read, whose rejection must be counted once, not once a chunk.
"""

from __future__ import annotations

import pytest

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.beam_flags import worker_flags
from fleet_goodput.runs.compute import event_time_chunks
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time, write_events
from fleet_goodput.telemetry.decode import TimeSlice

HOUR_US = 3600 * 1_000_000
CUT_US = START_US + 3 * HOUR_US + 1_000_123_456  # not on a window edge, where capacity events fall


def _rows(output, query: str) -> list[tuple]:
    with connect(output) as connection:
        return sorted(connection.execute(query).fetchall(), key=repr)


@pytest.mark.slow  # five runs, one of them in Beam's worker processes
def test_a_run_in_chunks_or_in_worker_processes_equals_one_pipeline(tmp_path):
    simulate(tmp_path / "fleet", seed=7, hours=6, jobs=12)
    # The first part's latest event: a job nobody submitted, which its timeline rejects once reached.
    # So is the first four-hour chunk's: the same job's, just before the chunk ends.
    write_events(
        tmp_path / "fleet" / "runtime" / "stray.avro",
        "runtime",
        [
            {
                "event_id": f"stray-{number}",
                "event_time": time_us,
                "job_id": "job-never-submitted",
                "type": "STEP_START",
                "step": 1,
                "attempt": None,
            }
            for number, time_us in enumerate([CUT_US, START_US + 4 * HOUR_US - 1])
        ],
    )
    first, second = split_by_time(tmp_path / "fleet", [CUT_US], tmp_path / "parts")
    for folder in (tmp_path / "fleet", first):
        (folder / "runtime" / "damaged.avro").write_bytes(b"Obj\x01 not really avro")
    settings = load_settings()
    whole = run_batch(str(tmp_path / "fleet"), str(tmp_path / "whole"), settings, build_views=False)

    started = run_batch(str(first), str(tmp_path / "split"), settings, build_views=False)
    # The first part states it observed up to the cut: the as-of time is the cut, whatever its latest
    # scheduler event, and the stray event there is reached (its rejection provisional, inside the lateness).
    assert started.manifest["as_of_us"] == CUT_US and started.manifest["clock"]["basis"] == "stated"
    assert ["runtime", "rejected"] in [pair for pair, _ in started.manifest["pending_counts"]]
    assert started.manifest["reconciles"]
    last = run_batch(str(second), str(tmp_path / "split"), settings, build_views=False)
    assert last.run.run_id == 2 and last.manifest["as_of_us"] == whole.manifest["as_of_us"]

    with pytest.raises(ValueError, match=r"--chunk_hours must be at least 1 \(got 0\)"):
        run_batch(str(tmp_path / "fleet"), str(tmp_path / "chunked"), settings, chunk_hours=0)
    progress = []
    chunked = run_batch(
        str(tmp_path / "fleet"),
        str(tmp_path / "chunked"),
        settings,
        build_views=False,
        chunk_hours=4,
        progress=progress.append,
    )
    # Six hours from midnight: a chunk of 00:00-04:00 and one from 04:00 on.
    chunks = [line.split(":")[0] for line in progress if line.startswith("  chunk ")]
    assert chunks == ["  chunk 1/2 (2026-01-01T00", "  chunk 2/2 (2026-01-01T04"]
    assert chunked.run.run_id == 1 and chunked.manifest["as_of_us"] == whole.manifest["as_of_us"]

    in_processes = run_batch(
        str(tmp_path / "fleet"), str(tmp_path / "processes"), settings, build_views=False, beam_args=worker_flags(2, [])
    )
    assert in_processes.manifest["as_of_us"] == whole.manifest["as_of_us"]

    for output in ("split", "chunked", "processes"):
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
    for query in (
        f"select job_id, window_start, {figures} from job_window",
        "select * exclude (version, date) from jobs",
        "select cluster, accelerator, window_start, capacity_chip_s from capacity_window",
        # The damaged file's path differs (fleet/ or parts/part-00/), not its name.
        "select stream, event_id, reason, regexp_extract(source, '[^/]*$'), records, provisional from rejected",
    ):
        expected = _rows(expected_output, query)
        assert expected and _rows(output, query) == expected, (output, query)


DAY_US = 24 * HOUR_US


def test_a_backfill_is_cut_at_midnights_from_the_scheduler_clock():
    """Scheduler times from 05:00 on day 0 to 01:00 on day 2, in one-day chunks: three chunks, beginning at
    midnight of days 0, 1 and 2; the first holds everything before day 1, the last everything from day 2."""
    new = [
        (START_US + 5 * HOUR_US, "job-a"),
        (START_US + DAY_US + 7 * HOUR_US, "job-b"),
        (START_US + 2 * DAY_US + HOUR_US, "job-c"),
    ]
    assert event_time_chunks(new, new, DAY_US) == [
        (START_US, TimeSlice(None, START_US + DAY_US, first=True)),
        (START_US + DAY_US, TimeSlice(START_US + DAY_US, START_US + 2 * DAY_US, first=False)),
        (START_US + 2 * DAY_US, TimeSlice(START_US + 2 * DAY_US, None, first=False)),
    ]


def test_a_backfill_chunk_edge_leaves_out_a_clock_reset_into_the_past():
    """Two scheduler events from 2001 (a clock reset), then the fleet from 05:00 on day 0: the chunks begin at the
    fleet's midnight, not in 2001; the 2001 events fall in the first chunk, which is open below."""
    reset = [(978_307_200_000_000 + n, "job-reset") for n in range(2)]  # 2001-01-01
    new = [*reset, (START_US + 5 * HOUR_US, "job-a"), (START_US + 20 * HOUR_US, "job-b")]
    assert event_time_chunks(new, new, DAY_US) == [(START_US, TimeSlice())]
    assert event_time_chunks([], [], DAY_US) == [(None, TimeSlice())]  # no scheduler event: one chunk of all


def test_a_backfill_makes_no_chunk_for_a_stretch_without_scheduler_events():
    """Eleven jobs on day 0, more on day 1 (seen in the files, not among the clock's kept times), then nothing
    until ten years later: three chunks, the second reaching over the empty decade (issue 27: cost follows events)."""
    later = START_US + 3650 * DAY_US
    new = [*((START_US + 5 * HOUR_US + n, f"job-{n}") for n in range(11)), (later + HOUR_US, "job-late")]
    occupied = {START_US, START_US + DAY_US, later}
    assert event_time_chunks(new, new, DAY_US, occupied) == [
        (START_US, TimeSlice(None, START_US + DAY_US, first=True)),
        (START_US + DAY_US, TimeSlice(START_US + DAY_US, later, first=False)),
        (later, TimeSlice(later, None, first=False)),
    ]


def test_workers_are_beams_worker_processes():
    assert worker_flags(None, []) == [] and worker_flags(1, []) == []
    assert worker_flags(3, ["--runner=DirectRunner"]) == [
        "--direct_num_workers=3",
        "--direct_running_mode=multi_processing",
    ]
    with pytest.raises(ValueError, match="--workers must be at least 1"):
        worker_flags(0, [])
    with pytest.raises(ValueError, match="on Dataflow, set --max_num_workers"):
        worker_flags(2, ["--runner=DataflowRunner"])


def test_mpg_run_refuses_workers_on_another_runner_before_anything(tmp_path, capsys):
    from fleet_goodput import exits
    from fleet_goodput.cli import main

    code = main(
        [
            "run",
            "--input",
            str(tmp_path / "fleet"),
            "--output",
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--runner=DataflowRunner",
        ]
    )
    captured = capsys.readouterr()
    assert code == exits.USAGE and not (tmp_path / "out").exists()
    assert captured.err.strip() == (
        "mpg run: --workers sets how many processes Beam's local runner computes in; "
        "another runner spreads the work itself (on Dataflow, set --max_num_workers)"
    )
