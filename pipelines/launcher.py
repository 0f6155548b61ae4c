"""Dataflow Flex Template entry point: parse the template's parameters, submit the batch job.

The template's launcher VM runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE in the
Dockerfile) with the launch request's parameters and pipeline options:

    python pipelines/launcher.py --input=gs://B/fleet --output=gs://B/goodput \
        [--as_of=2026-01-01T00:00:00Z] [--window_s=3600] [--config=configs/fleet.yaml] [Beam options]

A Flex Template launch must return once the job is submitted, so nobody is
left to write the manifest after the job as `mpg run` does: here the job
writes it itself, as its last step, and fails if the counts do not reconcile.
The pipeline options come from the launch request (gcloud flags and
--parameters), not from the config's `beam:` section, which is for `mpg run`.
See docs/dataflow.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from fleet_goodput.batch import check_reconciles
from fleet_goodput.config import Settings, check_window_s, load_settings
from fleet_goodput.manifest import write_manifest
from fleet_goodput.timeutil import parse_time_us
from pipelines import goodput


def write_job_manifest(counts: list, as_of_us: int, *, input_dir: str, output_dir: str, window_s: int) -> None:
    """The manifest of `mpg run`, written by the job from its own counts."""
    manifest = write_manifest(output_dir, input_dir=input_dir, as_of_us=as_of_us, window_s=window_s,
                              counts=dict(counts), extra={"output": output_dir})
    check_reconciles(manifest, output_dir)


def build(p: beam.Pipeline, input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None) -> None:
    outputs = goodput.build_batch(p, input_dir, output_dir, settings, as_of_us)
    (
        outputs["counts"]
        | "CollectCountsForManifest" >> beam.combiners.ToList()
        | "WriteManifest" >> beam.Map(write_job_manifest, as_of_us=beam.pvalue.AsSingleton(outputs["as_of"]),
                                      input_dir=input_dir, output_dir=output_dir, window_s=settings.window_s)
    )


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="Submit the goodput batch job (Dataflow Flex Template launcher).")
    parser.add_argument("--input", required=True, help="folder with scheduler/, runtime/, profiler/ Avro files")
    parser.add_argument("--output", required=True, help="folder for tables/ and manifest.json")
    parser.add_argument("--as_of", help="ISO-8601 time that ends still-running jobs (default: the latest event time)")
    parser.add_argument("--window_s", type=int, help="window length in seconds, overriding the config's")
    parser.add_argument("--config", help="settings YAML in the image, overriding configs/default.yaml")
    return parser.parse_known_args(argv)


def run(argv: list[str] | None = None) -> beam.runners.runner.PipelineResult:
    args, beam_args = parse_args(argv)
    settings = load_settings(args.config)
    if args.window_s:
        settings = dataclasses.replace(settings, window_s=check_window_s(args.window_s))
    p = beam.Pipeline(options=PipelineOptions(beam_args))
    build(p, args.input, args.output, settings, parse_time_us(args.as_of) if args.as_of else None)
    # No wait_until_finish: it would block the Flex Template launch.
    return p.run()


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
