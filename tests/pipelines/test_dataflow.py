"""The batch job as Dataflow would run it, checked offline.

DataflowRunner with --dry_run=True translates the pipeline and stops before
staging or submitting anything: no credentials, no network (MatchFiles takes
its gs:// pattern as data, matched on the workers). Its job carries the
effective options and the portable pipeline proto. An explicit
--temp_location on a well-formed bucket name matters: without one, Beam tries
(and retries for minutes) to create a default bucket. The remote-output path
of the store (Delta Lake through delta-rs, which writes gs:// itself) is not
exercised here: that needs a bucket.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2

from fleet_goodput.cli import main
from fleet_goodput.core.config import ConfigError, load_settings
from fleet_goodput.core.options import COMMAND_OPTIONS, OPTIONS, OptionsError
from fleet_goodput.pipelines.options import GoodputOptions, parse_options
from fleet_goodput.runs import batch, launcher
from fleet_goodput.runs.beam_flags import translate_batch
from fleet_goodput.runs.inputs import InputFile
from fleet_goodput.runs.plan import RunPlan
from fleet_goodput.store.delta_store import Store

BUCKET = "gs://fleet-goodput-test"
IMAGE = "us-central1-docker.pkg.dev/fleet-goodput-test/images/fleet-goodput:test"
DATAFLOW_ARGS = [
    "--runner=DataflowRunner",
    "--project=fleet-goodput-test",
    "--region=us-central1",
    f"--temp_location={BUCKET}/tmp",
    "--dry_run=True",
]
ROOT = Path(__file__).parents[2]
CONFIG = str(ROOT / "configs" / "dataflow.yaml")

# Every business step, the telemetry reader (the saved state's too) and every table's writer.
EXPECTED_STEPS = {"ReadTelemetry", "SessionizeKeys", "ComputeGoodput", "StageTables", "StageState", "StageTally"}


def top_level_steps(job) -> set[str]:
    return {t.unique_name for t in job.proto_pipeline.components.transforms.values() if "/" not in t.unique_name}


@pytest.fixture(scope="module")
def job():
    return translate_batch(
        f"{BUCKET}/fleet",
        f"{BUCKET}/goodput",
        load_settings(),
        beam_args=DATAFLOW_ARGS + [f"--sdk_container_image={IMAGE}"],
    )


def test_translates_every_step_for_dataflow(job):
    assert EXPECTED_STEPS <= top_level_steps(job)
    assert job.proto.type_.name == "JOB_TYPE_BATCH"


def test_workers_run_the_custom_container(job):
    environments = job.proto_pipeline.components.environments.values()
    docker = [
        beam_runner_api_pb2.DockerPayload.FromString(env.payload)
        for env in environments
        if env.urn == common_urns.environments.DOCKER.urn
    ]
    assert {payload.container_image for payload in docker} == {IMAGE}


def test_dry_run_needs_the_dataflow_runner():
    with pytest.raises(ValueError, match="DataflowRunner"):
        translate_batch(f"{BUCKET}/fleet", f"{BUCKET}/goodput", load_settings(), beam_args=["--dry_run=True"])


def test_a_dry_run_takes_options_from_the_config_lets_the_command_line_win_and_warns_what_a_launch_lacks(capsys):
    """One translation (seconds of Beam) for both: the options it would launch with, and what it would lack."""
    assert (
        main(
            [
                "run",
                "--config",
                CONFIG,
                "--input",
                "fleet/",
                "--output",
                f"{BUCKET}/goodput",
                "--project=override-project",
                "--max_num_workers=7",
                f"--temp_location={BUCKET}/tmp",
                "--dry_run=True",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    printed = captured.out
    assert "not submitted" in printed
    for line in (
        "runner: DataflowRunner",
        "project: override-project",
        "max_num_workers: 7",  # overridden
        "region: us-central1",
        "machine_type: n2-standard-4",
        "autoscaling_algorithm: THROUGHPUT_BASED",
    ):
        assert f"  {line}\n" in printed, line
    assert f"temp_location: {BUCKET}/tmp/" in printed
    assert "  SessionizeKeys\n" in printed
    # The config names no image, and the input is local: workers could read neither.
    assert "warning: --sdk_container_image is unset" in captured.err
    assert "warning: --input fleet/ is not on gs://" in captured.err
    assert "--output" not in captured.err and "--temp_location" not in captured.err


def _plan() -> RunPlan:
    """What the launcher plans from the store before it submits (here: a first run of two files)."""
    files = (
        InputFile("scheduler", f"{BUCKET}/fleet/scheduler/a.avro", "00", 10),
        InputFile("runtime", f"{BUCKET}/fleet/runtime/a.avro", "01", 10),
    )
    return RunPlan(
        f"{BUCKET}/fleet",
        Store(f"{BUCKET}/goodput"),
        "token",
        None,
        files,
        (),
        (f"{BUCKET}/goodput/state/keys/part-0.parquet",),
    )


def launcher_options(argv: list[str]) -> GoodputOptions:
    return parse_options("launcher", argv).view_as(GoodputOptions)


def test_flex_template_launcher_commits_the_run_as_the_jobs_last_step():
    result = launcher.run(
        [f"--input={BUCKET}/fleet", f"--output={BUCKET}/goodput", "--window_s=900", "--as_of=2026-01-02T00:00:00Z"]
        + DATAFLOW_ARGS,
        plan=_plan(),
    )
    steps = top_level_steps(result.job)
    assert EXPECTED_STEPS | {"CommitRun"} <= steps


def test_flex_template_launcher_checks_the_window():
    with pytest.raises(ConfigError, match="divide a day"):
        launcher.run(
            [f"--input={BUCKET}/fleet", f"--output={BUCKET}/goodput", "--window_s=7000"] + DATAFLOW_ARGS, plan=_plan()
        )


def test_template_parameters_are_the_launchers_options():
    metadata = json.loads((ROOT / "templates" / "goodput_metadata.json").read_text())
    assert [p["name"] for p in metadata["parameters"]] == list(COMMAND_OPTIONS["launcher"])
    given = {p["name"]: "900" if p["paramType"] == "NUMBER" else "x" for p in metadata["parameters"]}
    options = launcher_options([f"--{name}={value}" for name, value in given.items()])
    assert {name: str(getattr(options, name)) for name in given} == given
    required = [p["name"] for p in metadata["parameters"] if not p.get("isOptional")]
    assert required == [name for name in COMMAND_OPTIONS["launcher"] if OPTIONS[name].required]
    for name in required:
        with pytest.raises(OptionsError, match=f"--{name}"):
            launcher_options([f"--{other}=x" for other in required if other != name])


def test_the_launcher_refuses_an_unknown_flag_naming_the_nearest():
    with pytest.raises(OptionsError, match="unknown option --as-of; did you mean --as_of"):
        launcher.run(
            [f"--input={BUCKET}/fleet", f"--output={BUCKET}/goodput", "--as-of=2026-01-02T00:00:00Z"] + DATAFLOW_ARGS,
            plan=_plan(),
        )
    with pytest.raises(OptionsError, match="--replace is an option of `run` or `stream`"):
        launcher.run(
            [f"--input={BUCKET}/fleet", f"--output={BUCKET}/goodput", "--replace"] + DATAFLOW_ARGS, plan=_plan()
        )


def test_the_images_entry_file_is_copied_and_runs_the_launcher():
    """FLEX_TEMPLATE_PYTHON_PY_FILE, run as the template's launcher VM runs it, reaches launcher.main()."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    entry = re.search(r'FLEX_TEMPLATE_PYTHON_PY_FILE="\$\{WORKDIR\}/([^"]+)"', dockerfile).group(1)
    destinations = [line.split()[-1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert entry in destinations or entry.split("/")[0] in destinations, f"{entry} is not copied into the image"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / entry),
            f"--input={BUCKET}/fleet",
            f"--output={BUCKET}/goodput",
            "--as-of=2026-01-02T00:00:00Z",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "launcher: error: unknown option --as-of; did you mean --as_of" in run.stderr


def test_dry_run_without_project_or_temp_location_stops_before_translating(capsys):
    assert (
        main(
            [
                "run",
                "--input",
                f"{BUCKET}/fleet",
                "--output",
                f"{BUCKET}/goodput",
                "--runner=DataflowRunner",
                "--region=us-central1",
                "--dry_run=True",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "warning: --project is unset" in err and "warning: --temp_location is unset" in err
    assert "--region is unset" not in err and "not translated" in err


def test_is_remote():
    assert batch.is_remote("gs://bucket/out") and not batch.is_remote("/tmp/out")
