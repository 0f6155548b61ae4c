"""A store written in the previous saved-state format opens after an upgrade: `mpg check --upgrade`.

tests/data/store-state-format-3/store was written by fleet-goodput at commit 0853b9b (state format 3,
capacity kept per window in a `capacity_window` table) over tests/data/store-flat-layout/fleet, as of
02:30 with its frontier at 01:30 (tests/data/README.md; write.sh there writes it again). This release
refuses to continue it until it is upgraded, upgrades it in place as one committed run, and then
continues it to the figures one run of today's code gives over the same files.

The capacity expected is computed by hand from the fleet's CAPACITY events (its scheduler files):
every cluster has 32 chips from 00:00, but us-central1-b200 drops to 24 at 01:22:52 and is back to 32
at 01:35:22, and asia-northeast1-mi300x drops to 28 at 01:02:49 and is back to 32 at 01:09:51.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.state_formats import window_as_stretches
from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.runs.upgrade import upgrade_store
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.views import connect

WRITTEN_BEFORE = Path(__file__).parents[1] / "data" / "store-state-format-3" / "store"
FLEET = Path(__file__).parents[1] / "data" / "store-flat-layout" / "fleet"
CLUSTERS = ("asia-northeast1-mi300x", "europe-west4-a100", "us-central1-b200", "us-west4-tpu-v4")
FULL_HOUR = 32 * 3600
HALF_HOUR = 32 * 1800
B200_01H = 32 * 1372 + 24 * 750 + 32 * 1478  # 01:00-01:22:52 at 32, to 01:35:22 at 24, to 02:00 at 32
MI300X_01H = 32 * 169 + 28 * 422 + 32 * 3009  # 01:00-01:02:49 at 32, to 01:09:51 at 28, to 02:00 at 32
# Columns of the jobs table that format 3 wrote too; those added since read as null in its rows.
JOB_COLUMNS = (
    "job_id, status, submit_time, end_time, requested_chips, allocations, disruptions, checkpoint_saves, "
    "profiler_samples, implicitly_closed_spans"
)


def _capacity(output) -> dict:
    with connect(output) as connection:
        rows = connection.execute(
            "select cluster, hour(window_start), capacity_chip_s, online_s from capacity_window"
        ).fetchall()
    return {(cluster, hour): (chip_s, online_s) for cluster, hour, chip_s, online_s in rows}


def _rows(output, query: str) -> list:
    with connect(output) as connection:
        return sorted(connection.execute(query).fetchall())


def _same(actual: list, expected: list) -> None:
    """Row by row equal; floats to the last bits, as sums in another order round them."""
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert len(got) == len(want)
        for value, wanted in zip(got, want):
            assert value == (pytest.approx(wanted, rel=1e-12) if isinstance(wanted, float) else wanted)


@pytest.fixture
def old_store(tmp_path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(WRITTEN_BEFORE, store)
    return store


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory):
    """The fixture upgraded, and a store today's code wrote over the same files as of the same time."""
    root = tmp_path_factory.mktemp("upgrade")
    shutil.copytree(WRITTEN_BEFORE, root / "store")
    done = upgrade_store(str(root / "store"))
    run_batch(str(FLEET), str(root / "fresh"), load_settings(), parse_time_us("2026-01-01T02:30:00Z"))
    return root, done


def test_the_fixture_is_what_it_claims():
    runs = DeltaTable(str(WRITTEN_BEFORE / "runs")).to_pyarrow_table().to_pylist()
    assert sorted((run["run_id"], run["state_format"]) for run in runs) == [(1, 3), (2, 3)]
    assert (WRITTEN_BEFORE / "tables" / "capacity_window").is_dir()
    assert not (WRITTEN_BEFORE / "tables" / "capacity_level").exists()


def test_a_run_refuses_it_and_names_the_upgrade(old_store, capsys):
    assert main(["run", "--input", str(FLEET), "--output", str(old_store), "-q"]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert "format 3" in message and f"mpg check --upgrade --output {old_store}" in message
    assert len(Store(old_store).runs()) == 2  # nothing committed


def test_the_upgrade_is_one_committed_run(old_store, capsys):
    assert main(["check", "--output", str(old_store), "--upgrade"]) == 0
    assert "upgraded from state format 3 to 4" in capsys.readouterr().out
    runs = Store(old_store).runs()
    assert [(run.run_id, run.mode, run.state_format) for run in runs] == [
        (1, "batch", 3),
        (2, "batch", 3),
        (3, "upgrade", 4),
    ]
    assert (runs[2].as_of_us, runs[2].frontier_us) == (runs[1].as_of_us, runs[1].frontier_us)
    assert runs[2].manifest["upgraded_from_format"] == 3
    assert main(["check", "--output", str(old_store), "--upgrade"]) == 0  # again: nothing to do
    assert "nothing to upgrade" in capsys.readouterr().out
    assert len(Store(old_store).runs()) == 3
    assert main(["check", "--output", str(old_store)]) == 0


def test_capacity_keeps_every_window_it_held(upgraded):
    root, done = upgraded
    expected = {(cluster, 0): (FULL_HOUR, 3600.0) for cluster in CLUSTERS}
    expected |= {(cluster, 1): (FULL_HOUR, 3600.0) for cluster in CLUSTERS}
    expected |= {(cluster, 2): (HALF_HOUR, 1800.0) for cluster in CLUSTERS}  # as of 02:30
    expected[("us-central1-b200", 1)] = (B200_01H, 3600.0)
    expected[("asia-northeast1-mi300x", 1)] = (MI300X_01H, 3600.0)
    assert _capacity(root / "store") == expected
    assert _capacity(root / "fresh") == expected


def test_its_figures_are_those_of_a_fresh_store(upgraded):
    root, _ = upgraded
    query = "select * exclude (version) from job_window"
    _same(_rows(root / "store", query), _rows(root / "fresh", query))
    query = f"select {JOB_COLUMNS} from jobs"
    _same(_rows(root / "store", query), _rows(root / "fresh", query))


def test_continued_it_gives_what_one_run_gives(upgraded):
    root, _ = upgraded
    as_of_us = parse_time_us("2026-01-01T03:30:00Z")
    continued = run_batch(str(FLEET), str(root / "store"), load_settings(), as_of_us, confirm_as_of=True)
    fresh = run_batch(str(FLEET), str(root / "later"), load_settings(), as_of_us, confirm_as_of=True)
    assert continued.committed and continued.run.run_id == 4
    assert continued.manifest["as_of_us"] == fresh.manifest["as_of_us"]
    expected = {(cluster, hour): (FULL_HOUR, 3600.0) for cluster in CLUSTERS for hour in (0, 1, 2)}
    expected |= {(cluster, 3): (HALF_HOUR, 1800.0) for cluster in CLUSTERS}
    expected[("us-central1-b200", 1)] = (B200_01H, 3600.0)
    expected[("asia-northeast1-mi300x", 1)] = (MI300X_01H, 3600.0)
    assert _capacity(root / "store") == expected == _capacity(root / "later")
    for query in ("select * exclude (version) from job_window", f"select {JOB_COLUMNS} from jobs"):
        _same(_rows(root / "store", query), _rows(root / "later", query))


def test_what_format_3_never_kept_reads_as_not_known(upgraded):
    """A job with events applied before the upgrade: its interruptions before it are not known, so
    none are listed (null), where a fresh store lists them ([] for none)."""
    root, _ = upgraded
    query = "select job_id, interruptions from jobs where job_id = 'job-00005'"
    assert _rows(root / "store", query) == [("job-00005", None)]
    assert _rows(root / "fresh", query) == [("job-00005", [])]


def test_a_store_of_an_older_format_names_the_release_that_continues_it(old_store):
    """Format 2 counted disruptions and preserved steps otherwise: its state cannot be brought forward."""
    from fleet_goodput.runs.upgrade import refuse_other_format

    with pytest.raises(StoreError, match="fleet-goodput at commit 2a074fd, the last to write format 2"):
        refuse_other_format(2, str(old_store))
    with pytest.raises(StoreError, match="written by a newer fleet-goodput"):
        refuse_other_format(5, str(old_store))


@pytest.mark.parametrize(
    ("start_us", "end_us", "chip_us", "expected"),
    [
        pytest.param(0, 10, 320, [(0, 10, 32)], id="one-level"),
        pytest.param(0, 10, 0, [(0, 10, 0)], id="no-chips"),
        # 10 µs holding 32 chips for 3 µs and 28 for 7 µs: 292 chip-µs, a mean of 29.2
        pytest.param(0, 10, 292, [(0, 2, 30), (2, 10, 29)], id="two-levels"),
        pytest.param(100, 103, 7, [(100, 101, 3), (101, 103, 2)], id="offset"),
    ],
)
def test_a_window_becomes_stretches_of_its_exact_chip_time(start_us, end_us, chip_us, expected):
    stretches = window_as_stretches(start_us, end_us, chip_us)
    assert stretches == expected
    assert sum((end - start) * chips for start, end, chips in stretches) == chip_us
