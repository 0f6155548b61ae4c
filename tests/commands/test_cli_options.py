"""The `mpg` command line: one spelling per option, unknown flags refused with the nearest known one,
Beam loaded only by the commands that run it, and --quiet.

The Dataflow side (the launcher's options, the dry run's warnings) is in test_dataflow.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult
from google.cloud.dataflow import Job

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.core.options import console_url, unknown_flag_message
from fleet_goodput.pipelines.options import announce_job, check_flags, parse_options, runner_class
from fleet_goodput.runs.beam_flags import is_local
from fleet_goodput.runs.compute import heartbeat
from fleet_goodput.telemetry.avro_io import write_events

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("worked_example")
    for stream, records in worked_example.records().items():
        write_events(root / stream / "part-0.avro", stream, records)
    return root


REFUSED = [
    # (command line after `mpg run --input I --output O`, what the error says)
    (["--as-of", "2026-01-01T01:00:00Z"], "unknown option --as-of; did you mean --as_of?"),
    (["--as_off=2026-01-01T01:00:00Z"], "unknown option --as_off; did you mean --as_of?"),
    (["--bogus_flag=1"], "unknown option --bogus_flag\n"),
    (["--temp-location=gs://b/tmp"], "unknown option --temp-location; did you mean --temp_location?"),
    (["--runer=DataflowRunner"], "unknown option --runer; did you mean --runner?"),
    (["--out=x"], "unknown option --out; did you mean --output?"),  # no abbreviations
    (["--stop_after_idle_s=5"], "--stop_after_idle_s is an option of `stream`, not of `run`"),
    # The Dask runner's own options are Beam's, checked as DirectRunner's are.
    (
        ["--runner", "dask", "--dask_client_adress=tcp://127.0.0.1:1"],
        "unknown option --dask_client_adress; did you mean --dask_client_address?",
    ),
]


@pytest.mark.parametrize(("extra", "message"), REFUSED, ids=[" ".join(e) for e, _ in REFUSED])
def test_mpg_run_refuses_an_unknown_flag_naming_the_nearest(tmp_path, capsys, extra, message):
    assert main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")] + extra) == 2
    assert message in capsys.readouterr().err + "\n"
    assert not (tmp_path / "out").exists()


def test_a_typo_in_the_configs_beam_section_is_refused_with_where_it_is(tmp_path, capsys):
    config = tmp_path / "dataflow.yaml"
    config.write_text("beam:\n  max_num_worker: 3\n")
    assert main(["run", "--input", str(tmp_path), "--output", str(tmp_path / "out"), "--config", str(config)]) == 2
    assert (
        f"unknown option --max_num_worker; did you mean --max_num_workers? (in the beam: section of {config})"
        in capsys.readouterr().err
    )


def test_mpg_stream_takes_the_same_spelling(tmp_path, capsys):
    assert main(["stream", "--input", str(tmp_path), "--output", str(tmp_path / "out"), "--stop-after-idle", "1"]) == 2
    assert "did you mean --stop_after_idle_s?" in capsys.readouterr().err


def test_other_commands_name_the_nearest_flag_too(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["runs", "--ouput", "x"])
    assert exited.value.code == 2
    assert "unknown option --ouput; did you mean --output?" in capsys.readouterr().err


def test_suggestions_come_from_the_known_flags_only():
    assert unknown_flag_message("--zzz=1", ["--as_of", "--input"]) == "unknown option --zzz"
    assert unknown_flag_message("stray", ["--input"]) == "unexpected argument 'stray'"


def test_the_parsed_options_are_the_command_lines():
    options = parse_options(
        "run",
        ["--input", "in/", "--output=out/", "--as_of", "2026-01-01T01:00:00Z", "--replace", "--runner=FnApiRunner"],
    )
    values = options.get_all_options()
    assert (values["input"], values["output"], values["as_of"], values["replace"], values["runner"]) == (
        "in/",
        "out/",
        "2026-01-01T01:00:00Z",
        True,
        "FnApiRunner",
    )


def test_help_lists_the_projects_options_then_points_to_beams(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = capsys.readouterr().out
    for flag in ("--input", "--output", "--as_of", "--config", "--replace", "--verbose", "--quiet"):
        assert flag in help_text, flag
    assert "--stop_after_idle_s" not in help_text and "--temp_location" in help_text  # named in the pointer
    assert "mpg run --help_beam" in help_text
    with pytest.raises(SystemExit) as exited:
        main(["run", "--help_beam"])
    assert exited.value.code == 0
    beam_help = capsys.readouterr().out
    assert "--temp_location" in beam_help and "--sdk_container_image" in beam_help and "--as_of" not in beam_help
    assert "--dask_client_address" in beam_help  # the Dask runner's, where dask is installed (the test extra)


def test_runner_dask_names_the_dask_runner_whose_options_are_known_to_the_check():
    for name in ("dask", "DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"):
        assert runner_class(name) == "fleet_goodput.pipelines.on_dask.DaskRunner", name
    assert runner_class("DataflowRunner") == "DataflowRunner" and runner_class(None) is None
    check_flags("run", ["--runner", "dask", "--dask_client_address", "tcp://127.0.0.1:8786"])  # no error
    check_flags("run", ["--runner=dask", "--dask_npartitions=4"])
    assert not is_local(["--runner", "dask"])  # no chunks by input size, no --workers: the cluster spreads the work


PROGRESS_LINE = re.compile(r"\[ *\d+\.\d s\] +\S")  # the seconds since the command started, then what it does


def test_a_run_tells_what_it_is_doing_on_stderr_with_elapsed_times(telemetry, tmp_path, capsys):
    assert main(["run", "--input", str(telemetry), "--output", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines and all(PROGRESS_LINE.match(line) for line in lines), captured.err
    stages = [
        "Running the goodput pipeline on",
        "Listed 3 input file(s)",
        "hashing the 3 no earlier run applied",
        "Decoding and computing 3 new file(s)",
        "computed in",
        "Committing run 1 to",
        "Building the DuckDB views",
    ]
    positions = [captured.err.find(stage) for stage in stages]
    assert -1 not in positions and positions == sorted(positions), captured.err
    seconds = [float(line[1 : line.index(" s]")]) for line in lines]
    assert seconds == sorted(seconds)
    assert captured.out.startswith("Committed run 1 to ")  # the result, then the summary and headline
    assert "Fleet ML Productivity Goodput" in captured.out and "[" not in captured.out.splitlines()[0]


def test_long_work_says_every_so_often_that_it_goes_on():
    told = []
    with heartbeat(told.append, "computing", every_s=0.02):
        time.sleep(0.15)
    count = len(told)
    time.sleep(0.05)
    assert count >= 3 and len(told) == count  # and not a word once the work is done
    assert re.fullmatch(r"  still computing: \d+ s so far", told[0])


def test_quiet_run_prints_its_result_line_only_and_the_as_of_is_used(telemetry, tmp_path, capsys):
    output = tmp_path / "out"
    assert (
        main(["run", "--quiet", "--input", str(telemetry), "--output", str(output), "--as_of", "2026-01-01T01:00:00Z"])
        == 0
    )  # within the lateness of the last event (00:09:40)
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress
    assert re.fullmatch(
        rf"Committed run 1 to {re.escape(str(output.resolve()))} in \d+\.\d s: 3 new file\(s\), "
        r"21 events read; as of 2026-01-01T01:00:00Z\n",
        captured.out,
    ), captured.out
    assert main(["-q", "run", "--input", str(telemetry), "--output", str(output)]) == 0
    assert capsys.readouterr() == (f"Nothing new in {telemetry}: run 1 stays the latest.\n", "")
    assert main(["runs", "--output", str(output), "--format", "json"]) == 0
    assert '"as_of": "2026-01-01T01:00:00Z"' in capsys.readouterr().out


def test_quiet_replay_prints_its_result_line_only(telemetry, tmp_path, capsys):
    assert main(["replay", "--quiet", "--from", str(telemetry), "--to", str(tmp_path / "live"), "--speed", "0"]) == 0
    assert capsys.readouterr() == (f"replayed 21 events into {tmp_path / 'live'}\n", "")
    assert {path.parent.name for path in (tmp_path / "live").glob("*/*.avro")} == {
        path.parent.name for path in telemetry.glob("*/*.avro")
    }
    assert main(["replay", "--replace", "--from", str(telemetry), "--to", str(tmp_path / "live"), "--speed", "0"]) == 0
    assert "replayed slice 1/" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["-v", "run"], ["run", "--verbose", "-vv"]], ids=" ".join)
def test_verbosity_flags_are_not_taken_for_beams_and_v_adds_the_runs_detail(telemetry, tmp_path, argv, capsys):
    from fleet_goodput import console

    assert main([*argv, "--input", str(telemetry), "--output", str(tmp_path / "out")]) == 0
    assert console.verbosity() == argv.count("-v") + argv.count("--verbose") + 2 * argv.count("-vv")
    assert "\nEvent time: as of 2026-01-01T00:09:40Z; " in capsys.readouterr().out


def test_a_submitted_dataflow_job_prints_its_id_and_console_url(capsys):
    options = parse_options(
        "run", ["--input=gs://b/in", "--output=gs://b/out", "--project=fleet-project", "--region=europe-west4"]
    )
    result = DataflowPipelineResult(Job(id="2026-01-02_03_04_05-123"), runner=None)
    announce_job(result, options)
    url = "https://console.cloud.google.com/dataflow/jobs/europe-west4/2026-01-02_03_04_05-123?project=fleet-project"
    assert capsys.readouterr().out == f"Dataflow job 2026-01-02_03_04_05-123 submitted: {url}\n"
    assert console_url("fleet-project", "europe-west4", "2026-01-02_03_04_05-123") == url


BEAM_FREE = [
    ["--help"],
    ["sql", "--help"],
    ["runs", "--help"],
    ["import", "--help"],
    ["runs", "--output", "/nonexistent"],
    ["sql", "--output", "/nonexistent", "select 1"],
]


def imported_by(argv: list[str]) -> tuple[set[str], str]:
    """The top-level packages `mpg ARGV` imports (from `python -X importtime`), and what it printed."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fleet_goodput.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    imported = {
        line.split("|")[-1].strip().split(".")[0] for line in run.stderr.splitlines() if line.startswith("import time:")
    }
    assert "fleet_goodput" in imported  # the log is there
    return imported, run.stdout


@pytest.mark.parametrize("argv", BEAM_FREE, ids=" ".join)
def test_commands_that_do_not_run_a_pipeline_never_import_beam_or_gx(argv):
    imported, _ = imported_by(argv)
    assert not imported & {"apache_beam", "great_expectations"}


def test_the_list_of_commands_loads_no_data_library():
    """`mpg --help` imports every command's module to list them, and each loads its libraries inside
    its command: no Arrow, numpy, polars, DuckDB, Delta, YAML or progress bar (issue 38: under 0.5 CPU s)."""
    imported, printed = imported_by(["--help"])
    assert "usage: mpg" in printed
    assert not imported & {"pyarrow", "numpy", "polars", "duckdb", "deltalake", "yaml", "tqdm", "pandas"}


@pytest.mark.parametrize(
    "argv",
    [
        ["rollback", "--output", "out", "--to", "9223372036854775808"],
        ["rollback", "--output", "out", "--to", "0"],
        ["sql", "--output", "out", "--run", "-3", "select 1"],
        ["sql", "--output", "out", "--run", "one", "select 1"],
    ],
    ids=" ".join,
)
def test_a_run_number_no_store_can_hold_is_a_bad_argument_not_damage(argv, capsys):
    """A mistyped run number is exit 2 naming the flag, before any store is opened (a number past a signed
    64-bit integer once read as a damaged record of runs, exit 3)."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert f"argument {argv[3]}: not a run number" in capsys.readouterr().err


def test_a_run_imports_only_what_it_uses(telemetry, tmp_path):
    """`mpg run -q` computes, commits and builds the views, and prints no headline: no report code, quality
    suites, importers, Prometheus exporter or simulator, nor the Dask runner it was not asked for (issue 38: a
    run's fixed cost)."""
    run = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "fleet_goodput.cli",
            "run",
            "--input",
            str(telemetry),
            "--output",
            str(tmp_path / "out"),
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "fleet_goodput.runs.batch" in imported and "fleet_goodput.store.views" in imported  # the log is there
    own = {name for name in imported if name.startswith("fleet_goodput.")}
    unused = {
        name for name in own if name.split(".")[1] in ("report", "quality", "importers", "monitoring", "simulator")
    }
    assert not unused
    assert not {name.split(".")[0] for name in imported} & {
        "great_expectations",
        "jinja2",
        "mistune",
        "dask",
        "distributed",
        "prometheus_client",
    }
