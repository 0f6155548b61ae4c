"""A Delta log read by hand, beside delta-rs: its versions from file names, a digest of one commit, and
whether the commits after a version are a vacuum's only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from fleet_goodput.store.store_files import StoreFiles


def commit_file(table_path: str, version: int) -> bytes | None:
    """A digest of the commit of `version` of the table at `table_path` (None: there is none): a log
    rewritten since (--replace, a repair) has another commit there, or none. Its content, not its
    inode and time, which a file made again at once may share; a commit names the files it adds,
    each by a fresh uuid, and its own time."""
    try:
        commit = Path(f"{table_path}/_delta_log/{version:020d}.json").read_bytes()
    except OSError:
        return None
    return hashlib.blake2b(commit, digest_size=16).digest()


_VACUUM = ("VACUUM START", "VACUUM END")


def vacuumed_only(files: StoreFiles, log: str, recorded: int) -> bool:
    """Whether every commit of the Delta log `log` (of the store's `files`) after version `recorded` is a
    vacuum's (maintenance.maintain), which changes no row: the table still holds what the run that recorded it
    committed."""
    for version in sorted(v for v in versions_in(files.names(log), ".json") if v > recorded):
        try:
            lines = files.read_text(f"{log}/{version:020d}.json").splitlines()
            actions = [json.loads(line) for line in lines if line]
        except (OSError, ValueError):
            return False  # torn: store_check says so
        if any("commitInfo" not in action and "remove" not in action for action in actions) or not any(
            action.get("commitInfo", {}).get("operation") in _VACUUM for action in actions
        ):
            return False
    return True


def versions_in(names: list[str], suffix: str) -> list[int]:
    """The versions of a Delta log's file `names` that end with `suffix` (`.json`: commits; `.checkpoint.parquet`)."""
    return [int(name[:20]) for name in names if name.endswith(suffix) and name[:20].isdigit()]


def log_versions(log: Path, suffix: str) -> list[int]:
    """The versions of a local Delta log's files that end with `suffix`."""
    return versions_in(os.listdir(log), suffix)
