"""Faults of the machine, not of the data: each ends a command with one line and an exit code of its own.

A full disk (ENOSPC, EDQUOT), an output that cannot be written (EROFS, or
EACCES/EPERM on the output), an input that cannot be read (EACCES/EPERM
elsewhere), Ctrl-C (SIGINT) and SIGTERM reach the user as

    mpg run: no space left on device: /out/_staging/…/part-0.parquet; <what stands>

with the codes of fleet_goodput/exits.py, instead of a traceback. The store is
safe on each by construction (fleet_goodput/store/delta_store.py: a run is visible only
once its `runs` row is committed), and a run removes what it staged as it
stops (fleet_goodput/runs/batch.py).

The OS error is seldom the exception that arrives. Beam re-raises an error of a
pipeline step under another exception, the original as its cause or context,
or only as text; deltalake (Rust) raises its own types with the OS error in
the message, as "… (os error 28)"; pyarrow writes "[errno 28] …". So the
whole cause chain is searched: an OSError's errno first, then the errno in
those two spellings, then (only in exceptions not raised by this project,
whose messages may quote telemetry) the C library's own wording of the error.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput import exits

NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
READ_ONLY_ERRNOS = {errno.EROFS}
PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM}
_FAULT_ERRNOS = NO_SPACE_ERRNOS | READ_ONLY_ERRNOS | PERMISSION_ERRNOS
# "[Errno 28]" (Python, pyarrow) and "(os error 28)" (Rust: deltalake).
_ERRNO_TEXT = re.compile(r"\[errno (\d+)\]|\(os error (\d+)\)", re.IGNORECASE)
# The wording of each error (glibc's strerror), for messages that carry no number.
_STRERROR = {os.strerror(number): number for number in sorted(_FAULT_ERRNOS)}
# The rest of a path in an error message: up to a quote, space, colon or '#' (Delta's "file#1").
_PATH_REST = r"[^\s'\"`:#,;)\]]*"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised in the main thread, so the command stops as on Ctrl-C, cleaning up."""


# DuckDB turns an exception a signal handler raises during a query into its own "Query interrupted", with
# nothing chained: the stop the handlers raised last is kept here, to be named instead.
_INTERRUPTED_QUERY = "Query interrupted"
_raised: list[KeyboardInterrupt] = []


def raise_stop(stop: KeyboardInterrupt) -> None:
    """Raise `stop` (from a signal handler), remembering it for a library that replaces it by its own error."""
    _raised[:] = [stop]
    raise stop


@contextlib.contextmanager
def sigterm_stops():
    """While the block runs, SIGTERM (systemd stopping the unit, a scheduler's timeout) stops the
    command as Ctrl-C does, cleaning up as it goes, instead of killing it with what it staged left
    behind. Only the main thread receives signals: elsewhere (a test's thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise_stop(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class Fault:
    code: int  # the exit code (fleet_goodput/exits.py)
    reason: str  # what happened, as one phrase: "no space left on device: /out/tables/…"


def fault_of(error: BaseException, outputs: list[str | None], inputs: list[str | None]) -> Fault | None:
    """The fault `error` is (or wraps), or None when it is not one of the machine's.

    `outputs` are the folders the command writes, `inputs` those it reads (None
    for one it was not given): a permission denied under an output means the
    output cannot be written, and elsewhere an input cannot be read.
    """
    outputs, inputs = _absolute(outputs), _absolute(inputs)
    chain = list(_chain(error))
    # Beam re-raises a Ctrl-C that lands in a step as a RuntimeError, the interrupt its context.
    stopped = next((current for current in chain if isinstance(current, KeyboardInterrupt)), None)
    if stopped is None and _raised and any(_INTERRUPTED_QUERY in str(current) for current in chain):
        stopped = _raised[0]
    if isinstance(stopped, Terminated):
        return Fault(exits.TERMINATED, "stopped by SIGTERM")
    if stopped:
        return Fault(exits.INTERRUPTED, "interrupted (Ctrl-C)")
    found = _os_error_in(chain)
    if found is None:
        return None
    number, path = found
    path = path or _path_in(error, outputs + inputs)
    where = f": {path}" if path else ""
    if number in NO_SPACE_ERRNOS:
        return Fault(exits.NO_SPACE, f"{os.strerror(number).lower()}{where}")
    if number in READ_ONLY_ERRNOS:
        return Fault(exits.CANNOT_WRITE, f"the output cannot be written, its file system is read-only{where}")
    if path and not _under(path, outputs) and (_under(path, inputs) or not outputs):
        return Fault(exits.NO_PERMISSION, f"an input cannot be read, permission denied{where}")
    if not path and outputs:  # a library's message that names no file: at least the folder
        where = f": {outputs[0]}"
    return Fault(exits.CANNOT_WRITE, f"the output cannot be written, permission denied{where}")


def _chain(error: BaseException):
    """`error` and every exception it was raised from or while handling, each once (not the one
    that a `raise … from None` says the error replaces: its own message tells what happened)."""
    seen, pending = set(), [error]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        context = None if current.__suppress_context__ else current.__context__
        pending += [current.__cause__, context, *getattr(current, "exceptions", ())]


def _os_error_in(chain: list[BaseException]) -> tuple[int, str | None] | None:
    """(errno, path or None) of the first fault in an error's `chain`, by errno, then by text."""
    for current in chain:
        if isinstance(current, OSError) and current.errno in _FAULT_ERRNOS:
            return current.errno, current.filename and str(current.filename)
    for current in chain:
        text = str(current)
        for match in _ERRNO_TEXT.finditer(text):
            number = int(match.group(1) or match.group(2))
            if number in _FAULT_ERRNOS:
                return number, None
        if not type(current).__module__.startswith("fleet_goodput"):
            for wording, number in _STRERROR.items():
                if wording in text:
                    return number, None
    return None


def _path_in(error: BaseException, roots: list[str]) -> str | None:
    """The first path under one of `roots` that a message of `error`'s chain names."""
    for current in _chain(error):
        for root in roots:
            match = re.search(re.escape(root) + _PATH_REST, str(current))
            if match:
                return match.group(0)
    return None


def _absolute(roots: list[str | None]) -> list[str]:
    """The local folders among `roots`, absolute (as the libraries' messages name their files)."""
    return [str(Path(root).resolve()) for root in roots if root and "://" not in str(root)]


def _under(path: str, roots: list[str]) -> bool:
    resolved = Path(path).resolve()
    return any(resolved == Path(root) or Path(root) in resolved.parents for root in roots)


class _HideLoggedFaults(logging.Filter):
    """Drop a library's log record of an error that is a fault, traceback and all (Beam logs each
    failed step's): the command's one line says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or fault_of(error, [], []) is None


def hide_logged_faults() -> None:
    """Keep the libraries' tracebacks of faults off the console (fleet_goodput/console.py's handler)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(each, _HideLoggedFaults) for each in handler.filters):
            handler.addFilter(_HideLoggedFaults())
