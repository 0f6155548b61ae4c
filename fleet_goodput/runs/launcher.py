"""Dataflow Flex Template launch: parse the template's parameters, plan the run, submit the batch job.

The template's launcher VM runs templates/launch.py (FLEX_TEMPLATE_PYTHON_PY_FILE
in the Dockerfile), which calls `main()` here, with the launch request's
parameters and pipeline options:

    python templates/launch.py --input=gs://B/fleet --output=gs://B/goodput \
        [--as_of=2026-01-01T00:00:00Z] [--window_s=3600] [--config=configs/default.yaml] [Beam options]

Its options are `GoodputOptions` (pipelines/options.py), spelled as for
`mpg run`; an unknown flag fails the launch, naming the nearest known one.

Like `mpg run`, a launch continues the output store: the launcher plans the
run (the input files no earlier run applied, the saved state) before it
submits the job. A Flex Template launch must return once the job is
submitted, so nobody is left to commit the run after the job as `mpg run`
does: here the job commits it itself, as its last step, once every table is
staged, and fails without committing if the counts do not reconcile. A
scheduled daily launch is the daily routine on Dataflow (docs/dataflow.md).
The pipeline options come from the launch request (gcloud flags and
--parameters), not from the config's `beam:` section, which is for `mpg run`.

This is a run, like fleet_goodput/runs/batch.py, whose planning
(fleet_goodput/runs/plan.py) and committing (fleet_goodput/runs/commit.py) it shares: it sits above the pipelines it builds, so pipelines/ never imports
a run. The step that commits lives in this module, not in the entry file,
so the workers unpickle it by reference from the installed package.
"""

from __future__ import annotations

import logging
import sys

import apache_beam as beam

from fleet_goodput.core.config import Settings
from fleet_goodput.core.options import OptionsError, typed_values
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines import goodput
from fleet_goodput.pipelines.options import GoodputOptions, announce_job, parse_options
from fleet_goodput.runs.commit import commit_run
from fleet_goodput.runs.plan import RunPlan, plan_run, staging_folder
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.stored_settings import settings_for_run


def _commit(_, plan: RunPlan, settings: Settings, run_settings: RunSettings, **staged) -> int:
    """The job's last step: the side inputs (every staged write) are complete before it runs."""
    return commit_run(plan, settings, run_settings, mode="dataflow").run_id


def build(
    p: beam.Pipeline, plan: RunPlan, settings: Settings, run_settings: RunSettings, given_as_of_us: int | None = None
) -> None:
    outputs = goodput.build_batch(
        p,
        plan.files_by_stream,
        list(plan.state_files),
        staging_folder(plan),
        settings,
        run_settings,
        plan.continuation,
        given_as_of_us,
    )
    staged = {name: beam.pvalue.AsList(written) for name, written in outputs["staged"].items()}
    (
        p
        | "WhenStaged" >> beam.Create([None])
        | "CommitRun" >> beam.Map(_commit, plan=plan, settings=settings, run_settings=run_settings, **staged)
    )


def run(argv: list[str] | None = None, plan: RunPlan | None = None) -> beam.runners.runner.PipelineResult:
    """Plan and submit the job; `argv` holds the template's parameters and the launch's pipeline options."""
    options = parse_options("launcher", sys.argv[1:] if argv is None else argv)
    launch = typed_values("launcher", options.view_as(GoodputOptions))  # the job keeps the text, shown on Dataflow
    given_as_of_us = launch["as_of"]
    plan = plan or plan_run(launch["input"], Store(launch["output"]), given_as_of_us)
    # The store's settings, with the config's and --window_s replacing them where that is allowed.
    chosen = settings_for_run(plan.store, plan.previous, launch["config"], window_s=launch["window_s"])
    if chosen.note:
        logging.warning(chosen.note)
    p = beam.Pipeline(options=options)
    build(p, plan, chosen.settings, chosen.run_settings, given_as_of_us)
    # No wait_until_finish: it would block the Flex Template launch.
    result = p.run()
    announce_job(result, options)
    return result


def main() -> None:
    """The entry file's body: Beam's INFO logs (the job id), and an option error as a one-line exit."""
    logging.getLogger().setLevel(logging.INFO)
    try:
        run()
    except OptionsError as exc:
        sys.exit(f"launcher: error: {exc}")
