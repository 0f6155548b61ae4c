"""Reading an input file only when it is a regular file.

A name matching `*.avro` in the input folder may be a named pipe (reading it
waits forever for a writer), a device such as /dev/zero (reading it never
ends), a socket, or a symbolic link to any of them. Such a file is never
read: listing it takes no hash of its content (fleet_goodput/runs/inputs.py), and
decoding it gives one rejected row saying what it is, counted as one record
read and rejected, as a file whose number of records is unknowable always is
(fleet_goodput/telemetry/columnar.py `decode_input_file`). Opening is non-blocking and
the opened file is checked again, so a file swapped for a pipe after it was
listed is caught too.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class NotARegularFile(Exception):
    """An input path that is not a regular file; the message is the rejection reason."""


def _not_regular(path: str) -> str | None:
    """Why the local file at `path` must not be read, or None when it is a regular file."""
    mode = os.stat(path).st_mode
    return None if stat.S_ISREG(mode) else _reason(_kind(path, mode))


def open_regular_file(path: str) -> BinaryIO:
    """The local file at `path` opened for reading; raises `NotARegularFile` for anything but a regular file."""
    reason = _not_regular(path)
    if reason:
        raise NotARegularFile(reason)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a pipe swapped in since does not block the open
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotARegularFile(_reason(_kind(path, mode)))
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def _kind(path: str, mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"a symbolic link to {kind} ({os.path.realpath(path)})" if os.path.islink(path) else kind


def _reason(kind: str) -> str:
    return (
        f"not a regular file but {kind}: skipped unread, since reading it could wait forever or never end "
        "(counted as one record, the number in it being unknowable)"
    )
