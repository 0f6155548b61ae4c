"""Stores protect themselves: someone's folder is never overwritten, a damaged store is named, a lost race is an error.

Each damage is done by hand to a real store (the worked example's run, tests/conftest.py,
and a second run over one more event), as a disk, a careless `rm` or a copy would do it.
Every command that opens the store refuses it with what is damaged and the way back,
changing nothing; `mpg check` finds it, and `--repair` repairs what it says it can.
"""

from __future__ import annotations

import json
import re
import shutil
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

import worked_example
from fleet_goodput.cli import main
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreDamaged
from fleet_goodput.store.layout import MARKER, table_paths
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events

pytestmark = pytest.mark.slow  # end to end: a second run, and `mpg run` in a second process

HINT = "nothing was changed; `mpg check --output {root}` says what is damaged and how to recover"


def _root(path: Path) -> str:
    return str(path.resolve())


@pytest.fixture(scope="module")
def stores(worked_example_run, tmp_path_factory):
    """`one`: the worked example's store (run 1); `two`: it continued by a run over one more event
    (run 2); `more`: that event's input; `in`: the worked example's."""
    root = tmp_path_factory.mktemp("stores")
    shutil.copytree(worked_example_run[1], root / "one")
    shutil.copytree(worked_example_run[1], root / "two")
    allocate = next(r for r in worked_example.records()["scheduler"] if r["type"] == "ALLOCATE")
    extra = {**allocate, "event_id": "s-next", "event_time": worked_example.T0_US + 600_000_000, "job_id": "j9"}
    write_events(root / "more" / "scheduler" / "part-1.avro", "scheduler", [extra])
    assert main(["-q", "run", "--input", str(root / "more"), "--output", str(root / "two")]) == 0
    return {"one": root / "one", "two": root / "two", "more": root / "more", "in": worked_example_run[0]}


def _copy(stores, name: str, tmp_path: Path) -> Path:
    shutil.copytree(stores[name], tmp_path / name)
    return tmp_path / name


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _figures(output: Path, run: int | None = None) -> list[tuple]:
    with connect(output, run=run) as connection:
        return (
            connection.execute("select * from job_window order by all").fetchall()
            + connection.execute("select * from rejected order by all").fetchall()
        )


# ---- a folder that is not ours -------------------------------------------------------------------------------
def _someones_folder(path: Path) -> Path:
    for name in ("tables/sales", "state", "runs"):
        (path / name).mkdir(parents=True)
        (path / name / "data.csv").write_text("their,own\n1,2\n")
    (path / "manifest.json").write_text('{"project": "theirs"}\n')
    return path


def test_replace_refuses_a_folder_that_is_not_a_store_and_deletes_nothing(tmp_path, stores, capsys):
    folder = _someones_folder(tmp_path / "theirs")
    before = _listing(folder)
    assert main(["-q", "run", "--replace", "--input", str(stores["in"]), "--output", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"mpg run: {_root(folder)} is not empty and is not an output of fleet-goodput (no {MARKER} file, no runs "
        "table of ours): it holds manifest.json, runs/, state/, tables/. A run writes only into an empty folder or "
        "one of its outputs, and --replace deletes only those: give --output a new or empty folder\n"
    )
    assert _listing(folder) == before and not (folder / ".lock").exists()


def test_a_first_run_into_a_folder_of_someone_else_overwrites_nothing(tmp_path, stores, capsys):
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"project": "theirs"}\n')
    assert main(["-q", "run", "--input", str(stores["in"]), "--output", str(folder)]) == 2
    assert "it holds manifest.json. A run writes only into an empty folder" in capsys.readouterr().err
    assert _listing(folder) == {"manifest.json": b'{"project": "theirs"}\n'}


def test_a_store_is_marked_at_its_first_run_and_replace_keeps_working_on_it(tmp_path, stores):
    marker = json.loads((stores["one"] / MARKER).read_text())
    assert marker["format"] == 1
    output = _copy(stores, "two", tmp_path)
    assert main(["-q", "run", "--replace", "--input", str(stores["in"]), "--output", str(output)]) == 0
    assert [r.run_id for r in Store(output).runs()] == [1] and _figures(output) == _figures(stores["one"])


def test_a_store_made_before_the_marker_is_recognised_and_marked(tmp_path, stores):
    output = _copy(stores, "one", tmp_path)
    (output / MARKER).unlink()
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 0
    assert (output / MARKER).exists() and _figures(output) == _figures(stores["two"])
    (output / MARKER).unlink()
    assert main(["-q", "run", "--replace", "--input", str(stores["in"]), "--output", str(output)]) == 0
    assert (output / MARKER).exists() and _figures(output) == _figures(stores["one"])


def test_a_store_of_a_newer_format_is_refused(tmp_path, stores, capsys):
    output = _copy(stores, "one", tmp_path)
    (output / MARKER).write_text('{"format": 2}\n')
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 2
    assert capsys.readouterr().err == (
        f"mpg run: {_root(output)} was written by a newer fleet-goodput (store format "
        "2, this one knows 1): upgrade fleet-goodput to use it\n"
    )


# ---- damage ---------------------------------------------------------------------------------------------------
def _commit(output: Path, relative: str, version: int) -> Path:
    return output / relative / "_delta_log" / f"{version:020d}.json"


def _tear(path: Path) -> None:
    text = path.read_bytes()
    path.write_bytes(text[: len(text) // 2])


def _data_file(output: Path, name: str, record) -> Path:
    return output / Store(output).files(name, record)[0]


def _refused_everywhere(output: Path, message: str, capsys) -> None:
    """`mpg run`, `mpg sql`, `mpg runs` (for the runs), `mpg validate` and fleet_goodput.open refuse the store
    with `message` (a regular expression where the library's own words appear), exit 3, and change nothing."""
    import fleet_goodput

    before = _listing(output)
    more = output.parent / "more-input"
    write_events(
        more / "profiler" / "part-9.avro", "profiler", [{**worked_example.records()["profiler"][0], "event_id": "p-9"}]
    )
    for command in (["run", "--input", str(more)], ["sql", "select 1"], ["validate"]):
        assert main(["-q", command[0], "--output", str(output), *command[1:]]) == 3, command
        err = capsys.readouterr().err
        assert re.fullmatch(f"mpg {command[0]}: {message}\n", err), err
    with pytest.raises(StoreDamaged, match=f"^{message}$"):
        fleet_goodput.open(output)
    assert _listing(output) == before


def _message(*parts: str) -> str:
    """A message of literal parts, with `...` where a library's own words are."""
    return "".join(".+" if part == "..." else re.escape(part) for part in parts)


def _damaged(output: Path, run: int, *problems: str) -> str:
    root = _root(output)
    return _message(
        f"{root} is damaged (run {run} is its latest):\n",
        *[piece for problem in problems for piece in ("  ", problem, "\n")],
        HINT.format(root=root),
    )


def _check(output: Path, capsys, *args: str) -> tuple[int, str]:
    code = main(["check", "--output", str(output), *args])
    return code, capsys.readouterr().out


NO_REPAIR = (
    "--repair cannot repair this without losing data: {why}. Start the output afresh and run every "
    "input again:\n  mpg run --replace --input DIR --output {root}\n"
    "(copy the folder first if you want to keep what is left of it).\n"
)


def test_a_torn_last_commit_of_the_runs_is_named_and_repaired(tmp_path, stores, capsys):
    output = _copy(stores, "two", tmp_path)
    torn = _commit(output, "runs", 1)
    _tear(torn)
    root = _root(output)
    _refused_everywhere(
        output,
        _message(
            f"{root}/runs/_delta_log cannot be read (",
            "...",
            "): the record of the store's runs is damaged; " + HINT.format(root=root),
        ),
        capsys,
    )
    assert main(["runs", "--output", str(output)]) == 3
    capsys.readouterr()
    code, out = _check(output, capsys)
    repair = (
        "move runs/_delta_log/00000000000000000001.json aside to _damaged/ and restore every table to the run "
        "before it; the next run applies its input files again"
    )
    assert (code, out) == (
        3,
        f"{root} is damaged:\n  runs/_delta_log/00000000000000000001.json, the last commit of "
        "the runs, is torn (not whole JSON): the run it recorded was never whole\n"
        f"`mpg check --output {root} --repair` would {repair}.\n",
    )
    torn_bytes = torn.read_bytes()
    code, out = _check(output, capsys, "--repair")
    assert code == 0 and out.endswith(
        f"repairing: {repair}\n{root}: whole (1 run(s); the latest run's tables, data "
        "files and saved state are all there and readable)\n"
    ), out
    assert [p.read_bytes() for p in (output / "_damaged").rglob("*.json")] == [torn_bytes]  # kept, not deleted
    assert _figures(output) == _figures(stores["one"])
    # The torn run's input is applied again: the store ends as the two runs left it.
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 0
    assert _figures(output) == _figures(stores["two"])


def test_a_deleted_commit_of_a_table_log_rolls_back_to_the_last_whole_run(tmp_path, stores, capsys):
    output = _copy(stores, "two", tmp_path)
    first, latest = Store(output).runs()
    name = next(
        name for name in ("job_window", "rejected_pending", "rejected") if latest.versions[name] != first.versions[name]
    )  # a table run 2 wrote
    relative, version = f"tables/{name}", latest.versions[name]
    _commit(output, relative, version).unlink()
    problem = (
        f"{relative}/_delta_log/{version:020d}.json is missing: version {version} of {relative}, which run 2 names"
    )
    _refused_everywhere(output, _damaged(output, 2, problem), capsys)
    root = _root(output)
    repair = (
        "roll the store back to run 1, the latest whole one: restore the runs table and every table to its "
        "versions (run(s) 2 stay in the Delta history); the next run applies the input files that came after "
        "it again"
    )
    assert _check(output, capsys) == (
        3,
        f"{root} is damaged:\n  run 2 (the latest): {problem}\n`mpg check --output {root} --repair` would {repair}.\n",
    )
    code, out = _check(output, capsys, "--repair")
    assert code == 0 and out.endswith(
        "whole (1 run(s); the latest run's tables, data files and saved state are all there and readable)\n"
    ), out
    assert _figures(output) == _figures(stores["one"])
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 0
    assert _figures(output) == _figures(stores["two"]) and Store(output).latest().run_id == 2


def test_a_torn_commit_a_killed_run_left_in_a_table_log_is_set_aside(tmp_path, stores, capsys):
    """A run killed in its commit, or a disk, tears a table's commit after the version the latest run
    names: no run needs it, but no reader gets past it, nor the next run's undo of the killed run."""
    from deltalake import write_deltalake

    output = _copy(stores, "one", tmp_path)
    path = output / "tables" / "job_window"
    write_deltalake(str(path), DeltaTable(str(path)).to_pyarrow_table(), mode="append")  # the killed run's commit
    version = Store(output).latest().versions["job_window"] + 1
    torn = _commit(output, "tables/job_window", version)
    _tear(torn)
    relative = f"tables/job_window/_delta_log/{version:020d}.json"
    problem = f"{relative}, a commit after the version run 1 names, is torn (not whole JSON)"
    _refused_everywhere(output, _damaged(output, 1, problem), capsys)
    root = _root(output)
    repair = f"move {relative} aside to _damaged/ and restore those tables to run 1's versions"
    assert _check(output, capsys) == (
        3,
        f"{root} is damaged:\n  {problem}\n`mpg check --output {root} --repair` would {repair}.\n",
    )
    torn_bytes = torn.read_bytes()
    assert _check(output, capsys, "--repair")[0] == 0
    assert [p.read_bytes() for p in (output / "_damaged").rglob("*.json")] == [torn_bytes]
    assert _figures(output) == _figures(stores["one"])
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 0
    assert _figures(output) == _figures(stores["two"])


def test_an_overwritten_parquet_file_is_named_and_the_store_rolled_back(tmp_path, stores, capsys):
    output = _copy(stores, "two", tmp_path)
    store = Store(output)
    first, latest = store.runs()
    name = next(n for n in ("rejected", "state_keys") if set(store.files(n, latest)) - set(store.files(n, first)))
    damaged = next(iter(set(store.files(name, latest)) - set(store.files(name, first))))
    size = (output / damaged).stat().st_size
    (output / damaged).write_bytes(b"overwritten")
    problem = f"data file {damaged} is damaged: 11 bytes, its Delta log says {size:,}"
    _refused_everywhere(output, _damaged(output, 2, problem), capsys)
    code, out = _check(output, capsys)
    assert code == 3 and f"  run 2 (the latest): {problem}\n" in out and "would roll the store back to run 1" in out
    assert _check(output, capsys, "--repair")[0] == 0
    assert _figures(output) == _figures(stores["one"])


def test_a_parquet_file_overwritten_at_its_size_is_found_by_check(tmp_path, stores, capsys):
    output = _copy(stores, "one", tmp_path)
    damaged = _data_file(output, "job_window", Store(output).latest())
    damaged.write_bytes(b"\0" * damaged.stat().st_size)
    relative = damaged.relative_to(output)
    code, out = _check(output, capsys)
    root = _root(output)
    assert code == 3
    assert re.fullmatch(
        _message(
            f"{root} is damaged:\n  run 1 (the latest): data file {relative} is damaged: ",
            "...",
            "\n",
            NO_REPAIR.format(why="no earlier run is whole to roll back to", root=root),
        ),
        out,
    ), out


def _scrambled(data: bytes, start: int, end: int) -> bytes:
    """`data` with the bytes from `start` to `end` changed (each maps to another), the size kept."""
    return data[:start] + bytes((b * 7 + 13) % 256 for b in data[start:end]) + data[end:]


@pytest.mark.parametrize("where", ["footer", "first page header"])
def test_a_parquet_file_overwritten_at_its_size_is_damage_to_its_readers_too(tmp_path, stores, capsys, where):
    """The size is what opening a store checks; a file overwritten at its size fails the query that reads it.
    That failure is named as damage (exit 3, the file named, `mpg check` pointed to) by mpg sql, validate
    and report, never a query error or a traceback; a query's own mistake on a whole store stays exit 2."""
    output = _copy(stores, "one", tmp_path)
    damaged = _data_file(output, "jobs", Store(output).latest())
    data = damaged.read_bytes()
    damaged.write_bytes(
        _scrambled(data, len(data) - 60, len(data) - 8) if where == "footer" else _scrambled(data, 4, 40)
    )  # after the leading magic bytes: the first page's header
    relative = damaged.relative_to(output)
    root = _root(output)
    expected = _message(
        f"{root} is damaged (a query could not read run 1):\n  data file {relative} is damaged: ",
        "...",
        "\n",
        HINT.format(root=root),
    )
    for command in (["sql", "select * from jobs"], ["validate"], ["report"]):
        assert main(["-q", command[0], "--output", str(output), *command[1:]]) == 3, command
        err = capsys.readouterr().err
        assert re.search(f"mpg {command[0]}: {expected}\n$", err), err
    assert main(["sql", "--output", str(stores["one"]), "select no_such_column from jobs"]) == 2
    assert "Binder Error" in capsys.readouterr().err


@pytest.mark.parametrize("state", ["state/keys", "state/files"])
def test_a_deleted_saved_state_is_named_and_cannot_be_repaired(tmp_path, stores, capsys, state):
    output = _copy(stores, "one", tmp_path)
    shutil.rmtree(output / state)
    problem = f"{state}/ is missing (run 1 names its version 0)"
    _refused_everywhere(output, _damaged(output, 1, problem), capsys)
    root = _root(output)
    expected = f"{root} is damaged:\n  run 1 (the latest): {problem}\n" + NO_REPAIR.format(
        why="no earlier run is whole to roll back to", root=root
    )
    assert _check(output, capsys) == (3, expected)
    before = _listing(output)
    assert _check(output, capsys, "--repair") == (3, expected)  # nothing safe to do: nothing done
    assert _listing(output) == before


def test_deleted_runs_are_named_not_restarted(tmp_path, stores, capsys):
    """Without its runs a store's next run would start the history again over tables that hold it."""
    output = _copy(stores, "one", tmp_path)
    shutil.rmtree(output / "runs")
    root = _root(output)
    message = (
        f"{root}/runs/ is missing, but manifest.json says run 1 was committed: the record of the store's runs "
        "is gone (deleted by hand?)"
    )
    _refused_everywhere(output, _message(message + "; " + HINT.format(root=root)), capsys)
    why = "the record of the store's runs is lost, and with it which table versions make each run"
    assert _check(output, capsys) == (3, f"{root} is damaged:\n  {message}\n" + NO_REPAIR.format(why=why, root=root))
    # --replace is the way back, and it works on the damaged store.
    assert main(["-q", "run", "--replace", "--input", str(stores["in"]), "--output", str(output)]) == 0
    assert _figures(output) == _figures(stores["one"])


def test_check_finds_a_whole_store_whole(stores, capsys):
    root = _root(stores["two"])
    assert _check(stores["two"], capsys) == (
        0,
        f"{root}: whole (2 run(s); the latest run's tables, data files and saved state are all there and readable)\n",
    )


# ---- a lock that does not lock ----------------------------------------------------------------------------------
# `mpg run` in a second process on a file system whose lock does not lock (fcntl.flock does nothing, as on NFS
# without flock): it stops before committing until the test says go, so another run commits in between.
UNLOCKED_RUN = textwrap.dedent("""
    import fcntl, sys, time
    from pathlib import Path
    fcntl.flock = lambda *args, **kwargs: None
    from fleet_goodput.runs import batch
    commit_run, ready, go = batch.commit_run, Path(sys.argv[1]), Path(sys.argv[2])
    def commit_when_told(*args, **kwargs):
        ready.touch()
        while not go.exists():
            time.sleep(0.01)
        return commit_run(*args, **kwargs)
    batch.commit_run = commit_when_told
    from fleet_goodput.cli import main
    sys.exit(main(sys.argv[3:]))
""")


def test_a_run_that_loses_the_race_on_a_lock_that_does_not_lock_ends_with_a_clear_error(tmp_path, stores, capsys):
    output = _copy(stores, "one", tmp_path)
    ready, go = tmp_path / "ready", tmp_path / "go"
    # Its flock holds nothing, its scratch folder's lock included: in a temporary folder of its own, or any
    # run starting meanwhile (this one, or another test's) would take that folder for a killed run's.
    scratch = tmp_path / "loser-tmp"
    scratch.mkdir()
    loser = subprocess.Popen(
        [sys.executable, "-c", UNLOCKED_RUN, ready, go, "-q", "run", "--input", stores["more"], "--output", output],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert loser.poll() is None and time.monotonic() < deadline, loser.communicate()
        time.sleep(0.01)
    # The loser holds no lock: this run takes it, and commits run 2 while the loser waits to commit.
    late_profile = {
        **worked_example.records()["profiler"][0],
        "event_id": "p-later",
        "event_time": worked_example.T0_US + 590_000_000,
    }
    write_events(tmp_path / "winner" / "profiler" / "part-1.avro", "profiler", [late_profile])
    assert main(["-q", "run", "--input", str(tmp_path / "winner"), "--output", str(output)]) == 0
    winner = _figures(output)
    go.touch()
    out, err = loser.communicate(timeout=120)
    root = _root(output)
    assert (loser.returncode, err) == (
        75,
        (
            f"mpg run: run 2 was committed to {root} while this run worked; this run's results were not committed: run "
            f"it again (runs on one output take turns by a lock on {root}/.lock, which this file system did not hold: NFS "
            "without flock? Run one at a time)\n"
        ),
    )
    assert [r.run_id for r in Store(output).runs()] == [1, 2] and _figures(output) == winner
    assert _check(output, capsys)[0] == 0
    for name, relative in table_paths().items():  # the loser wrote nothing
        assert DeltaTable(str(output / relative)).version() == Store(output).latest().versions[name], name
    # Run again, it commits; what the loser staged is gone (its owner is).
    assert main(["-q", "run", "--input", str(stores["more"]), "--output", str(output)]) == 0
    assert Store(output).latest().run_id == 3 and not any((output / "_staging").iterdir())
