"""Beam's side of a batch run: its pipeline options, what `--workers` is short for, and the Dataflow dry run.

`beam_args_for` gathers a run's Beam pipeline options (the config's `beam:`
section, then the command line's, each checked to be Beam's:
pipelines/options.py), and `worker_flags` what `--workers N` is short for on
Beam's local runner. `translate_batch` hands the batch pipeline to
DataflowRunner with --dry_run, which checks and translates it offline.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from fleet_goodput import schemas
from fleet_goodput.core.config import Settings, SettingsFile
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.pipelines import goodput
from fleet_goodput.pipelines.options import beam_flags_for
from fleet_goodput.store.layout import STAGING, STATE_KEYS


def is_dry_run(beam_args: list[str]) -> bool:
    # Beam itself tests the flag's raw value for truth, so any value asks for a dry run.
    return bool(PipelineOptions(beam_args).view_as(TestOptions).dry_run)


def is_local(beam_args: list[str] | None) -> bool:
    """Whether the run computes in this machine's processes: no --runner, or one of Beam's local runners."""
    runner = PipelineOptions(beam_args or []).view_as(StandardOptions).runner or goodput.DEFAULT_RUNNER
    return runner.lower().removesuffix("runner") in ("fnapi", "direct", "bundlebaseddirect", "switchingdirect")


def beam_args_for(
    config: str | SettingsFile | None, flags: list[str], workers: int | None, where: str = ""
) -> tuple[str, ...]:
    """Beam's pipeline options for a batch run: the `beam:` section of `config` (a settings file's path, or
    the file read already), then `flags`, each checked to be Beam's (`where` says where `flags` came
    from), then what `--workers` is short for."""
    checked = beam_flags_for("run", config, flags, where)
    return (*checked, *worker_flags(workers, checked))


def worker_flags(workers: int | None, beam_args: list[str] | None) -> list[str]:
    """Beam's own flags for `--workers N`: its local runner computes the run's one pipeline in N
    processes. Another runner spreads the work itself (Dataflow: --max_num_workers)."""
    if workers is None:
        return []
    if workers < 1:
        raise ValueError(f"--workers must be at least 1 (got {workers})")
    if not is_local(beam_args):
        raise ValueError(
            "--workers sets how many processes Beam's local runner computes in; another runner "
            "spreads the work itself (on Dataflow, set --max_num_workers)"
        )
    return [] if workers == 1 else [f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]


def translate_batch(
    input_dir: str,
    output_dir: str,
    settings: Settings,
    given_as_of_us: int | None = None,
    beam_args: list[str] | None = None,
):
    """Build the batch pipeline and let DataflowRunner translate it with --dry_run.

    Nothing is read, written or submitted; returns the runner's job, whose
    `options` are the effective pipeline options and whose `proto_pipeline`
    is the graph Dataflow would run. (A real launch lists the input's new
    files and the saved state first; here each stream's file pattern stands in.)
    """
    options = PipelineOptions(beam_args or [])
    runner = (options.view_as(StandardOptions).runner or "").lower().removesuffix("runner")
    if not runner.endswith("dataflow") or not is_dry_run(beam_args or []):
        raise ValueError("--dry_run needs --runner=DataflowRunner: other runners ignore it and run the job")
    p = beam.Pipeline(options=options)
    output = output_dir.rstrip("/")
    files = {stream: [f"{input_dir.rstrip('/')}/{stream}/*.avro"] for stream in schemas.STREAMS}
    goodput.build_batch(
        p,
        files,
        [f"{output}/{STATE_KEYS}/*.parquet"],
        f"{output}/{STAGING}/dry-run",
        settings,
        RunSettings(),
        Continuation(),
        given_as_of_us,
    )
    return p.run().job
