"""A store on object storage has the marker, the damage check and `mpg check` that a local one has.

A store on gs:// is read and written through URIs: delta-rs for its tables,
pyarrow's file systems for its own files (fleet_goodput/store/store_files.py).
There is no cloud here, so a `file://` URI stands in: the store takes every
path a gs:// store takes (no lock file, no maintenance, a commit that finds
another run's fails), on the local disk, where the test can damage it.
The commits are a streaming pipeline's panes (fleet_goodput/store/stream_commit.py),
as Dataflow's stream would make them on gs://.
"""

from __future__ import annotations

import json

import pytest

from fleet_goodput import exits
from fleet_goodput.cli import main
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import NotAStore, StoreDamaged, StoreError
from fleet_goodput.store.layout import MARKER
from fleet_goodput.store.store_check import require_intact
from fleet_goodput.store.store_files import StoreFiles
from stream_panes import FIRST, SECOND, commit, productive


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "goodput"


@pytest.fixture
def store(folder) -> Store:
    store = Store(f"file://{folder}")
    commit(store, FIRST, 0)
    commit(store, SECOND, 1)
    return store


def test_a_store_on_a_uri_is_marked_and_reads_whole(store, folder, capsys):
    assert json.loads((folder / MARKER).read_text())["format"] == 1
    assert not (folder / ".lock").exists()  # no lock on object storage: a commit checks for another's instead
    assert require_intact(store).run_id == 2
    assert json.loads((folder / "manifest.json").read_text())["run_id"] == 2
    assert main(["check", "--output", store.root]) == exits.OK
    assert (
        capsys.readouterr().out == f"{store.root}: whole (2 run(s); the latest run's tables, data files and "
        "saved state are all there and readable)\n"
    )


def test_a_folder_of_someone_elses_files_is_refused(folder):
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    with pytest.raises(NotAStore, match="it holds thesis.tex"):
        commit(Store(f"file://{folder}"), FIRST, 0)
    assert sorted(path.name for path in folder.iterdir()) == ["thesis.tex"]  # nothing written beside it


def test_a_store_a_newer_version_marked_is_refused(store, folder):
    (folder / MARKER).write_text(json.dumps({"format": 2}))
    with pytest.raises(StoreError, match="written by a newer fleet-goodput"):
        commit(store, SECOND, 2)


def test_a_missing_data_file_is_named_and_the_store_rolled_back_to_the_last_whole_run(store, folder, capsys):
    latest = store.files("job_window", store.latest())
    assert latest and latest != store.files("job_window", store.runs()[0])
    (folder / latest[0]).unlink()  # deleted by hand from the bucket
    with pytest.raises(StoreDamaged, match=f"data file {latest[0]} is missing"):
        require_intact(store)
    with pytest.raises(StoreDamaged):
        commit(store, SECOND, 2)  # refused before anything changes
    assert main(["check", "--output", store.root]) == exits.DAMAGED
    out = capsys.readouterr().out
    assert f"run 2 (the latest): data file {latest[0]} is missing" in out and "roll the store back to run 1" in out
    assert main(["check", "--output", store.root, "--repair"]) == exits.OK
    assert require_intact(store).run_id == 1 and productive(store) == {0: 100.0}


def test_a_torn_last_commit_of_the_runs_is_named_and_set_aside(store, folder, capsys):
    commits = sorted((folder / "runs" / "_delta_log").glob("*.json"))
    torn = commits[-1]
    torn.write_text(torn.read_text()[:40])  # a commit cut short
    assert main(["check", "--output", store.root]) == exits.DAMAGED
    assert f"runs/_delta_log/{torn.name}, the last commit of the runs, is torn" in capsys.readouterr().out
    assert main(["check", "--output", store.root, "--repair"]) == exits.OK
    assert [path.name for path in (folder / "_damaged").rglob("*.json")] == [torn.name]
    assert require_intact(store).run_id == 1


def test_check_says_when_the_uri_holds_no_store(tmp_path, capsys):
    assert main(["check", "--output", f"file://{tmp_path}/nothing"]) == exits.USAGE
    assert "is not a folder" in capsys.readouterr().err


def test_a_gs_store_goes_through_the_cloud_storage_file_system():
    files = StoreFiles("gs://my-bucket/good put/out")  # made without the network: nothing is read yet
    assert type(files.file_system).__name__ == "GcsFileSystem"
    assert files.path("runs/_delta_log") == "my-bucket/good put/out/runs/_delta_log"
