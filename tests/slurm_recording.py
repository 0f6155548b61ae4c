"""tests/importers/test_slurm.py's recording of a real Slurm, made in a process of its own while other files run.

The recording mostly waits: Slurm checks time limits every 30 s from slurmctld's start, so the job
that times out ends about 90 s after the box is up, and everything else happens meanwhile, with
daemons that use little CPU. Held by a test worker, that wait would keep a core idle for a third of
the suite. So the session starts it as soon as a worker sees test_slurm.py selected (tests/conftest.py),
test_slurm.py runs last, and its tests read what was recorded. Whichever worker asks first starts
it (the folder is created once); `python tests/slurm_recording.py FOLDER` is that process.

FOLDER then holds `box/` (the daemons' own folder), `capture/` (what `capture` wrote), `collected/killed`
(the collector SIGKILLed and rerun), `collected/once` (one whole collection), `collected/<daemon>-paused` (a
poll while slurmdbd or slurmctld never answers), `recording.log`, and at the
end either `recorded.json` (scenario → job id, the collector's tally, its `--since`) or `failed.txt`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from slurm_box import SlurmBox, capture, run_scenarios

RECORDED, FAILED = "recorded.json", "failed.txt"
# Box start, the scenarios (about 90 s, the time limit's) and both collections, on a loaded host.
WAIT_S = 600
# The collector's --timeout while a daemon is paused: sacct itself gives up on a silent slurmdbd after
# 45 s and scontrol on a silent slurmctld after 10 s (22.05's defaults), each with a message of its own.
UNANSWERED_TIMEOUT_S = 3


class KilledAndRerun(threading.Thread):
    """`mpg collect slurm` polled over and over while the scenarios run, SIGKILLed at random moments
    of about one poll in two (seeded), and always run again."""

    def __init__(self, box: SlurmBox, out: Path, since: str):
        super().__init__(daemon=True)
        self.box, self.out, self.since = box, out, since
        self.stopping, self.polls, self.kills, self.failures = threading.Event(), 0, 0, []
        self.rng = random.Random(23)

    def poll(self, kill_after: float | None = None) -> None:
        command = [
            sys.executable,
            "-m",
            "fleet_goodput.cli",
            "collect",
            "slurm",
            "--out",
            str(self.out),
            "--since",
            self.since,
            "-q",
        ]
        process = subprocess.Popen(command, env=self.box.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = process.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            self.kills += 1
            return
        self.polls += 1
        if process.returncode:
            self.failures.append(err)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.poll(self.rng.uniform(0.3, 3.0) if self.rng.random() < 0.5 else None)
            time.sleep(0.5)


def _files(folder: Path) -> dict[str, str]:
    """Every file of a collection with its SHA-256, but the scratch text of the poll under way."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "poll" not in path.relative_to(folder).parts
    }


def poll_while_paused(box: SlurmBox, daemon: str, out: Path, since: str) -> dict:
    """One whole poll into `out`, then one with `daemon` stopped (SIGSTOP: it takes connections and never
    answers) and a --timeout of UNANSWERED_TIMEOUT_S: what that poll printed and returned, and whether the
    collection's files stayed as the whole poll left them."""
    KilledAndRerun(box, out, since).poll()
    before = _files(out)
    with box.paused(daemon):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet_goodput.cli",
                "collect",
                "slurm",
                "--out",
                str(out),
                "--timeout",
                str(UNANSWERED_TIMEOUT_S),
            ],
            env=box.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    return {
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "unchanged": _files(out) == before,
        "files": len(before),
        "out": str(out),
    }


def session_folder(tmp_path_factory) -> Path:
    """The recording's folder, one for the whole session: under pytest-xdist every worker's base
    temporary folder sits in the session's."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "slurm-recording"


def start(folder: Path) -> None:
    """Start the recording into `folder` unless it was started already (by this session's other worker)."""
    try:
        folder.mkdir()
    except FileExistsError:
        return
    with open(folder / "recording.log", "wb") as log:
        subprocess.Popen(
            [sys.executable, str(Path(__file__)), str(folder)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait(folder: Path, timeout: float = WAIT_S) -> dict:
    """What the recording in `folder` recorded, once it has ended; its log if it failed."""
    deadline = time.monotonic() + timeout
    while not (folder / RECORDED).exists():
        if (folder / FAILED).exists() or time.monotonic() > deadline:
            why = (folder / FAILED).read_text() if (folder / FAILED).exists() else f"nothing recorded after {timeout} s"
            log = (folder / "recording.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the Slurm recording failed: {why}\n--- recording.log ---\n{log}")
        time.sleep(0.5)
    return json.loads((folder / RECORDED).read_text())


def record(folder: Path) -> dict:
    """Start the box, run every scenario while a collector is killed and rerun, capture, stop the box."""
    box = SlurmBox(folder / "box")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    collector = KilledAndRerun(box, folder / "collected" / "killed", since)
    try:
        box.start()
        collector.start()
        jobs = run_scenarios(box)
        collector.stopping.set()
        collector.join()
        collector.poll()  # a last whole poll, as cron's next run would be
        KilledAndRerun(box, folder / "collected" / "once", since).poll()
        unanswered = {
            daemon: poll_while_paused(box, daemon, folder / "collected" / f"{daemon}-paused", since)
            for daemon in ("slurmdbd", "slurmctld")
        }
        files = capture(box, folder / "capture")
    finally:
        collector.stopping.set()
        box.stop()
    return {
        "jobs": jobs,
        "files": {name: str(path) for name, path in files.items()},
        "since": since,
        "collector": {"polls": collector.polls, "kills": collector.kills, "failures": collector.failures},
        "unanswered": unanswered,
    }


def _main(folder: Path) -> None:
    # SIGTERM (and Ctrl-C's SIGINT) end the recording through record()'s `finally`, which stops the daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("ended by SIGTERM"))
    try:
        recorded = record(folder)
    except BaseException:
        (folder / FAILED).write_text(traceback.format_exc())
        raise
    (folder / f"{RECORDED}.part").write_text(json.dumps(recorded))
    (folder / f"{RECORDED}.part").rename(folder / RECORDED)


if __name__ == "__main__":
    _main(Path(sys.argv[1]))
