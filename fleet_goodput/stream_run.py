"""One streaming run end to end: the pipeline until its source stops, then the
manifest (counts summed from what the stream appended) and the DuckDB views."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import duckdb

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from fleet_goodput.batch import BatchOutcome, check_reconciles, is_dry_run, is_remote
from fleet_goodput.config import Settings
from fleet_goodput.manifest import write_manifest
from fleet_goodput.stream_settings import StreamSettings
from fleet_goodput.views import build_database
from pipelines import streaming
from transforms.write import COUNTS_DIR


class OutputInUse(ValueError):
    """The output folder already holds results of another run."""


def prepare_output(output_dir: str, replace: bool) -> None:
    """A stream appends versions from scratch, so it needs an output of its own."""
    root = Path(output_dir)
    used = [root / name for name in ("tables", "_run", "goodput.duckdb", "manifest.json") if (root / name).exists()]
    if used and not replace:
        raise OutputInUse(f"{output_dir} already holds results ({', '.join(p.name for p in used)}); "
                          "pass --replace to start it afresh, or choose another --output")
    for path in used:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    root.mkdir(parents=True, exist_ok=True)


def summed_counts(output_dir: str) -> dict[tuple[str, str], int]:
    pattern = f"{Path(output_dir) / COUNTS_DIR}/*.parquet"
    if not list((Path(output_dir) / COUNTS_DIR).glob("*.parquet")):
        return {}
    rows = duckdb.sql(f"select stream, outcome, sum(events) from read_parquet('{pattern}') group by all").fetchall()
    return {(stream, outcome): int(n) for stream, outcome, n in rows}


def run_stream(input_dir: str, output_dir: str, settings: Settings, stream_settings: StreamSettings,
               stop_after_idle_s: float | None = None, beam_args: list[str] | None = None,
               replace: bool = False, progress=None) -> BatchOutcome:
    if is_remote(output_dir):
        raise OutputInUse("a local streaming run writes to a local folder; on Dataflow use --config with source: pubsub")
    prepare_output(output_dir, replace)
    started = time.monotonic()
    latest_us = streaming.run(input_dir, output_dir, settings, stream_settings, stop_after_idle_s, beam_args, progress)
    manifest = write_manifest(output_dir, input_dir=input_dir, as_of_us=latest_us, window_s=settings.window_s,
                              counts=summed_counts(output_dir),
                              extra={"output": str(output_dir), "mode": "streaming",
                                     "allowed_lateness_s": stream_settings.allowed_lateness_s})
    check_reconciles(manifest, output_dir)
    return BatchOutcome(manifest=manifest, database=build_database(output_dir, settings),
                        seconds=time.monotonic() - started)


def translate_stream(output_dir: str, settings: Settings, stream_settings: StreamSettings, beam_args: list[str]):
    """Build the Pub/Sub streaming pipeline and let DataflowRunner translate it
    with --dry_run: nothing is read, written or submitted. Returns the job."""
    if stream_settings.source != "pubsub" or not is_dry_run(beam_args):
        raise ValueError("a Dataflow dry run of the stream needs streaming.source: pubsub and --dry_run=True")
    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=options)
    decoded = streaming.read_pubsub_sources(p, settings, stream_settings)
    streaming.write_streaming_outputs(streaming.build_streaming(decoded, settings, stream_settings), output_dir)
    return p.run().job
