"""A settings file is parsed safely and checked against a typed schema: each bad value is refused
with its key path and what it expects, before anything runs (fleet_goodput/core/setting_types.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import fleet_goodput as fg
from fleet_goodput.cli import main
from fleet_goodput.core.config import ConfigError, beam_flags, load_catalogue, load_settings
from fleet_goodput.core.run_settings import RunSettings, load_run_settings

WINDOW = "a whole number of seconds that divide a day (86400) evenly, such as 3600"
TEXT_HINT = "(quoted, so it is text: write the number without quotes)"


def _settings_file(tmp_path: Path, text: str, name: str = "settings.yaml") -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path / name


def _refusal(load, path: Path) -> str:
    with pytest.raises(ConfigError) as error:
        load(path)
    return str(error.value)


# ---- parsing ------------------------------------------------------------------
def _laughs(levels: int) -> str:
    """A `beam:` option of nested aliases: ten of the level before at every level, 10**levels strings."""
    lines = ["beam:", "  a0: &a0 lol"]
    lines += [f"  a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_in_the_beam_section_is_refused_before_it_expands(tmp_path):
    """Nine levels stand for 10**9 strings (6 GB and more); six, a million, are enough to show the refusal."""
    path = _settings_file(tmp_path, _laughs(6))
    message = (
        f"config file {path}, line 7: more than 100,000 values once its aliases (*name) are expanded; "
        "settings need far fewer"
    )
    assert _refusal(beam_flags, path) == message
    assert _refusal(load_settings, path) == message
    assert _refusal(load_run_settings, path) == message


def test_a_few_aliases_are_still_accepted(tmp_path):
    """PyYAML's own dump writes an alias for a value used twice (a part's peaks copied to another)."""
    path = _settings_file(tmp_path, "beam:\n  experiments: &shared [a, b]\n  dataflow_service_options: *shared\n")
    assert beam_flags(path) == [
        "--experiments=a",
        "--experiments=b",
        "--dataflow_service_options=a",
        "--dataflow_service_options=b",
    ]


def test_a_settings_file_larger_than_any_settings_is_not_read_to_its_end(tmp_path):
    path = _settings_file(tmp_path, "# " + "x" * (4 << 20) + "\nwindow_s: 3600\n")
    assert _refusal(load_settings, path) == f"config file {path} is larger than 4 MiB: is it a settings file?"


def test_a_folder_given_as_settings_file_is_refused(tmp_path):
    assert _refusal(load_settings, tmp_path) == f"config file {tmp_path} cannot be read: Is a directory"


@pytest.mark.parametrize("depth", [101, 100_000])
def test_a_settings_file_nested_too_deep_is_refused(tmp_path, depth):
    """Not left to the YAML library: some libyaml builds stop at 1,000 levels (scanning ahead of the
    events the guard reads, so they say it first), others never."""
    path = _settings_file(tmp_path, "beam: " + "[" * depth + "]" * depth + "\n")
    ours = f"config file {path}, line 1: nested more than 100 levels deep; settings need far fewer"
    libyamls = f"config file {path} is not valid YAML: exceeded maximum nesting depth at line 1, column "
    refusal = _refusal(beam_flags, path)
    assert refusal == ours or (depth > 1000 and refusal.startswith(libyamls)), refusal


def test_a_settings_file_nested_100_levels_still_reads(tmp_path):
    path = _settings_file(tmp_path, "size_classes: " + "[" * 99 + "]" * 99 + "\n")
    assert (
        _refusal(load_settings, path) != f"config file {path}, line 1: nested more than 100 levels deep; "
        "settings need far fewer"
    )


# ---- window_s -------------------------------------------------------------------
@pytest.mark.parametrize(
    "written, got",
    [
        ("1.5", "1.5"),
        ("true", "True"),  # bool is an int in Python: it once made one-second windows
        ("'3600'", f"the string '3600' {TEXT_HINT}"),
        ("[3600]", "a list"),
        ("7000", "7000"),
    ],
)
def test_window_s_must_be_a_whole_number_of_seconds_that_divide_a_day(tmp_path, written, got):
    path = _settings_file(tmp_path, f"window_s: {written}\n")
    assert _refusal(load_settings, path) == f"config file {path}: window_s: expected {WINDOW}, got {got}"


def test_a_good_window_still_loads(tmp_path):
    assert load_settings(_settings_file(tmp_path, "window_s: 900\n")).window_s == 900


# ---- size classes ------------------------------------------------------------------
@pytest.mark.parametrize(
    "classes, problem",
    [
        (
            "[{name: a, max_chips: 8}, {name: b, max_chips: 64}, {name: c, max_chips: many}]",
            "size_classes[2].max_chips: expected a whole number of chips ≥ 1, got 'many'",
        ),
        ("[{name: a, max_chips: 0}]", "size_classes[0].max_chips: expected a whole number of chips ≥ 1, got 0"),
        ("[{name: a, max_chips: 8.5}]", "size_classes[0].max_chips: expected a whole number of chips ≥ 1, got 8.5"),
        ("[{name: a, max_chips: true}]", "size_classes[0].max_chips: expected a whole number of chips ≥ 1, got True"),
        ("[{name: 8, max_chips: 8}]", "size_classes[0].name: expected a non-empty string, got 8"),
        ("[{max_chips: 8}]", "size_classes[0]: lacks name; expected name, max_chips"),
        (
            "[{name: a, max_chips: 8, colour: red}]",
            "size_classes[0]: has unknown key(s) colour; expected name, max_chips",
        ),
        ("[a, b]", "size_classes[0]: expected a mapping {name, max_chips}, got 'a'"),
        ("{name: a, max_chips: 8}", "size_classes: expected a list of {name, max_chips}, got a mapping"),
        ("[]", "size_classes: expected at least one class, got an empty list"),
        (
            "[{name: a, max_chips: 8}, {name: a, max_chips: 9}]",
            "size_classes[1].name: 'a' names an earlier class too; names must be unique",
        ),
        (
            "[{name: a, max_chips: 64}, {name: b, max_chips: 8}]",
            "size_classes[1].max_chips: expected more than the 64 chips of the class before, got 8",
        ),
        (
            "[{name: a, max_chips: null}, {name: b, max_chips: 8}]",
            "size_classes[1]: follows a class with no limit (max_chips: null), so no job could be in it",
        ),
    ],
)
def test_malformed_size_classes_are_refused_naming_the_entry(tmp_path, classes, problem):
    path = _settings_file(tmp_path, f"size_classes: {classes}\n")
    assert _refusal(load_settings, path) == f"config file {path}: {problem}"


# ---- the streaming section -------------------------------------------------------------
@pytest.mark.parametrize(
    "setting, written, problem",
    [
        ("allowed_lateness_s", "'3600'", f"expected a whole number of seconds ≥ 0, got the string '3600' {TEXT_HINT}"),
        ("allowed_lateness_s", "true", "expected a whole number of seconds ≥ 0, got True"),
        ("allowed_lateness_s", "-1", "expected a whole number of seconds ≥ 0, got -1"),
        ("max_silence_s", "2.5", "expected a whole number of seconds ≥ 0, got 2.5"),
        ("poll_s", ".nan", "expected a positive number of seconds, got nan"),
        ("source", "kafka", "expected one of directory, pubsub, got 'kafka'"),
        ("subscriptions", "[a, b]", "expected a mapping of stream to subscription, got a list"),
    ],
)
@pytest.mark.parametrize("section", ["runs", "streaming"])  # streaming: the section's older name, still read
def test_run_settings_have_strict_types(tmp_path, section, setting, written, problem):
    path = _settings_file(tmp_path, f"{section}:\n  {setting}: {written}\n")
    assert _refusal(load_run_settings, path) == f"config file {path}: {section}.{setting}: {problem}"


def test_a_key_nothing_reads_is_refused_rather_than_left_to_mean_nothing(tmp_path):
    """`runner:` at the top looks like it picks Beam's runner, but only `beam: {runner: ...}` does."""
    path = _settings_file(tmp_path, "window_s: 3600\nrunner: DataflowRunner\n")
    assert _refusal(load_settings, path) == (
        f"unknown setting(s) runner in {path}; known: window_s, accelerators, "
        "size_classes, and the sections beam, runs, report"
    )


def test_a_file_from_before_the_runs_section_means_what_it_meant(tmp_path):
    """`streaming:`, the section's name before it was `runs:`, reads as `runs:` does; `watermark_lag_s`, which
    has changed nothing since a stream commits a run per batch of files, is read and ignored there."""
    older = _settings_file(
        tmp_path, "streaming:\n  allowed_lateness_s: 60\n  watermark_lag_s: 300\n  retention_hours: 2\n", "older.yaml"
    )
    newer = _settings_file(tmp_path, "runs:\n  allowed_lateness_s: 60\n  retention_hours: 2\n", "newer.yaml")
    assert load_run_settings(older) == load_run_settings(newer) == RunSettings(allowed_lateness_s=60, retention_hours=2)
    both = _settings_file(tmp_path, "runs:\n  retention_hours: 2\nstreaming:\n  retention_hours: 3\n")
    assert _refusal(load_run_settings, both) == (
        f"config file {both}: `streaming:` is the older name of `runs:`; keep one of them"
    )
    newer_with_the_older_key = _settings_file(tmp_path, "runs:\n  watermark_lag_s: 300\n", "unknown.yaml")
    assert _refusal(load_run_settings, newer_with_the_older_key) == (
        "unknown runs setting(s) watermark_lag_s; known: allowed_lateness_s, max_silence_s, poll_s, retention_hours, "
        "source, subscriptions"
    )


# ---- the beam section ---------------------------------------------------------------
def test_beam_options_must_be_scalars_or_lists_of_them(tmp_path):
    path = _settings_file(tmp_path, "beam:\n  runner: DirectRunner\n  labels: {team: ml}\n")
    assert _refusal(beam_flags, path) == (
        f"config file {path}: beam.labels: expected a string, number or true/false, or a list of them, got a mapping"
    )
    path = _settings_file(tmp_path, "beam:\n  max_num_workers: 20\n  save_main_session: true\n  experiments: [a, b]\n")
    assert beam_flags(path) == ["--max_num_workers=20", "--save_main_session", "--experiments=a", "--experiments=b"]


# ---- the catalogue --------------------------------------------------------------------
@pytest.mark.parametrize(
    "entry, problem",
    [
        (
            "peak_flops: {bf16: '1e15'}",
            f"x.peak_flops.bf16: expected a positive number of FLOP/s per chip, got the string '1e15' {TEXT_HINT}",
        ),
        ("peak_flops: {bf16: .inf}", "x.peak_flops.bf16: expected a positive number of FLOP/s per chip, got inf"),
        ("peak_flops: {bf16: true}", "x.peak_flops.bf16: expected a positive number of FLOP/s per chip, got True"),
        ("peak_flops: 1.0e15", "x.peak_flops: expected a mapping of precisions to FLOP/s, got 1000000000000000.0"),
        ("peak_flops: {bf16: 1.0e15}\n  url: [a]", "x.url: expected a string, got a list"),
    ],
)
def test_catalogue_values_have_strict_types(tmp_path, entry, problem):
    path = _settings_file(tmp_path, f"x:\n  {entry}\n  hbm_bytes_per_s: 1.0e12\n  source: s\n", "cat.yaml")
    assert _refusal(load_catalogue, path) == f"accelerator catalogue {path}: {problem}"


def test_numbers_in_exponent_form_are_numbers_as_in_yaml_1_2(tmp_path):
    """PyYAML reads `1e15` and `275.0e12` (no sign in the exponent) as text; the settings read numbers."""
    path = _settings_file(
        tmp_path, "x:\n  peak_flops: {bf16: 275.0e12, fp8: 1e15}\n  hbm_bytes_per_s: 1.2E+12\n  source: s\n", "cat.yaml"
    )
    assert load_catalogue(path)["x"].peak_flops == {"bf16": 275.0e12, "fp8": 1e15}


# ---- a size class named with a quote, end to end -----------------------------------------
@pytest.mark.slow  # a pipeline run
def test_a_size_class_named_with_a_quote_works_end_to_end(worked_example_run, tmp_path):
    """The views build SQL from the size classes: a name with a quote once broke the statement."""
    config = _settings_file(tmp_path, 'size_classes:\n  - {name: "o\'clock", max_chips: null}\n')
    output = tmp_path / "out"
    assert main(["run", "--input", str(worked_example_run[0]), "--output", str(output), "--config", str(config)]) == 0
    with fg.open(output) as connection:
        assert connection.execute("select size_class from goodput_by_size_class").fetchall() == [("o'clock",)]
        assert connection.execute("select size_class, max_chips from size_classes").fetchall() == [("o'clock", 2**62)]
    assert main(["report", "--output", str(output), "--date", "2026-01-01"]) == 0
    report = output / "reports" / "2026-01-01"
    with open(report / "by_size_class.csv", newline="") as handle:
        assert [row["size_class"] for row in csv.DictReader(handle)] == ["o'clock"]
    assert "o&#39;clock" in (report / "index.html").read_text()  # escaped where it is shown


def test_mpg_run_refuses_a_bad_settings_file_before_it_writes(tmp_path, capsys):
    path = _settings_file(tmp_path, "window_s: true\n")
    output = tmp_path / "out"
    assert main(["run", "--input", str(tmp_path / "in"), "--output", str(output), "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"mpg run: config file {path}: window_s: expected {WINDOW}, got True\n"
    assert not output.exists()
