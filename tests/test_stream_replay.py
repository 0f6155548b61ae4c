"""A simulated fleet replayed into a watched folder through `mpg stream` ends with
the same latest per-job, per-window numbers as `mpg run` on the same files."""

from __future__ import annotations

import threading

import duckdb
import pytest

from fleet_goodput.batch import run_batch
from fleet_goodput.config import load_settings
from fleet_goodput.replay import replay
from fleet_goodput.simulator import simulate
from fleet_goodput.stream_run import OutputInUse, run_stream
from fleet_goodput.stream_settings import StreamSettings
from fleet_goodput.timeline import FIGURES
from transforms.watch import request_stop

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    simulate(root / "fleet", seed=2, hours=4, jobs=40)
    settings = load_settings()
    # Files land over ~1.5 s while the stream polls every 0.1 s, so the
    # watermark advances in many steps, as it would live.
    feeder = threading.Thread(target=replay, args=(root / "fleet", root / "live", 10_000.0, 300, lambda _: None))
    (root / "live").mkdir()
    feeder.start()
    streamed = run_stream(str(root / "live"), str(root / "streamed"), settings,
                          StreamSettings(poll_s=0.1, allowed_lateness_s=3600, watermark_lag_s=300), stop_after_idle_s=1.5)
    feeder.join()
    batch = run_batch(str(root / "fleet"), str(root / "batch"), settings)
    return root, streamed, batch


def _latest(output, table, key):
    return f"""(select * from read_parquet('{output}/tables/{table}/*/*.parquet')
                qualify row_number() over (partition by {key} order by version desc) = 1)"""


def test_streamed_latest_job_windows_equal_the_batch_run(runs):
    root, _, _ = runs
    checks = " or ".join(f"s.{f}_chip_s is distinct from b.{f}_chip_s" for f in FIGURES) + " or abs(s.ideal_chip_s - b.ideal_chip_s) > 1e-9"
    differing = duckdb.sql(f"""
        select job_id, window_start from {_latest(root / 'streamed', 'job_window', 'job_id, window_start')} s
        full outer join read_parquet('{root}/batch/tables/job_window/*/*.parquet') b using (job_id, window_start)
        where {checks}""").fetchall()
    assert differing == []


def test_streamed_capacity_and_jobs_equal_the_batch_run(runs):
    root, _, _ = runs
    assert duckdb.sql(f"""
        select * from {_latest(root / 'streamed', 'capacity_window', 'cluster, accelerator, window_start')} s
        full outer join read_parquet('{root}/batch/tables/capacity_window/*/*.parquet') b
        using (cluster, accelerator, window_start) where s.capacity_chip_s is distinct from b.capacity_chip_s""").fetchall() == []
    assert duckdb.sql(f"""
        select job_id from {_latest(root / 'streamed', 'jobs', 'job_id')} s
        full outer join read_parquet('{root}/batch/tables/jobs/*/*.parquet') b using (job_id)
        where s.status is distinct from b.status or s.end_time is distinct from b.end_time""").fetchall() == []


def test_stream_manifest_reconciles_with_nothing_late(runs):
    _, streamed, batch = runs
    assert streamed.manifest["reconciles"] and streamed.manifest["as_of_us"] == batch.manifest["as_of_us"]
    for name, counts in streamed.manifest["streams"].items():
        assert counts["late"] == 0
        assert counts["accepted"] == batch.manifest["streams"][name]["accepted"]


def test_a_stream_will_not_write_over_earlier_results(runs):
    root, _, _ = runs
    with pytest.raises(OutputInUse, match="--replace"):
        run_stream(str(root / "live"), str(root / "streamed"), load_settings(), StreamSettings(), stop_after_idle_s=0.1)


def test_a_stop_request_ends_the_stream_cleanly_with_every_result_flushed(runs, tmp_path):
    """What the CLI's SIGINT/SIGTERM handler does: the source punctuates every
    key, the pipeline drains, and the manifest and views are written."""
    root, _, batch = runs
    threading.Timer(2.0, request_stop).start()
    stopped = run_stream(str(root / "fleet"), str(tmp_path / "out"), load_settings(),
                         StreamSettings(poll_s=0.1), stop_after_idle_s=None)
    assert stopped.manifest["reconciles"] and stopped.database.exists()
    assert {name: c["accepted"] for name, c in stopped.manifest["streams"].items()} == \
        {name: c["accepted"] for name, c in batch.manifest["streams"].items()}
