"""A run's input files: which there are, the hash of each one's content, and what their headers state.

A run reads only the input files whose content no earlier run applied
(fleet_goodput/runs/plan.py picks them from `list_input`). Listing tells each
file's size and modification time; a file applied under the same path, size
and time is known without reading it again, any other is hashed. After the
pipeline, `changed_since_listed` finds the files a producer was still writing.
The scheduler files' headers state what their source observed and its queue
quotas (fleet_goodput/telemetry/observed.py, queue_quotas.py).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from apache_beam.io.filesystems import FileSystems

from fleet_goodput import schemas
from fleet_goodput.core.asof import CLOCK_STREAM
from fleet_goodput.quoting import literal_pattern
from fleet_goodput.store.layout import is_remote
from fleet_goodput.telemetry import observed, queue_quotas
from fleet_goodput.telemetry.input_files import NotARegularFile
from fleet_goodput.transforms.read import open_input


class InputError(ValueError):
    """The input folder is missing or holds no telemetry."""


@dataclass(frozen=True)
class InputFile:
    stream: str
    path: str
    sha256: str
    size: int
    modified_us: int | None = None  # when it was last written, as listed


def check_input(input_dir: str) -> None:
    if is_remote(input_dir):
        return  # remote inputs are matched by Beam's file IO
    root = Path(input_dir)
    if not root.is_dir():
        raise InputError(f"input folder {input_dir} does not exist")
    for stream in schemas.STREAMS:  # a stream folder that cannot be listed would be read as empty
        folder = root / stream
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{folder} is not a folder: the run would miss the {stream} stream; nothing was committed")
        if folder.exists() and not os.access(folder, os.R_OK | os.X_OK):  # a fault: fleet_goodput/faults.py
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))
    if not any(root.glob("*/*.avro")):
        raise InputError(
            f"no telemetry in {input_dir}: expected {input_dir}/scheduler/*.avro, "
            f"{input_dir}/runtime/*.avro and {input_dir}/profiler/*.avro "
            f"(try `mpg simulate --out {shlex.quote(input_dir)}`)"
        )


def list_input(
    input_dir: str, applied: dict[tuple, str] | None = None, progress: Callable[[str], None] = lambda _: None
) -> list[InputFile]:
    """Every Avro file of every stream, with the hash of its content.

    A file an earlier run applied under the same path, size and modification
    time is taken to be the same file, so a daily run does not read a growing
    input's history again; any other file is hashed, so a copy under another
    name is known, and a corrected file delivered again in place is refused (runs/redelivered.py).
    """
    applied = applied or {}
    listed = [
        (stream, listed_as)
        for stream in schemas.STREAMS
        for listed_as in sorted(_avro_files(f"{input_dir.rstrip('/')}/{stream}"))
    ]
    unknown = [listed_as for _, listed_as in listed if listed_as not in applied]
    hashing = (
        f"hashing the {len(unknown):,} no earlier run applied ({size_text(size for _, size, _ in unknown)})"
        if unknown
        else "every one known from an earlier run by path, size and time"
    )
    progress(f"Listed {len(listed):,} input file(s), {size_text(size for _, (_, size, _) in listed)}; {hashing}")
    return [
        InputFile(stream, listed_as[0], applied.get(listed_as) or _sha256(listed_as[0]), *listed_as[1:])
        for stream, listed_as in listed
    ]


def _avro_files(folder: str) -> list[tuple[str, int, int | None]]:
    """(path, size, modification time) of each `.avro` file in `folder`. The folder's name is data:
    a local one is listed, not matched, and a remote one is matched with its pattern characters quoted."""
    if is_remote(folder):
        return matched_files(f"{literal_pattern(folder)}/*.avro")
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.endswith(".avro")]
    except (FileNotFoundError, NotADirectoryError):
        return []  # a stream with no folder has no files (check_input refused one that cannot be listed)
    listed = []
    for entry in entries:
        path = os.path.join(folder, entry.name)
        # A pipe or a device is listed, and rejected with its reason when decoded; a file gone since
        # the folder was read, or a broken link, is not there to read.
        if not entry.is_dir() and (status := _status(path)) is not None:
            listed.append((path, *status))
    return listed


def matched_files(pattern: str) -> list[tuple[str, int, int | None]]:
    """(path, size, modification time) of each file a Beam file-system pattern matches (gs://)."""
    return [
        (m.path, m.size_in_bytes, _micros(m.last_updated_in_seconds))
        for m in FileSystems.match([pattern])[0].metadata_list
    ]


def _status(path: str) -> tuple[int, int | None] | None:
    """(size, modification time) of a file as listing sees it now; None if it is gone."""
    if is_remote(path):
        matched = matched_files(literal_pattern(path))
        return matched[0][1:] if matched else None
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, _micros(status.st_mtime)


def size_text(sizes) -> str:
    """A total size in bytes as people read it (KiB, MiB or GiB)."""
    total = sum(sizes)
    unit = next(unit for unit in (3, 2, 1) if total >= 1024**unit or unit == 1)
    return f"{total / 1024**unit:,.1f} {'KMG'[unit - 1]}iB"


def _micros(seconds: float | None) -> int | None:
    return None if not seconds else round(seconds * 1_000_000)


def changed_since_listed(files) -> list[InputFile]:
    """The files whose size or modification time is not what was listed, or that are gone: a
    producer still writing (or replacing) them while the run read them."""
    return [item for item in files if _status(item.path) != (item.size, item.modified_us)]


def _sha256(path: str) -> str:
    """The hash of the file's content. A local path that is not a regular file (a pipe, a device:
    never read, fleet_goodput/telemetry/input_files.py) has the hash of its path instead, so the run rejects
    it with the reason once, and the next run, finding it listed the same, knows it applied."""
    digest = hashlib.sha256()
    try:
        with open_input(path) as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except NotARegularFile:
        return hashlib.sha256(f"not a regular file: {path}".encode()).hexdigest()
    except PermissionError:
        raise  # a fault with an exit code of its own (fleet_goodput/faults.py), not a bad input
    except OSError as exc:
        raise InputError(
            f"cannot read input file {path} ({exc.strerror or exc}): nothing was committed; "
            "fix its permissions, or move it out of the input folder"
        ) from None
    return digest.hexdigest()


def _scheduler_headers(files):
    """(path, header metadata) of each readable scheduler file among `files`: the statements a source makes
    with its telemetry. An unreadable header is skipped: the read step rejects the file with the reason."""
    for item in files:
        if item.stream != CLOCK_STREAM:
            continue
        try:
            with open_input(item.path) as handle:
                meta = observed.header_meta(handle)
        except Exception:  # noqa: BLE001 - fastavro raises many kinds on a header that is no header
            continue
        yield item.path, meta


def stated_by(files) -> dict[str, tuple[int, int]]:
    """What the scheduler files among `files` state they observed, together."""
    stated = []
    for _, meta in _scheduler_headers(files):
        try:
            stated.append(observed.statement_in(meta) or {})
        except observed.BadStatement:
            continue  # the read step rejects the file's events with the reason
    return observed.union(*stated)


def quotas_stated_by(files) -> tuple[list[dict], list[str]]:
    """The queue quota levels the scheduler files among `files` state (fleet_goodput/telemetry/queue_quotas.py),
    and, for each file whose statement is malformed, the file and why (its events are read all the same)."""
    levels, refused = [], []
    for path, meta in _scheduler_headers(files):
        try:
            levels += queue_quotas.levels_in(meta)
        except queue_quotas.BadQuotas as exc:
            refused.append(f"{path}: {exc}")
    return levels, refused
