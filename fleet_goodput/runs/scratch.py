"""A run's own temporary folder, which the next run removes when the run was killed.

Beam makes a `beam-pipeline-temp*` folder in the system's temporary folder
whenever a pipeline is built, and removes it when the run ends; a run killed
with SIGKILL (the OOM killer, a systemd stop timeout, a power loss) leaves it,
and a year of daily kills fills a disk. So a run's temporary files, Beam's
included, go into a folder of its own, `fleet-goodput-run-*` in the system's
temporary folder, in which the run holds an exclusive `flock` on a lock file
for as long as it lives. Every run first removes the folders whose lock no
process holds any more: the kernel drops a lock when its process dies however
it died, so a live run's folder, even another user's or another container's,
is never taken, and a reused process id cannot fool the check.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "fleet-goodput-run-"
LOCK = ".lock"


def remove_abandoned(parent: Path) -> list[Path]:
    """Remove the run folders under `parent` that no living run holds; returns those removed."""
    removed = []
    for folder in sorted(parent.glob(f"{PREFIX}*")):
        try:
            handle = os.open(folder / LOCK, os.O_RDWR)
        except OSError:
            continue  # not ours to judge (no lock file yet, or not readable by this user)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except OSError:
            pass  # a living run holds it
        finally:
            os.close(handle)
    return removed


@contextmanager
def run_scratch() -> Iterator[Path]:
    """A temporary folder for this run, made the process's (and its children's) temporary folder while the
    run lives, and removed when it ends; the abandoned folders of killed runs are removed first."""
    parent = Path(tempfile.gettempdir())
    remove_abandoned(parent)
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    # Locked before it is named: another run's remove_abandoned takes a lock file no process holds, and
    # between creating `.lock` and locking it this run would be such a process (seen under load).
    handle = os.open(folder / f"{LOCK}.new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(handle, fcntl.LOCK_EX)
    os.rename(folder / f"{LOCK}.new", folder / LOCK)
    kept_tempdir, kept_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = kept_tempdir
        if kept_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = kept_env
        shutil.rmtree(folder, ignore_errors=True)
        os.close(handle)
