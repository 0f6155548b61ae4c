"""Where a run stages what it computes (`_staging/<run>/`, never read but by its commit), who owns each
staging folder, and the clean-up of what killed runs staged.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

from fleet_goodput.quoting import literal_pattern
from fleet_goodput.store.layout import STAGING, is_remote


def staged_files(folder: str) -> list[str]:
    if is_remote(folder):
        from apache_beam.io.filesystems import FileSystems

        return sorted(m.path for m in FileSystems.match([f"{literal_pattern(folder)}/**.parquet"])[0].metadata_list)
    return sorted(str(p) for p in Path(folder).rglob("*.parquet"))


# A staging folder of a run on another machine is taken for a killed run's after this long.
FOREIGN_STAGING_STALE_S = 24 * 3600


def claim_staging(root: str | Path, token: str) -> None:
    """Record which process stages into `_staging/<token>`, beside it, so that another run whose
    lock did not lock (a file system without flock) does not take it for a killed run's."""
    if is_remote(root):
        return
    owner = Path(root, STAGING, f"{token}.owner")
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))


def clear_staging(root: str | Path) -> None:
    """Remove what killed runs staged (local outputs; the lock is held): every staging folder but
    one whose owner runs still, here, or on another machine and staged within the last day."""
    staging = Path(root, STAGING)
    if is_remote(root) or not staging.is_dir():
        return
    for path in staging.iterdir():
        token = path.name.removesuffix(".owner")
        if not _staged_by_a_live_run(staging / f"{token}.owner"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _staged_by_a_live_run(owner: Path) -> bool:
    try:
        claimed = json.loads(owner.read_text())
        host, pid = claimed["host"], int(claimed["pid"])
        if host != socket.gethostname():
            return time.time() - owner.stat().st_mtime < FOREIGN_STAGING_STALE_S
    except (OSError, ValueError, KeyError, TypeError):  # no owner: a killed run's, or an older version's
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except PermissionError:
        return True  # it does, another user's
    except OSError:
        return False
    return pid != os.getpid()
