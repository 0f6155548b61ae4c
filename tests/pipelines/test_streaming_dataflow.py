"""The streaming pipeline as Dataflow would run it, translated offline (--dry_run)."""

from __future__ import annotations

from pathlib import Path

from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.run_settings import load_run_settings
from fleet_goodput.runs.stream_run import translate_stream

ROOT = Path(__file__).parents[2]
CONFIG = str(ROOT / "configs" / "dataflow.yaml")
ARGS = [
    "--runner=DataflowRunner",
    "--project=fleet-goodput-test",
    "--region=us-central1",
    "--temp_location=gs://fleet-goodput-test/tmp",
    "--dry_run=True",
]
EXPECTED = {
    "ReadScheduler",
    "ReadRuntime",
    "ReadProfiler",
    "SessionizeJobsAndCapacity",
    "ComputeGoodput",
    "CommitToStore",
}


def test_streaming_job_translates_with_pubsub_sources():
    job = translate_stream("gs://fleet-goodput-test/stream", load_settings(), load_run_settings(CONFIG), ARGS)
    steps = {t.unique_name for t in job.proto_pipeline.components.transforms.values() if "/" not in t.unique_name}
    assert EXPECTED <= steps
    assert job.proto.type_.name == "JOB_TYPE_STREAMING"
    subscriptions = {
        t.unique_name: t
        for t in job.proto_pipeline.components.transforms.values()
        if t.unique_name.endswith("ReadMessages")
    }
    assert len(subscriptions) == 3
    # The sink commits each pane to the store, through the steps tests/pipelines/test_stream_commits.py runs locally.
    sink = {
        t.unique_name
        for t in job.proto_pipeline.components.transforms.values()
        if t.unique_name.startswith("CommitToStore/")
    }
    assert {"CommitToStore/IntoPanes", "CommitToStore/GatherPane", "CommitToStore/CommitPane"} <= sink


def test_mpg_stream_dry_run_from_config(capsys):
    assert (
        main(
            ["stream", "--config", CONFIG, "--input", "unused", "--output", "gs://fleet-goodput-test/stream"] + ARGS[2:]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "not submitted" in out and "SessionizeJobsAndCapacity" in out
