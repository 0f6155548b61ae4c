"""One batch run end to end: the Beam pipeline, the manifest, the DuckDB views.

Used by `mpg run` and `mpg demo`; raises `ReconciliationError` (after writing
the manifest, so the failure can be inspected) when counts do not add up.
An output on a remote file system (gs://…) gets its tables and manifest but no
DuckDB file, which needs local Parquet; `translate_batch` hands the pipeline
to DataflowRunner with --dry_run, which checks and translates it offline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from fleet_goodput.config import Settings
from fleet_goodput.manifest import manifest_path, write_manifest
from fleet_goodput.views import build_database
from pipelines import goodput


class ReconciliationError(RuntimeError):
    """read != accepted + duplicate + rejected + late for some stream."""


class InputError(ValueError):
    """The input folder is missing or holds no telemetry."""


@dataclass(frozen=True)
class BatchOutcome:
    manifest: dict
    database: Path | None  # None for a remote output
    seconds: float


def is_remote(path: str) -> bool:
    return "://" in str(path)


def check_input(input_dir: str) -> None:
    if is_remote(input_dir):
        return  # remote inputs are matched by Beam's file IO
    root = Path(input_dir)
    if not root.is_dir():
        raise InputError(f"input folder {input_dir} does not exist")
    if not any(root.glob("*/*.avro")):
        raise InputError(f"no telemetry in {input_dir}: expected {input_dir}/scheduler/*.avro, "
                         f"{input_dir}/runtime/*.avro and {input_dir}/profiler/*.avro (try `mpg simulate --out {input_dir}`)")


def run_batch(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
              beam_args: list[str] | None = None) -> BatchOutcome:
    check_input(input_dir)
    started = time.monotonic()
    if not is_remote(output_dir):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
    result = goodput.run(input_dir, output_dir, settings, as_of_us, beam_args)
    manifest = write_manifest(output_dir, input_dir=input_dir, as_of_us=result.as_of_us,
                              window_s=settings.window_s, counts=result.counts,
                              extra={"output": str(output_dir)})
    check_reconciles(manifest, output_dir)
    database = None if is_remote(output_dir) else build_database(output_dir, settings)
    return BatchOutcome(manifest=manifest, database=database, seconds=time.monotonic() - started)


def check_reconciles(manifest: dict, output_dir: str) -> None:
    if not manifest["reconciles"]:
        broken = [f"{name}: read {c['read']} != accepted {c['accepted']} + duplicate {c['duplicate']} "
                  f"+ rejected {c['rejected']} + late {c['late']}"
                  for name, c in manifest["streams"].items() if not c["reconciles"]]
        raise ReconciliationError(f"counts do not reconcile ({'; '.join(broken)}); see {manifest_path(output_dir)}")


def is_dry_run(beam_args: list[str]) -> bool:
    # Beam itself tests the flag's raw value for truth, so any value asks for a dry run.
    return bool(PipelineOptions(beam_args).view_as(TestOptions).dry_run)


def translate_batch(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
                    beam_args: list[str] | None = None):
    """Build the batch pipeline and let DataflowRunner translate it with --dry_run.

    Nothing is read, written or submitted; returns the runner's job, whose
    `options` are the effective pipeline options and whose `proto_pipeline`
    is the graph Dataflow would run.
    """
    options = PipelineOptions(beam_args or [])
    runner = (options.view_as(StandardOptions).runner or "").lower().removesuffix("runner")
    if not runner.endswith("dataflow") or not is_dry_run(beam_args or []):
        raise ValueError("--dry_run needs --runner=DataflowRunner: other runners ignore it and run the job")
    p = beam.Pipeline(options=options)
    goodput.build_batch(p, input_dir, output_dir, settings, as_of_us)
    return p.run().job
