"""Dataflow Flex Template entry point: parse the template's parameters, submit the batch job.

The template's launcher VM runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE in the
Dockerfile) with the launch request's parameters and pipeline options:

    python pipelines/launcher.py --input=gs://B/fleet --output=gs://B/goodput \
        [--as_of=2026-01-01T00:00:00Z] [--window_s=3600] [--config=configs/fleet.yaml] [Beam options]

Like `mpg run`, a launch continues the output store: the launcher plans the
run (the input files no earlier run applied, the saved state) before it
submits the job. A Flex Template launch must return once the job is
submitted, so nobody is left to commit the run after the job as `mpg run`
does: here the job commits it itself, as its last step, once every table is
staged, and fails without committing if the counts do not reconcile. A
scheduled daily launch is the daily routine on Dataflow (docs/dataflow.md).
The pipeline options come from the launch request (gcloud flags and
--parameters), not from the config's `beam:` section, which is for `mpg run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from fleet_goodput.batch import RunPlan, commit_run, plan_run, staging_folder
from fleet_goodput.config import Settings, check_window_s, load_settings
from fleet_goodput.stream_settings import StreamSettings, load_stream_settings
from fleet_goodput.timeutil import parse_time_us
from pipelines import goodput


def _commit(_, plan: RunPlan, settings: Settings, stream_settings: StreamSettings, **staged) -> int:
    """The job's last step: the side inputs (every staged write) are complete before it runs."""
    return commit_run(plan, settings, stream_settings, mode="dataflow").run_id


def build(p: beam.Pipeline, plan: RunPlan, settings: Settings, stream_settings: StreamSettings,
          as_of_us: int | None = None) -> None:
    outputs = goodput.build_batch(p, plan.files_by_stream, list(plan.state_files), staging_folder(plan), settings,
                                  stream_settings, plan.continuation, as_of_us)
    staged = {name: beam.pvalue.AsList(written) for name, written in outputs["staged"].items()}
    (
        p
        | "WhenStaged" >> beam.Create([None])
        | "CommitRun" >> beam.Map(_commit, plan=plan, settings=settings, stream_settings=stream_settings, **staged)
    )


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description="Submit the goodput batch job (Dataflow Flex Template launcher).")
    parser.add_argument("--input", required=True, help="folder with scheduler/, runtime/, profiler/ Avro files")
    parser.add_argument("--output", required=True, help="the output store (tables/, runs/, state/)")
    parser.add_argument("--as_of", help="ISO-8601 time that ends still-running jobs (default: the latest accepted event time)")
    parser.add_argument("--window_s", type=int, help="window length in seconds, overriding the config's")
    parser.add_argument("--config", help="settings YAML in the image, overriding configs/default.yaml")
    return parser.parse_known_args(argv)


def run(argv: list[str] | None = None, plan: RunPlan | None = None) -> beam.runners.runner.PipelineResult:
    args, beam_args = parse_args(argv)
    settings = load_settings(args.config)
    if args.window_s:
        settings = dataclasses.replace(settings, window_s=check_window_s(args.window_s))
    as_of_us = parse_time_us(args.as_of) if args.as_of else None
    plan = plan or plan_run(args.input, args.output, as_of_us)
    p = beam.Pipeline(options=PipelineOptions(beam_args))
    build(p, plan, settings, load_stream_settings(args.config), as_of_us)
    # No wait_until_finish: it would block the Flex Template launch.
    return p.run()


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
