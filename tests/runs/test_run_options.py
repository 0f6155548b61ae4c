"""A run's options are parsed once, where they are read, and travel down as one `RunOptions`.

`--as_of` becomes microseconds where the command line is read (the CLI's
parser, the launcher's `typed_values`, the API's `run`), or the command stops
there naming the flag; the run below never sees its text. The command's own
options are not handed to Beam, a run opens its output store once, and it
reads its settings file (and the catalogue the file names) once. The bundled
defaults are read once a process, and a reader (`fg.open`, `mpg sql`,
`mpg validate`, `mpg report`) opens its store once and checks it whole once.
"""

from __future__ import annotations

import shutil
import sys
from datetime import datetime, timedelta, timezone

import pytest

import worked_example
from fleet_goodput import api
from fleet_goodput.cli import build_parser, main
from fleet_goodput.configs import CONFIG_DIR
from fleet_goodput.core.config import bundled_settings
from fleet_goodput.core.options import OptionsError, RunOptions, typed_values
from fleet_goodput.pipelines.options import GoodputOptions, beam_flags_for, parse_options
from fleet_goodput.store import delta_store as store
from fleet_goodput.store import store_check
from fleet_goodput.telemetry.avro_io import write_events

AS_OF = "2026-01-01T01:00:00Z"
AS_OF_US = (1_767_225_600 + 3600) * 1_000_000  # 2026-01-01T00:00:00Z is 1,767,225,600 s after the epoch, plus 1 h


def parsed(argv: list[str]):
    return build_parser(argv).parse_known_args(argv)


def test_the_command_line_gives_the_run_its_as_of_in_microseconds_and_beam_only_beams_flags():
    args, beam_args = parsed(
        [
            "run",
            "--input",
            "in/",
            "--output",
            "out/",
            "--as_of",
            AS_OF,
            "--replace",
            "--runner=FnApiRunner",
            "--project",
            "p",
        ]
    )
    options = RunOptions.of(args, beam_args)
    assert options == RunOptions(
        "in/", "out/", given_as_of_us=AS_OF_US, replace=True, beam_args=("--runner=FnApiRunner", "--project", "p")
    )


def test_the_launcher_types_its_parameters_once_and_its_job_keeps_the_text_given():
    options = parse_options(
        "launcher", ["--input=gs://b/in", "--output=gs://b/out", f"--as_of={AS_OF}", "--window_s=900"]
    )
    assert options.get_all_options()["as_of"] == AS_OF  # what the job's options page on Dataflow shows
    assert typed_values("launcher", options.view_as(GoodputOptions)) == {
        "input": "gs://b/in",
        "output": "gs://b/out",
        "as_of": AS_OF_US,
        "window_s": 900,
        "config": None,
    }


def test_the_api_takes_a_time_as_text_or_a_datetime_to_the_same_microsecond():
    one_hour_east = timezone(timedelta(hours=1))
    assert (
        api._time_us(AS_OF)
        == api._time_us(datetime(2026, 1, 1, 1))
        == api._time_us(datetime(2026, 1, 1, 2, tzinfo=one_hour_east))
        == AS_OF_US
    )


def test_a_bad_as_of_stops_the_command_where_it_is_read_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--input", str(tmp_path), "--output", str(tmp_path / "out"), "--as_of", "yesterday"])
    assert exited.value.code == 2
    assert (
        "error: argument --as_of: not an ISO-8601 time: 'yesterday' (example: 2026-01-01T12:00:00Z)"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()
    launch = parse_options("launcher", ["--input=gs://b/in", "--output=gs://b/out", "--as_of=yesterday"])
    with pytest.raises(OptionsError, match=r"--as_of yesterday: not an ISO-8601 time: 'yesterday'"):
        typed_values("launcher", launch.view_as(GoodputOptions))
    with pytest.raises(ValueError, match="not an ISO-8601 time: 'yesterday'"):
        api._time_us("yesterday")


def test_the_commands_own_option_in_a_configs_beam_section_is_refused(tmp_path):
    config = tmp_path / "beam.yaml"
    config.write_text(f"beam:\n  as_of: '{AS_OF}'\n")
    with pytest.raises(
        OptionsError,
        match=r"--as_of is an option of `run` itself, not a Beam pipeline option "
        rf"\(in the beam: section of {config}\)",
    ):
        beam_flags_for("run", str(config), [])


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({"given_as_of_us": AS_OF_US, "chunk_hours": 24}, "--chunk_hours computes up to each chunk's latest event"),
        ({"chunk_hours": 0}, r"--chunk_hours must be at least 1 \(got 0\)"),
    ],
    ids=["chunks and as_of", "no hours"],
)
def test_options_that_cannot_go_together_are_refused_when_the_run_options_are_made(given, refusal):
    with pytest.raises(ValueError, match=refusal):
        RunOptions("in/", "out/", **given)


def _count_stores(monkeypatch) -> list:
    """The root of every `Store` made from now on, in order."""
    opened = []
    original = store.Store.__init__

    def counted(self, root):
        opened.append(str(root))
        original(self, root)

    monkeypatch.setattr(store.Store, "__init__", counted)
    return opened


def test_a_run_opens_its_output_store_once(tmp_path, monkeypatch, capsys):
    for stream, records in worked_example.records().items():
        write_events(tmp_path / "fleet" / stream / "part-0.avro", stream, records)
    opened = _count_stores(monkeypatch)
    assert main(["run", "--input", str(tmp_path / "fleet"), "--output", str(tmp_path / "out"), "--as_of", AS_OF]) == 0
    assert "Fleet ML Productivity Goodput" in capsys.readouterr().out  # the headline read it too
    assert opened == [str(tmp_path / "out")]


@pytest.mark.parametrize("read", ["fg.open", "fg.open with the settings file", "mpg sql", "mpg validate", "mpg report"])
def test_a_reader_opens_its_store_once_and_checks_it_whole_once(
    read, worked_example_run, tmp_path, monkeypatch, capsys
):
    output = str(tmp_path / "out")
    shutil.copytree(worked_example_run[1], output)
    opened = _count_stores(monkeypatch)
    checked = []  # the run each whole-store check (`require_intact`) looks at
    run_problems = store_check.run_problems

    def counted(checked_store, record, *args, **kwargs):
        checked.append(record.run_id)
        return run_problems(checked_store, record, *args, **kwargs)

    monkeypatch.setattr(store_check, "run_problems", counted)
    if read == "mpg sql":
        assert main(["sql", "--output", output, "select count(*) from jobs"]) == 0
        assert "(1 row)" in capsys.readouterr().out
    elif read in ("mpg validate", "mpg report"):  # every suite, and the report after them, read the run checked
        assert main([read.split()[1], "--output", output]) == 0
        printed = capsys.readouterr().out
        assert "Data quality for 2026-01-01: PASSED" in printed
        assert ("Report: " in printed) == (read == "mpg report")
    else:
        config = {"fg.open": None, "fg.open with the settings file": CONFIG_DIR / "default.yaml"}[read]
        with api.open(output, config=config) as connection:
            assert connection.execute("select count(*) from jobs").fetchone()[0] > 0
    assert opened == [output]
    assert checked == [1]


# Paths whose opens the audit hook counts while a test watches them ({path: opens}); empty otherwise.
_WATCHED: dict[str, int] = {}


def _count_opens(event: str, args: tuple) -> None:
    if event == "open" and _WATCHED and isinstance(args[0], str) and args[0] in _WATCHED:
        _WATCHED[args[0]] += 1


def _watch(path) -> None:
    """Count the opens of `path` from now on (every open by path, whether open, io.open or os.open, raises
    the `open` audit event); a hook cannot be removed, so it is added once, by the first test that watches."""
    if not hasattr(_watch, "hooked"):
        sys.addaudithook(_count_opens)
        _watch.hooked = True
    _WATCHED[str(path)] = 0


def test_a_run_reads_its_settings_file_and_the_catalogue_it_names_once(tmp_path, capsys):
    """The file is read and checked where the run options are built, and that one parsed copy gives the
    run its Beam options, its settings and its streaming settings, under the output's lock too."""
    for stream, records in worked_example.records().items():
        write_events(tmp_path / "fleet" / stream / "part-0.avro", stream, records)
    catalogue = tmp_path / "parts.yaml"
    shutil.copy(CONFIG_DIR / "accelerators.yaml", catalogue)  # a copy: the defaults read the bundled one
    config = tmp_path / "settings.yaml"
    config.write_text(
        "window_s: 3600\naccelerators: parts.yaml\nbeam:\n  direct_num_workers: 1\nruns:\n  allowed_lateness_s: 3600\n"
    )
    _watch(config)
    _watch(catalogue)
    try:
        assert (
            main(
                [
                    "run",
                    "--input",
                    str(tmp_path / "fleet"),
                    "--output",
                    str(tmp_path / "out"),
                    "--as_of",
                    AS_OF,
                    "--config",
                    str(config),
                ]
            )
            == 0
        )
        opens = dict(_WATCHED)
    finally:
        _WATCHED.clear()
    assert "Fleet ML Productivity Goodput" in capsys.readouterr().out
    assert opens == {str(config): 1, str(catalogue): 1}


def test_the_bundled_defaults_are_read_once_a_process(worked_example_run, tmp_path, capsys):
    """configs/default.yaml and the catalogue it names come with the installed package, so a process that runs
    several commands (a notebook, a stream, the commands below) reads them once; a user's file is read each time."""
    output = tmp_path / "out"
    shutil.copytree(worked_example_run[1], output)
    defaults, catalogue = CONFIG_DIR / "default.yaml", CONFIG_DIR / "accelerators.yaml"
    bundled_settings.cache_clear()  # as in a process that has not read them yet
    _watch(defaults)
    _watch(catalogue)
    try:
        assert main(["run", "--input", str(worked_example_run[0]), "--output", str(output)]) == 0  # nothing new
        assert main(["sql", "--output", str(output), "select count(*) from jobs"]) == 0
        api.open(output).close()
        assert main(["runs", "--output", str(output)]) == 0
        opens = dict(_WATCHED)
    finally:
        _WATCHED.clear()
    assert "Nothing new" in capsys.readouterr().out
    assert opens == {str(defaults): 1, str(catalogue): 1}
