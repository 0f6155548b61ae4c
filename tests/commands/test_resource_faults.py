"""Faults of the machine end a command with one line and their own exit code, and lose nothing.

A full disk, a read-only output, an output that cannot be written, an input
that cannot be read, Ctrl-C and SIGTERM, each made real: a small tmpfs filled
up, a tmpfs remounted read-only, a run as the user `nobody` on files it may
not touch, signals sent to a real `mpg run` while it computes or commits.
After each the store still reads its previous run, untouched (no table moved,
nothing staged left), and running again commits the next run.

Mounting needs root (or CAP_SYS_ADMIN): where the machine refuses it, the
tests that need a mount are skipped saying so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError

from fleet_goodput import exits
from fleet_goodput.cli import main
from fleet_goodput.core.config import load_settings
from fleet_goodput.faults import fault_of
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.simulator import simulate
from fleet_goodput.simulator.run import START_US
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import STAGING, table_paths
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import split_by_time

pytestmark = pytest.mark.slow

HOUR_US = 3600 * 1_000_000
PUBLIC = Path(__file__).parents[1] / "data" / "public"
# What ends a fault's line in `mpg run` (fleet_goodput/cli.py).
RUN_STANDS = (
    "nothing was lost: the output keeps its last committed run, and the same command run again continues from it"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A 4-hour fleet cut in two, and the store after the first part (one run, no DuckDB file: small)."""
    root = tmp_path_factory.mktemp("faults")
    simulate(root / "fleet", seed=3, hours=4, jobs=20)
    parts = split_by_time(root / "fleet", [START_US + 2 * HOUR_US], root / "parts")
    run_batch(str(parts[0]), str(root / "first"), load_settings(), build_views=False)
    return root / "first", parts[1]


@contextlib.contextmanager
def tmpfs(size: str = "2m"):
    """A tmpfs of `size`, mounted where any user can reach it, unmounted however the test ends."""
    folder = Path(tempfile.mkdtemp(prefix="mpg-faults-"))
    folder.chmod(0o755)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(folder)], capture_output=True, text=True
    )
    try:
        if mounted.returncode:
            pytest.skip(
                f"SKIPPED, NOT TESTED: this machine refuses to mount a tmpfs ({mounted.stderr.strip()}); "
                "the fault tests need root or CAP_SYS_ADMIN"
            )
        try:
            yield folder
        finally:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
    finally:
        folder.rmdir()


def remount(folder: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], check=True)


def fill(folder: Path, leave_bytes: int) -> Path:
    """Fill `folder`'s file system but `leave_bytes`."""
    free = os.statvfs(folder)
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, free.f_bavail * free.f_frsize - leave_bytes))
    return filler


def mpg(*args, prefix: list[str] = ()) -> subprocess.Popen:
    """`mpg ARGS` (run under `prefix`) in a process of its own, as a user runs it: in a session of
    its own, like a terminal's job."""
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "fleet_goodput.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def assert_store_keeps_run_1(output: Path, first: Path) -> None:
    """The store reads the first run, as it was: the same table versions, every table's latest
    version holding that run's files (what polars or Spark read), nothing staged left."""
    latest = Store(output).latest()
    assert latest.run_id == 1 and latest.versions == Store(first).latest().versions
    for name, relative in table_paths().items():
        committed = DeltaTable(str(output / relative), version=latest.versions[name])
        assert set(DeltaTable(str(output / relative)).file_uris()) == set(committed.file_uris()), name
    assert not any((output / STAGING).glob("*")), list((output / STAGING).iterdir())


def assert_a_rerun_commits_run_2(part: Path, output: Path) -> None:
    assert run_batch(str(part), str(output), load_settings(), build_views=False).run.run_id == 2


def one_line(stderr: str) -> str:
    """The last line of stderr, after checking that no traceback (Python's or a library's) came before it."""
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    return stderr.rstrip("\n").splitlines()[-1]


def test_a_full_disk_stops_mpg_run_with_one_line_and_exit_74_and_the_store_keeps_its_last_run(fleet):
    first, part = fleet
    with tmpfs() as disk:
        output = disk / "out"
        shutil.copytree(first, output)
        filler = fill(disk, leave_bytes=40 << 10)  # the run's first staged Parquet file does not fit
        run = mpg("run", "--input", part, "--output", output)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == exits.NO_SPACE == 74
        # Beam's message names no file; deltalake's and Python's do.
        assert re.fullmatch(
            rf"mpg run: no space left on device(: {re.escape(str(output))}/\S+)?; "
            rf"{re.escape(RUN_STANDS)}",
            one_line(stderr),
        ), stderr
        assert_store_keeps_run_1(output, first)
        filler.unlink()
        assert_a_rerun_commits_run_2(part, output)


def test_a_read_only_output_stops_mpg_run_with_one_line_and_exit_73(fleet, capsys):
    first, part = fleet
    with tmpfs() as disk:
        output = disk / "out"
        shutil.copytree(first, output)
        remount(disk, "ro")
        assert main(["run", "--input", str(part), "--output", str(output)]) == exits.CANNOT_WRITE == 73
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"mpg run: the output cannot be written, its file system is read-only: {output}/.lock; {RUN_STANDS}"
        )
        assert_store_keeps_run_1(output, first)
        remount(disk, "rw")
        assert_a_rerun_commits_run_2(part, output)


# Every other command that writes, on a read-only disk holding the store: (arguments, the path its line names,
# what stands). Each stops at its first write, before any pipeline or Great Expectations starts.
WRITERS = {
    "stream": (
        ["--input", "{part}", "--output", "{out}", "--stop_after_idle_s", "0"],
        "{out}/.lock",
        "nothing was lost: the output keeps the stream's last committed run, and the stream resumes from it "
        "when started again",
    ),
    "validate": (["--output", "{out}"], "{out}/locks", "the store is unchanged: validate again once fixed"),
    "report": (["--output", "{out}"], "{out}/locks", "the store and the period's published report are unchanged"),
    "demo": (["--dir", "{disk}/demo"], "{disk}/demo", "run `mpg demo` again"),
    "import": (
        ["philly", "{public}/philly", "--out", "{disk}/imported"],
        "{disk}/.imported.importing-\\w+",
        "nothing was written",
    ),
    "simulate": (["--out", "{disk}/sim"], "{disk}/sim", "what it wrote is incomplete: simulate again with --overwrite"),
    "replay": (
        ["--from", "{part}", "--to", "{disk}/live"],
        "{disk}/live",
        "the files written so far stay: replay again with --replace",
    ),
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_command_that_writes_stops_on_a_read_only_disk_with_one_line_and_exit_73(fleet, capsys, command):
    first, part = fleet
    arguments, path, stands = WRITERS[command]
    with tmpfs() as disk:
        output = disk / "out"
        shutil.copytree(first, output)
        remount(disk, "ro")
        named = {"part": part, "out": output, "disk": disk, "public": PUBLIC}
        assert main([command, *(argument.format(**named) for argument in arguments)]) == exits.CANNOT_WRITE
        line = capsys.readouterr().err.splitlines()[-1]
        assert re.fullmatch(
            rf"mpg {command}: the output cannot be written, its file system is read-only: "
            rf"{path.format(**{k: re.escape(str(v)) for k, v in named.items()})}; {re.escape(stands)}",
            line,
        ), line
        assert_store_keeps_run_1(output, first)


def test_deltalakes_read_only_error_is_found_in_its_message_with_the_path(fleet):
    """deltalake raises DeltaError, the OS error only as "… (os error 30)" in its text."""
    first, _ = fleet
    with tmpfs() as disk:
        runs = disk / "out" / "runs"
        shutil.copytree(first / "runs", runs)
        remount(disk, "ro")
        table = DeltaTable(str(runs))
        with pytest.raises(DeltaError, match=r"\(os error 30\)") as raised:
            write_deltalake(table, table.to_pyarrow_table(), mode="append")
    fault = fault_of(raised.value, outputs=[str(disk / "out")], inputs=[])
    assert fault.code == exits.CANNOT_WRITE
    assert re.fullmatch(
        rf"the output cannot be written, its file system is read-only: {re.escape(str(runs))}/\S+", fault.reason
    ), fault.reason


def test_an_error_is_a_fault_only_by_its_errno_or_the_os_wording_from_a_library():
    assert fault_of(OSError(errno.ENOSPC, "No space left on device", "/out/x"), ["/out"], []).code == exits.NO_SPACE
    assert fault_of(RuntimeError("upload failed (os error 122)"), ["/out"], []).code == exits.NO_SPACE  # EDQUOT
    assert fault_of(ValueError("[Errno 13] Permission denied: '/in/a.avro'"), ["/out"], ["/in"]) == fault_of(
        PermissionError(errno.EACCES, "Permission denied", "/in/a.avro"), ["/out"], ["/in"]
    )
    # A permission denied no message places is the output's, named by its folder.
    assert fault_of(RuntimeError("Permission denied (os error 13)"), [None, "/out"], [None]).reason == (
        "the output cannot be written, permission denied: /out"
    )
    # Not faults: another errno, this project's own message quoting the wording, an error in no chain.
    assert fault_of(OSError(errno.EIO, "Input/output error"), ["/out"], []) is None
    assert fault_of(ValueError("(os error 2)"), ["/out"], []) is None
    from fleet_goodput.store.errors import StoreError

    assert fault_of(StoreError("job 'No space left on device' is odd"), ["/out"], []) is None
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied", "/out/x")
        except OSError:
            raise StoreError("the output is not one of ours") from None  # its own message says what happened
    except StoreError as replaced:
        assert fault_of(replaced, ["/out"], []) is None
    # Found through the chain an exception was raised from, or while handling.
    try:
        try:
            raise OSError(errno.EROFS, "Read-only file system", "/out/t")
        except OSError as error:
            raise RuntimeError("step failed") from error
    except RuntimeError as wrapped:
        assert fault_of(wrapped, ["/out"], []).reason == (
            "the output cannot be written, its file system is read-only: /out/t"
        )


@pytest.fixture
def unprivileged() -> list[str]:
    """What to run a command under so that file permissions count: root reads and writes anything,
    so as root, `setpriv` drops the two capabilities that let it (it stays root otherwise)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("SKIPPED, NOT TESTED: running as root without setpriv (util-linux), permissions cannot count")
    dropped = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={dropped}", f"--bounding-set={dropped}"]


def read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)


def test_an_output_the_user_may_not_write_stops_mpg_run_with_exit_73(fleet, unprivileged):
    first, part = fleet
    with tmpfs(size="16m") as disk:
        output = disk / "out"
        shutil.copytree(first, output)
        read_only(output)
        run = mpg("run", "--input", part, "--output", output, prefix=unprivileged)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == exits.CANNOT_WRITE, stderr
        assert one_line(stderr) == (
            f"mpg run: the output cannot be written, permission denied: {output}/.lock; {RUN_STANDS}"
        )
        assert_store_keeps_run_1(output, first)


@pytest.mark.parametrize("unreadable", ["a file", "a stream's folder"])
def test_an_input_the_user_may_not_read_stops_mpg_run_with_exit_77(fleet, unprivileged, unreadable):
    first, part = fleet
    with tmpfs(size="16m") as disk:
        output, telemetry = disk / "out", disk / "in"
        shutil.copytree(first, output)
        shutil.copytree(part, telemetry)
        unreadable = sorted(telemetry.glob("runtime/*.avro"))[0] if unreadable == "a file" else telemetry / "runtime"
        unreadable.chmod(0)
        run = mpg("run", "--input", telemetry, "--output", output, prefix=unprivileged)
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == exits.NO_PERMISSION == 77, stderr
        assert one_line(stderr) == f"mpg run: an input cannot be read, permission denied: {unreadable}; {RUN_STANDS}"
        assert_store_keeps_run_1(output, first)
        unreadable.chmod(0o755)
        assert_a_rerun_commits_run_2(telemetry, output)


def _computing(output: Path):
    return lambda: any((output / STAGING).glob("*/*"))


def _between_table_commits(output: Path):
    # The first table a run commits is job_window: its new data files appear as that commit is written,
    # and the Ctrl-C lands as the write returns (delta-rs writes outside Python), before the next
    # table's commit. Waited for at its commit file instead, the signal had about 0.1 s to arrive before
    # the run's last commit, which a loaded host can miss.
    table = output / "tables" / "job_window"
    before = set(table.rglob("*.parquet"))
    return lambda: any(path not in before for path in table.rglob("*.parquet"))


@pytest.mark.parametrize(
    ("sent", "code", "reason", "point"),
    [
        (signal.SIGINT, 130, "interrupted (Ctrl-C)", _computing),
        (signal.SIGTERM, 143, "stopped by SIGTERM", _computing),
        (signal.SIGINT, 130, "interrupted (Ctrl-C)", _between_table_commits),
    ],
    ids=["ctrl-c-while-computing", "sigterm-while-computing", "ctrl-c-between-table-commits"],
)
def test_a_signal_stops_mpg_run_with_one_line_its_code_and_nothing_staged(fleet, tmp_path, sent, code, reason, point):
    """The signal must land before the run's last commit. On a loaded host this test may see the point too
    late and the run commit first (a stop after the commit is the next test's case): it tries again, on a
    fresh copy, up to five times."""
    first, part = fleet
    for attempt in range(5):
        output = tmp_path / f"out-{attempt}"
        shutil.copytree(first, output)
        reached = point(output)
        run = mpg("run", "--input", part, "--output", output)
        deadline = time.monotonic() + 120
        while not reached():
            assert run.poll() is None, f"finished before the signal: {run.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the point to signal at was never reached"
            time.sleep(0.002)
        os.killpg(run.pid, sent)  # as a terminal's Ctrl-C does: the whole job
        _, stderr = run.communicate(timeout=120)
        if Store(output).latest().run_id == 1:
            break
    else:
        raise AssertionError("in five tries the signal never landed before the run's last commit")
    assert run.returncode == code, stderr
    assert one_line(stderr) == f"mpg run: {reason}; {RUN_STANDS}"
    assert_store_keeps_run_1(output, first)
    assert_a_rerun_commits_run_2(part, output)


def test_a_run_stopped_after_its_commit_has_its_views_and_manifest_written_by_the_next_run(fleet, tmp_path):
    """Stopped between its commit and its views (a full disk at goodput.duckdb, Ctrl-C), a run leaves
    the run committed, manifest.json still the previous run's and the views missing or stale: the
    next run, finding nothing new, writes both."""
    first, part = fleet
    output = tmp_path / "out"
    shutil.copytree(first, output)
    run_batch(str(part), str(output), load_settings(), build_views=False)
    (output / "manifest.json").write_text((first / "manifest.json").read_text())  # as the stop left it
    assert not (output / "goodput.duckdb").exists()

    again = run_batch(str(part), str(output), load_settings())
    assert not again.committed and again.run.run_id == 2
    assert json.loads((output / "manifest.json").read_text())["run_id"] == 2
    # The stored views read run 2's rows: as the views of run 2, and not as run 1's.
    windows = "select count(*), max(window_start) from job_window"
    with duckdb.connect(str(output / "goodput.duckdb"), read_only=True) as stored:
        seen = stored.execute(windows).fetchall()
    with connect(output) as latest, connect(output, run=1) as earlier:
        assert seen == latest.execute(windows).fetchall() != earlier.execute(windows).fetchall()


@pytest.mark.parametrize("signals", [1, 2], ids=["sigterm-lets-the-run-commit", "a-second-sigterm-stops-at-once"])
def test_a_sigterm_stops_mpg_stream_after_its_run_commits_and_a_second_at_once(fleet, tmp_path, signals):
    """systemd stops a unit with SIGTERM and waits (90 s by default) before SIGKILL: the stream finishes the
    run in progress, commits it and exits 0. The same signal again stops it at once, as `mpg run` stops:
    exit 143, nothing committed, nothing staged left, and the stream started again resumes."""
    first, part = fleet
    output = tmp_path / "out"
    shutil.copytree(first, output)
    reached = _computing(output)
    stream = mpg("stream", "--input", part, "--output", output, "--stop_after_idle_s", 600)
    deadline = time.monotonic() + 120
    while not reached():
        assert stream.poll() is None, f"finished before the signal: {stream.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "the stream never began computing"
        time.sleep(0.002)
    for _ in range(signals):
        os.kill(stream.pid, signal.SIGTERM)
        time.sleep(0.05)
    stdout, stderr = stream.communicate(timeout=120)
    assert "mpg stream: stopping once the run in progress has committed" in stderr
    if signals == 1:
        assert stream.returncode == 0, stderr
        assert "Stream stopped: committed run 2" in stdout
        assert Store(output).latest().run_id == 2
    else:
        assert stream.returncode == 143, stderr
        assert one_line(stderr).startswith("mpg stream: stopped by SIGTERM; nothing was lost")
        if Store(output).latest().run_id == 1:  # the second signal is meant to land while computing
            assert_store_keeps_run_1(output, first)
            assert_a_rerun_commits_run_2(part, output)
        assert not any((output / STAGING).glob("*"))


# A stop landing inside Beam's StateSampler.start(), after its sampling thread (not a daemon) began and
# before the sampler is marked started: Beam's clean-up then never stops the thread.
_BEAMS_SAMPLER_LEFT_RUNNING = """
import sys
from apache_beam.runners.worker import statesampler
from apache_beam.utils.counters import CounterFactory
from fleet_goodput import cli

sampler = statesampler.StateSampler("stage", CounterFactory())
statesampler.statesampler_impl.StateSampler.start(sampler)  # started, but `sampler.started` never set
sys.argv = ["mpg", *sys.argv[1:]]
cli.program()
"""


def test_a_stop_ends_mpg_although_a_beam_sampling_thread_was_left_running(fleet, tmp_path):
    """Seen as a second SIGTERM to `mpg stream` on a loaded host: the command said it stopped, then the
    process never exited, its interpreter waiting for a Beam state-sampling thread that nothing would
    stop. A stop ends the process: exit 143, with its one line, the store keeping its last run."""
    first, part = fleet
    output = tmp_path / "out"
    shutil.copytree(first, output)
    reached = _computing(output)
    run = subprocess.Popen(
        [sys.executable, "-c", _BEAMS_SAMPLER_LEFT_RUNNING, "run", "--input", str(part), "--output", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not reached():
        assert run.poll() is None, f"finished before the signal: {run.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "the run never began computing"
        time.sleep(0.002)
    os.kill(run.pid, signal.SIGTERM)
    try:
        _, stderr = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        raise AssertionError("mpg did not exit after the stop: a thread it left running holds the interpreter")
    assert run.returncode == 143, stderr
    assert one_line(stderr).startswith("mpg run: stopped by SIGTERM; nothing was lost")
    assert_store_keeps_run_1(output, first)


def test_a_stop_that_duckdb_replaced_by_query_interrupted_is_named_as_the_signal():
    """A signal handler's exception raised while DuckDB runs a query comes back as DuckDB's own
    `RuntimeError: Query interrupted`, chaining nothing (seen when a second SIGTERM stopped `mpg stream` as it
    built its views: exit 1 and a traceback). The stop the handler raised is named instead: 143, one line."""
    from fleet_goodput import faults

    assert faults.fault_of(RuntimeError("Query interrupted"), [], []) is None, "no signal yet: not a stop"
    with pytest.raises(faults.Terminated):
        faults.raise_stop(faults.Terminated())
    assert faults.fault_of(RuntimeError("Query interrupted"), [], []) == faults.Fault(143, "stopped by SIGTERM")
    assert faults.fault_of(RuntimeError("another failure"), [], []) is None


def test_the_recorder_on_a_full_disk_holds_its_bound_drops_and_counts_and_leaves_no_partial_file():
    """A full disk for the recorder's folder (a real tmpfs): the writes fail, what they kept plus what is
    queued stays within max_queued (the newest events beyond it dropped and counted, not held in memory),
    no `.tmp` file is left behind, and once space is free again `close()` writes every event it kept."""
    import fastavro

    from fleet_goodput.telemetry.recorder import Recorder

    with tmpfs("1m") as disk:
        filler = fill(disk, 0)
        recorder = Recorder(disk / "rec", job_id="j", roll_seconds=0.01, max_queued=500)
        for step in range(20_000):
            with recorder.step(step):
                pass
            if step % 1000 == 0:
                time.sleep(0.05)  # the writer tries (and fails) meanwhile
        # The writer may be inside a write, its `.tmp` there until the write fails: a partial file left
        # behind is one still there a while later.
        deadline = time.monotonic() + 5
        while [p for p in disk.rglob("*") if p.name.endswith(".tmp")] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [p.name for p in disk.rglob("*") if p.name.endswith(".tmp")], "partial files left"
        assert recorder.dropped > 0, "the disk was full: events beyond the bound are dropped"
        assert recorder.pending <= 500
        filler.unlink()
        recorder.close()
        written = [
            r for path in sorted((disk / "rec" / "runtime").glob("*.avro")) for r in fastavro.reader(open(path, "rb"))
        ]
        assert 0 < len(written) <= 500 and len(written) + recorder.dropped == 2 * 20_000
        assert not [p.name for p in disk.rglob("*") if p.name.endswith(".tmp")]
