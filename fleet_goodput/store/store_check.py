"""Is the output store whole? What `mpg check` verifies, and what it can repair.

A store is damaged when what its runs name is not there: a commit of a Delta
log torn or deleted, a data file deleted or overwritten, `state/` or `runs/`
deleted by hand. Every command that opens a store (`mpg run`, `mpg sql`,
`mpg validate`, `mpg report`, `fleet_goodput.open`) first checks the latest
run (`require_intact`): its `runs` row, every table version it names, and
every data file of those versions, present at the size its log records,
and that no commit after those versions is torn. A
damaged store is refused with what is wrong, before anything is read or
changed, instead of a traceback or a run that starts the history again.

`inspect` checks more (every run, and each data file's Parquet footer) and
says what `repair` can do, which is only what loses nothing the store still
holds whole:
  - a torn last commit of `runs/_delta_log` is moved aside (to
    OUTPUT/_damaged/), so the run before it is the latest again; its input
    files are applied again by the next run; so is a torn commit of a
    table's log after the version the latest run names (no run needs it);
  - a latest run that names something missing or damaged is rolled back to
    the latest earlier run that is whole: the `runs` table and every table
    are restored to that run's versions (Delta restore: a new version, the
    later runs' rows stay in the history), and the next run applies the
    input files that came after it again.
Otherwise (no earlier run is whole, `runs/` or a saved state gone) the way
back is to start the output afresh with --replace and run the inputs again.

The logs and data files are listed, sized and read through `StoreFiles`
(store_files.py): a store on gs:// is checked and repaired by this code too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from fleet_goodput.store import delta_arrow
from fleet_goodput.store.delta_log import versions_in
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreDamaged
from fleet_goodput.store.killed_runs import undo_killed_run
from fleet_goodput.store.layout import RUNS, table_paths
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.store_files import StoreFiles

DAMAGED_DIR = "_damaged"  # where --repair moves what it takes out of a log


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the store."""

    problem: str


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    repair: str | None  # what --repair would do, or None when nothing safe can
    why_not: str = ""  # why nothing safe can
    rollback_to: RunRecord | None = None
    set_aside: tuple[str, ...] = ()  # torn commits no committed run needs (paths in the store), which --repair
    # moves to _damaged/
    runs: int = 0

    @property
    def intact(self) -> bool:
        return not self.findings


def require_intact(store: Store) -> RunRecord | None:
    """The latest run, if the store holds it whole; StoreDamaged naming what is not, before anything reads it."""
    latest = store.latest()
    if latest is None:
        return latest
    problems = run_problems(store, latest) + [problem for problem, _ in torn_after(store, latest)]
    if problems:
        raise StoreDamaged(
            f"{store.root} is damaged (run {latest.run_id} is its latest):\n"
            + "".join(f"  {problem}\n" for problem in problems),
            store.root,
        )
    return latest


def cause(error: BaseException) -> str:
    """The first line of a library's error, without the backtrace delta-rs appends."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def run_problems(store: Store, record: RunRecord, read_footers: bool = False, read_whole: bool = False) -> list[str]:
    """What of `record`'s snapshot is missing or damaged: table versions that do not load, data
    files absent or of another size than their log records (and, with `read_footers`, unreadable;
    with `read_whole`, not readable to their last page)."""
    problems = []
    files = store.store_files
    for name, relative in table_paths().items():
        version = record.versions.get(name)
        if version is None:
            continue
        log = f"{relative}/_delta_log"
        if not files.is_dir(log):
            problems.append(f"{relative}/ is missing (run {record.run_id} names its version {version})")
            continue
        gone = _missing_commits(files.names(log), version)
        if gone:
            named = (
                f"which run {record.run_id} names"
                if gone[-1] == version
                else f"which run {record.run_id}'s version {version} is built on"
            )
            problems.append(
                f"{relative}/_delta_log/{gone[-1]:020d}.json is missing: version {gone[-1]} of {relative}, {named}"
            )
            continue
        try:
            table = store.delta_table(relative, version)  # the run's open table, under the lock
            if table is None:
                raise TableNotFoundError(f"no Delta log in {relative}/_delta_log")
            # From Arrow's C stream, not `pa.table(...)`, which first asks pandas (importing it) whether
            # the object is a DataFrame.
            actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
        except Exception as error:  # delta-rs names the torn or missing commit
            problems.append(
                f"{relative}/_delta_log cannot be read at version {version}, which run "
                f"{record.run_id} names: {cause(error)}"
            )
            continue
        for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist()):
            problem = _file_problem(files, f"{relative}/{unquote(path)}", size, read_footers, read_whole)
            if problem:
                problems.append(problem)
    return problems


def _missing_commits(names: list[str], version: int) -> list[int]:
    """The commits that reading `version` needs and a log of these file `names` lacks: every one after
    the last checkpoint up to it (Delta may clean up the commits a checkpoint holds)."""
    checkpoints = [int(name[:20]) for name in names if ".checkpoint" in name and name[:20].isdigit()]
    start = max((c for c in checkpoints if c <= version), default=-1) + 1
    commits = set(versions_in(names, ".json"))
    return [v for v in range(start, version + 1) if v not in commits]


def _file_problem(
    files: StoreFiles, relative: str, size: int, read_footer: bool, read_whole: bool = False
) -> str | None:
    actual = files.size(relative)
    if actual is None:
        return f"data file {relative} is missing"
    if actual != size:
        return f"data file {relative} is damaged: {actual:,} bytes, its Delta log says {size:,}"
    if read_footer or read_whole:
        try:
            with files.open(relative) as handle:
                pq.read_table(handle) if read_whole else pq.read_metadata(handle)
        except Exception as error:  # pyarrow's "magic bytes not found", a short footer, a page header…
            return f"data file {relative} is damaged: {cause(error)}"
    return None


# ---- mpg check --------------------------------------------------------------------
def inspect(store: Store) -> Report:
    """Everything `mpg check` verifies, and what --repair would do about what it finds."""
    try:
        runs = store.runs()
    except StoreDamaged as damage:
        torn = torn_runs_commit(store)
        if torn is None:
            return Report(
                (Finding(damage.problem),),
                None,
                why_not="the record of the store's runs is lost, and with it which table versions make each run",
            )
        return Report(
            (
                Finding(
                    f"{torn}, the last commit of the runs, is torn (not whole "
                    "JSON): the run it recorded was never whole"
                ),
            ),
            f"move {torn} aside to {DAMAGED_DIR}/ and restore every table to the "
            "run before it; the next run applies its input files again",
            set_aside=(torn,),
        )
    if not runs:
        return Report((), None)
    latest = runs[-1]
    problems = run_problems(store, latest, read_footers=True)
    torn = torn_after(store, latest)
    if not problems and not torn:
        return Report((), None, runs=len(runs))
    findings = tuple(Finding(f"run {latest.run_id} (the latest): {problem}") for problem in problems)
    findings += tuple(Finding(problem) for problem, _ in torn)
    if not problems:
        names = ", ".join(path for _, path in torn)
        return Report(
            findings,
            f"move {names} aside to {DAMAGED_DIR}/ and restore those tables to run {latest.run_id}'s versions",
            set_aside=tuple(path for _, path in torn),
            runs=len(runs),
        )
    earlier = next((run for run in reversed(runs[:-1]) if not run_problems(store, run, read_footers=True)), None)
    if earlier is None:
        return Report(findings, None, runs=len(runs), why_not="no earlier run is whole to roll back to")
    if not _restorable(store):
        return Report(
            findings,
            None,
            runs=len(runs),
            why_not=f"run {earlier.run_id} is whole, but a table's log does not read at its latest "
            "version, which a Delta restore starts from",
        )
    later = ", ".join(str(run.run_id) for run in runs if run.run_id > earlier.run_id)
    return Report(
        findings,
        f"roll the store back to run {earlier.run_id}, the latest whole one: restore the runs "
        f"table and every table to its versions (run(s) {later} stay in the Delta history); "
        "the next run applies the input files that came after it again",
        rollback_to=earlier,
        runs=len(runs),
    )


def torn_after(store: Store, record: RunRecord) -> list[tuple[str, str]]:
    """The torn commits (not whole JSON) of each table's log after the version `record` names, with their
    paths in the store: what a run killed mid-commit, or a disk, left; no committed run needs them, but
    no table reads past them."""
    torn = []
    files = store.store_files
    for name, relative in table_paths().items():
        recorded = record.versions.get(name)
        log = f"{relative}/_delta_log"
        later = sorted(
            version for version in versions_in(files.names(log), ".json") if recorded is None or version > recorded
        )
        torn += [
            (
                f"{log}/{version:020d}.json, a commit after the version run {record.run_id} names, is "
                "torn (not whole JSON)",
                f"{log}/{version:020d}.json",
            )
            for version in later
            if not _whole_json(files, f"{log}/{version:020d}.json")
        ]
    return torn


def _whole_json(files: StoreFiles, relative: str) -> bool:
    try:
        for line in files.read_text(relative).splitlines():
            if line.strip():
                json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def torn_runs_commit(store: Store) -> str | None:
    """The last commit of the runs' log (its path in the store), if it is torn (not whole JSON) and the
    log reads without it."""
    files = store.store_files
    log = f"{RUNS}/_delta_log"
    commits = sorted(versions_in(files.names(log), ".json"))
    if not commits:
        return None
    version = commits[-1]
    last = f"{log}/{version:020d}.json"
    if _whole_json(files, last) or version == 0:
        return None  # the damage is elsewhere, or there is no earlier version to fall back to
    try:
        DeltaTable(store.path(RUNS), version=version - 1)
    except Exception:
        return None
    return last


def _restorable(store: Store) -> bool:
    """Whether every table's log reads at its latest version, which a Delta restore starts from."""
    for relative in [RUNS, *table_paths().values()]:
        try:
            store.delta_table(relative)
        except Exception:
            return False
    return True


def repair(store: Store, report: Report) -> None:
    """Do what `report.repair` says (the caller holds the store's lock)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    files = store.store_files
    # A torn commit and every commit after it (a log is read in order: none after it is reachable).
    for torn in report.set_aside:
        log, name = torn.rsplit("/", 1)
        for version in sorted(versions_in(files.names(log), ".json")):
            commit = f"{log}/{version:020d}.json"
            if version >= int(name[:20]) and files.is_file(commit):
                files.move(commit, f"{DAMAGED_DIR}/{stamp}/{commit}")
    store.forget_open_tables()
    if report.rollback_to is not None:
        runs_table = DeltaTable(store.path(RUNS))
        runs_table.restore(_runs_version_of(store, report.rollback_to.run_id, runs_table.version()))
    undo_killed_run(store)


def _runs_version_of(store: Store, run_id: int, latest: int) -> int:
    """The version of the runs table whose last run is `run_id`."""
    for version in range(latest, -1, -1):
        try:
            rows = delta_arrow.dataset(DeltaTable(store.path(RUNS), version=version)).to_table(columns=["run_id"])
        except Exception:  # a version whose log entries were cleaned up (maintenance.maintain): none earlier reads
            break
        if rows.num_rows and max(rows.column("run_id").to_pylist()) == run_id:
            return version
    raise StoreDamaged(f"no version of {store.root}/{RUNS} ends with run {run_id}", store.root)


# DuckDB's errors that say what the SQL is (a typo, a column that does not exist), never what the files are.
_SQL_ERRORS = (
    "ParserException",
    "BinderException",
    "CatalogException",
    "SyntaxException",
    "ConversionException",
    "OutOfRangeException",
    "InterruptException",
    "PermissionException",
    "ConstraintException",
)


def damage_behind(output: str | Path, run_id: int | None, error: BaseException) -> StoreDamaged | None:
    """The damage behind an error met while reading a run's tables, or None when the error is the SQL's.

    A data file overwritten in place keeps its size, so opening the store does not see it; the query that
    reads it fails (Parquet's magic bytes, a page header or a page that does not decode). Then every file of
    the run is read whole (this costs what reading the store costs, on the way to an error only), and a file
    of the store named in the error is damage too even where it reads."""
    if type(error).__name__ in _SQL_ERRORS:
        return None
    store = Store(str(output))
    record = store.run(run_id) if run_id is not None else store.latest()
    problems = run_problems(store, record, read_whole=True) if record is not None else []
    tables = str(Path(store.path("tables")))
    if not problems and tables in str(error):
        problems = [f"a data file under {tables} cannot be read: {cause(error)}"]
    if not problems:
        return None
    return StoreDamaged(
        f"{store.root} is damaged (a query could not read run "
        f"{record.run_id if record else '?'}):\n" + "".join(f"  {p}\n" for p in problems),
        store.root,
    )
