"""An output remembers its settings: every reader and every later run uses those its first run stored.

The worked example (docs/metric.md section 4) runs once with custom size classes; job j1
asks for 8 chips, so it is `big` there and `1-8` under the defaults, which is
what every reader is checked for. Runs that must be refused are refused before
any pipeline starts; the few that commit add one capacity event to it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

import fleet_goodput as fg
import worked_example
from fleet_goodput.cli import main
from fleet_goodput.configs import DEFAULT_CONFIG
from fleet_goodput.core.config import load_settings, read_yaml
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import SETTINGS
from fleet_goodput.store.stored_settings import (
    SettingsConflict,
    apply,
    commit_settings,
    differences,
    document,
    kept_settings,
)
from fleet_goodput.store.transaction import begin
from fleet_goodput.store.views import DATABASE_FILE
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow  # several runs and a report end to end: scheduled first (tests/conftest.py)

CLASSES = "size_classes:\n  - {name: small, max_chips: 4}\n  - {name: big, max_chips: null}\n"
DEFAULT_CLASSES = ["1-8", "9-64", "65-512", "513-4096", "4097+"]
CLASS_QUERY = "select size_class from goodput_by_size_class order by all"


@pytest.fixture(scope="module")
def custom(worked_example_run, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(input, output, config): the worked example run once with the size classes `small` and `big`."""
    root = tmp_path_factory.mktemp("custom")
    config = _config(root, "classes.yaml", CLASSES)
    assert (
        main(["run", "--input", str(worked_example_run[0]), "--output", str(root / "out"), "--config", str(config)])
        == 0
    )
    return worked_example_run[0], root / "out", config


def _config(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


def _default_classes(folder: Path) -> Path:
    """A settings file naming the default size classes (YAML reads JSON)."""
    return _config(
        folder, "defaults.yaml", f"size_classes: {json.dumps(document(load_settings(), None)['size_classes'])}\n"
    )


def _catalogue(folder: Path, change) -> Path:
    """A settings file naming a copy of the bundled catalogue changed by `change(parts)`, in `folder`."""
    folder.mkdir()
    parts = read_yaml(Path(str(DEFAULT_CONFIG)).parent / "accelerators.yaml")  # its numbers as the settings read them
    change(parts)
    (folder / "catalogue.yaml").write_text(yaml.safe_dump(parts))
    return _config(folder, "catalogue-settings.yaml", f"accelerators: {folder / 'catalogue.yaml'}\n")


def _copy(output: Path, tmp_path: Path) -> Path:
    shutil.copytree(output, tmp_path / "out")
    return tmp_path / "out"


def _more_input(tmp_path: Path) -> Path:
    """One more capacity event, ten seconds after the worked example ends: a run that commits."""
    capacity = {
        **worked_example.records()["scheduler"][-1],
        "event_id": "cap-c1-later",
        "event_time": worked_example.T0_US + 590_000_000,
    }
    write_events(tmp_path / "more" / "scheduler" / "part-1.avro", "scheduler", [capacity])
    return tmp_path / "more"


def _classes(connection) -> list[str]:
    return [row[0] for row in connection.execute(CLASS_QUERY).fetchall()]


def _setting(output: Path, name: str, run: int | None = None):
    with fg.open(output, run=run) as connection:
        (value,) = connection.execute("select value from settings where setting = ?", [name]).fetchone()
    return json.loads(value)


def _mpg_sql(capsys, output: Path, query: str) -> list[list[str]]:
    assert main(["sql", "--output", str(output), "--format", "csv", query]) == 0
    return list(csv.reader(capsys.readouterr().out.splitlines()))[1:]


def test_the_first_run_stores_its_settings_in_its_commit(worked_example_run, capsys):
    output = worked_example_run[1]
    store = Store(output)
    record = store.latest()
    assert record.versions[SETTINGS] is not None  # named by the run's row, like every table it committed
    rows = store.read(SETTINGS, record).to_pylist()
    assert [row["run_id"] for row in rows] == [1]
    assert json.loads(rows[0]["settings"]) == document(load_settings(), 3600)
    assert _mpg_sql(capsys, output, "select setting, stored from settings") == [
        ["window_s", "True"],
        ["allowed_lateness_s", "True"],
        ["max_silence_s", "True"],
        ["size_classes", "True"],
        ["accelerators", "True"],
    ]


def test_every_reader_uses_the_stored_size_classes(custom, capsys, monkeypatch):
    _, output, config = custom
    assert _mpg_sql(capsys, output, CLASS_QUERY) == [["big"]]
    with fg.open(output) as connection:
        assert _classes(connection) == ["big"]
    with fg.open(output, config=config) as connection:  # the same settings: accepted
        assert _classes(connection) == ["big"]
    monkeypatch.chdir(output)  # goodput.duckdb names its files relative to the output
    with duckdb.connect(DATABASE_FILE, read_only=True) as connection:
        assert _classes(connection) == ["big"]
        assert connection.execute("select size_class from size_classes order by ordinal").fetchall() == [
            ("small",),
            ("big",),
        ]


def test_the_report_and_its_validation_use_the_stored_settings(custom, tmp_path):
    output = _copy(custom[1], tmp_path)
    assert main(["report", "--output", str(output)]) == 0
    with open(output / "reports" / "2026-01-01" / "by_size_class.csv") as handle:
        assert [row["size_class"] for row in csv.DictReader(handle)] == ["big"]


def test_a_reader_given_other_settings_names_each_difference(custom, tmp_path, capsys):
    _, output, _ = custom
    defaults = _default_classes(tmp_path)
    with pytest.raises(
        SettingsConflict,
        match=r"size_classes: stored \[small \(up to 4 chips\), big \(no limit\)\], "
        r"given \[1-8 \(up to 8 chips\), 9-64",
    ):
        fg.open(output, config=defaults)
    window = _config(tmp_path, "window.yaml", "window_s: 1800\n")
    assert main(["validate", "--output", str(output), "--config", str(window)]) == 2
    err = capsys.readouterr().err
    assert "window_s: stored 3600, given 1800" in err and "size_classes" not in err
    assert main(["report", "--output", str(output), "--config", str(defaults)]) == 2
    assert "size_classes: stored" in capsys.readouterr().err
    assert not (output / "reports").exists() and not (output / "quality").exists()


def test_a_run_that_would_change_stored_figures_is_refused_naming_each_difference(custom, tmp_path, capsys):
    output = _copy(custom[1], tmp_path)
    more = _more_input(tmp_path)
    lateness = _config(tmp_path, "lateness.yaml", "window_s: 1800\nstreaming: {allowed_lateness_s: 60}\n")
    defaults = _default_classes(tmp_path)
    peak = _catalogue(tmp_path / "peak", lambda parts: parts["tpu-v5e"]["peak_flops"].update(bf16=2.0e14))
    removed = _catalogue(tmp_path / "removed", lambda parts: parts.pop("a100"))
    refusals = {
        lateness: ["window_s: stored 3600, given 1800", "allowed_lateness_s: stored 3600, given 60"],
        defaults: ["size_classes: stored [small (up to 4 chips), big (no limit)], given [1-8 (up to 8 chips)"],
        peak: ["accelerators.tpu-v5e.peak_flops: stored {bf16: 1.97e+14 FLOP/s}, given {bf16: 2e+14 FLOP/s}"],
        removed: ["accelerators.a100: stored {bf16: 3.12e+14 FLOP/s}, given (absent)"],
    }
    for config, named in refusals.items():
        assert main(["run", "--input", str(more), "--output", str(output), "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert all(difference in err for difference in named), err
        assert "--replace" in err
    assert (
        main(
            [
                "stream",
                "--input",
                str(more),
                "--output",
                str(output),
                "--allowed_lateness_s",
                "60",
                "--stop_after_idle_s",
                "0",
            ]
        )
        == 2
    )
    assert "allowed_lateness_s: stored 3600, given 60" in capsys.readouterr().err
    with pytest.raises(SettingsConflict, match="window_s: stored 3600, given 1800"):
        fg.run(more, output, config=lateness)
    assert [run.run_id for run in Store(output).runs()] == [1]  # nothing was committed


def test_max_silence_s_is_kept_a_run_or_reader_given_another_is_refused(custom, tmp_path, capsys):
    """How long an ended job waits for its profiler sample decides its PG: a store keeps it like the window."""
    output = _copy(custom[1], tmp_path)
    assert _mpg_sql(capsys, output, "select value, stored from settings where setting = 'max_silence_s'") == [
        ["21600", "True"]
    ]  # 6 h, the default, stored by the first run
    more = _more_input(tmp_path)
    silence = _config(tmp_path, "silence.yaml", "runs: {max_silence_s: 600}\n")
    assert main(["run", "--input", str(more), "--output", str(output), "--config", str(silence)]) == 2
    err = capsys.readouterr().err
    assert "max_silence_s: stored 21600, given 600" in err and "--replace" in err
    with pytest.raises(SettingsConflict, match="max_silence_s: stored 21600, given 600"):
        fg.open(output, config=silence)
    assert [run.run_id for run in Store(output).runs()] == [1]  # nothing was committed


def test_a_flex_template_launch_is_refused_at_launch_as_a_run_is(custom, tmp_path):
    from fleet_goodput.runs import launcher
    from fleet_goodput.runs.plan import plan_run

    output = _copy(custom[1], tmp_path)
    more = _more_input(tmp_path)
    plan = plan_run(str(more), Store(output), None)  # what the launcher plans before it submits
    with pytest.raises(SettingsConflict, match="window_s: stored 3600, given 1800"):
        launcher.run([f"--input={more}", f"--output={output}", "--window_s=1800"], plan=plan)


def test_a_run_may_add_an_accelerator_and_stores_it_with_the_run(custom, tmp_path, capsys):
    output = _copy(custom[1], tmp_path)

    def extend(parts):
        parts["tpu-v9"] = {**parts["tpu-v7"], "source": "a future part"}
        parts["tpu-v5e"]["source"] = "a corrected note"

    config = _catalogue(tmp_path / "extended", extend)  # names the catalogue only: the size classes stay the store's
    assert main(["run", "--input", str(_more_input(tmp_path)), "--output", str(output), "--config", str(config)]) == 0
    store = Store(output)
    assert sorted(row["run_id"] for row in store.read(SETTINGS, store.latest()).to_pylist()) == [1, 2]
    catalogue = _setting(output, "accelerators")
    assert "tpu-v9" in catalogue and catalogue["tpu-v5e"]["source"] == "a corrected note"
    assert [c["name"] for c in _setting(output, "size_classes")] == ["small", "big"]
    assert "tpu-v9" not in _setting(output, "accelerators", run=1)  # run 1 reads as it was
    with pytest.raises(SettingsConflict, match=r"accelerators.tpu-v9: stored \(absent\)"):
        fg.open(output, run=1, config=config)


def test_replace_starts_the_output_afresh_with_new_settings(custom, tmp_path):
    input_dir, _, _ = custom
    output = _copy(custom[1], tmp_path)
    window = _config(tmp_path, "window.yaml", "window_s: 1800\n")
    assert main(["run", "--input", str(input_dir), "--output", str(output), "--config", str(window), "--replace"]) == 0
    assert _setting(output, "window_s") == 1800
    assert [c["name"] for c in _setting(output, "size_classes")] == DEFAULT_CLASSES
    assert Store(output).latest().manifest["window_s"] == 1800


def _as_before_settings_were_kept(output: Path) -> None:
    """What an output written before stores kept their settings holds: no settings table, runs that name none."""
    runs = DeltaTable(str(output / "runs")).to_pyarrow_table()
    versions = [
        json.dumps({k: v for k, v in json.loads(text).items() if k != SETTINGS}, sort_keys=True)
        for text in runs["versions"].to_pylist()
    ]
    write_deltalake(
        str(output / "runs"),
        runs.set_column(runs.schema.get_field_index("versions"), "versions", pa.array(versions)),
        mode="overwrite",
    )
    shutil.rmtree(output / SETTINGS)


def test_an_output_from_before_settings_were_kept(worked_example_run, tmp_path, capsys):
    output = _copy(worked_example_run[1], tmp_path)
    _as_before_settings_were_kept(output)
    classes = _config(tmp_path, "classes.yaml", CLASSES)
    # Readers: the window and lateness its manifests record, the rest from --config or the defaults, as before.
    assert _mpg_sql(capsys, output, "select setting, stored from settings") == [
        ["window_s", "True"],
        ["allowed_lateness_s", "True"],
        ["max_silence_s", "False"],
        ["size_classes", "False"],
        ["accelerators", "False"],
    ]
    with fg.open(output) as connection:
        assert _classes(connection) == ["1-8"]
    with fg.open(output, config=classes) as connection:
        assert _classes(connection) == ["big"]
    window = _config(tmp_path, "window.yaml", "window_s: 1800\n")
    with pytest.raises(SettingsConflict, match="window_s: stored 3600, given 1800"):
        fg.open(output, config=window)
    # Its next run stores the settings it computes with, and says so.
    more = _more_input(tmp_path)
    assert main(["run", "--input", str(more), "--output", str(output), "--config", str(window)]) == 2
    assert main(["run", "--input", str(more), "--output", str(output), "--config", str(classes)]) == 0
    assert (
        f"{output} was written before outputs kept their settings: this run stores those it computes with "
        f"(window_s and allowed_lateness_s as its manifests record them, the rest from {classes} and the "
        "defaults)"
    ) in capsys.readouterr().err
    assert _mpg_sql(capsys, output, "select bool_and(stored) from settings") == [["True"]]
    assert _mpg_sql(capsys, output, CLASS_QUERY) == [["big"]]


def test_settings_a_killed_run_wrote_are_not_seen_and_are_undone(custom, tmp_path):
    output = _copy(custom[1], tmp_path)
    store = Store(output)
    before = kept_settings(store, store.latest())
    settings = apply(before, load_settings())
    extended = dataclasses.replace(
        settings, accelerators={**settings.accelerators, "tpu-v9": settings.accelerators["tpu-v7"]}
    )
    commit_settings(begin(store), 2, extended, RunSettings())  # written, but the run's row never committed
    assert DeltaTable(str(output / SETTINGS)).version() > store.latest().versions[SETTINGS]
    assert kept_settings(store, store.latest()) == before
    assert "tpu-v9" not in _setting(output, "accelerators")
    begin(store)  # the next run undoes it first
    assert DeltaTable(str(output / SETTINGS)).to_pyarrow_table().num_rows == 1


def test_which_differences_leave_the_stored_figures_right():
    kept = document(load_settings(), 3600)
    given = json.loads(json.dumps(kept))
    given["accelerators"]["new-part"] = given["accelerators"]["h100"]
    given["accelerators"]["h100"] = {**given["accelerators"]["h100"], "url": "https://example.com/h100"}
    given["accelerators"]["b200"] = {**given["accelerators"]["b200"], "hbm_bytes_per_s": 1.0}
    assert all(d.harmless for d in differences(kept, given))
    assert [d.setting for d in differences(kept, given)] == [
        "accelerators.b200.hbm_bytes_per_s",
        "accelerators.h100.url",
        "accelerators.new-part",
    ]
    given["accelerators"]["h100"]["peak_flops"] = {**given["accelerators"]["h100"]["peak_flops"], "fp4": 1e16}
    del given["accelerators"]["tpu-v4"]
    given["window_s"], given["allowed_lateness_s"] = 900, 0
    given["size_classes"] = given["size_classes"][:-1]
    harmful = [d.setting for d in differences(kept, given) if not d.harmless]
    assert harmful == [
        "window_s",
        "allowed_lateness_s",
        "size_classes",
        "accelerators.h100.peak_flops",
        "accelerators.tpu-v4",
    ]
    assert differences(kept, kept) == [] and differences({}, given) == []


def test_a_size_class_named_with_sql_is_data_not_code(tmp_path):
    """A size class's name reaches the size_classes view as a string literal (fleet_goodput/quoting.py): one named
    to close the literal and add a row adds none, and keeps its name exactly."""
    from fleet_goodput.store.views import _size_classes_sql

    hostile = "x'), (99, 'pwn', 0, 0) --"
    path = _config(
        tmp_path,
        "classes.yaml",
        "size_classes:\n  - {name: " + json.dumps(hostile) + ", max_chips: 4}\n  - {name: big, max_chips: null}\n",
    )
    with duckdb.connect() as connection:
        connection.execute(_size_classes_sql(load_settings(path)))
        rows = connection.execute(
            "select ordinal, size_class, min_chips, max_chips from size_classes order by ordinal"
        ).fetchall()
    assert rows == [(0, hostile, 1, 4), (1, "big", 5, 2**62)]
