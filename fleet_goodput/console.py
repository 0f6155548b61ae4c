"""How loud the `mpg` commands are: one meaning of -q, -v and -vv for every command.

    -q    errors, and each command's result line(s): the committed run, the
          validation verdict and its failures, the report's path, the answer
          of `mpg sql` and `mpg runs`, a submitted Dataflow job's id
    (default)  also progress on stderr (what a command is doing, with the
          time since it started) and summaries on stdout (counts, headline)
    -v    also the project's own detail (what each stage read and decided)
    -vv   also the INFO logs of the libraries underneath: Beam's stages,
          Dataflow's job messages, Great Expectations, urllib3

Without -vv those libraries log warnings at most (errors only, unless -v):
their messages are about themselves, not about the user's data, and Great
Expectations alone writes hundreds of lines a validation.

Whatever a command prints (results, progress, logs, an error that echoes a
path or a query) reaches the terminal through `printable_streams`: control
characters show as `\\xNN` (safe_text.py), so a team or a file name holding
a terminal escape sequence cannot clear the screen, hide a link or rewrite a
line. The one output meant to carry them, `mpg sql --csv-raw`, writes past it
(`unescaped`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

from fleet_goodput.safe_text import printable

QUIET, NORMAL, VERBOSE, LIBRARIES = -1, 0, 1, 2

VERBOSITY_HELP = """\
output: -q prints errors and the result line(s) only; by default progress goes
to stderr (with the seconds since the command started) and summaries to stdout;
-v adds this project's detail; -vv adds the INFO logs of Beam, Dataflow, Great
Expectations and other libraries (otherwise they log warnings at most)."""

_verbosity = NORMAL
_started = time.monotonic()


def configure(verbosity: int) -> None:
    """Set the level for the rest of the command (QUIET, NORMAL, VERBOSE or LIBRARIES and above)."""
    global _verbosity, _started
    _verbosity, _started = verbosity, time.monotonic()
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    libraries = logging.INFO if verbosity >= LIBRARIES else logging.WARNING if verbosity >= VERBOSE else logging.ERROR
    logging.getLogger().setLevel(libraries)
    logging.getLogger("fleet_goodput").setLevel(logging.INFO if verbosity >= VERBOSE else logging.WARNING)


def verbosity() -> int:
    return _verbosity


def say(*parts, file=None, **kwargs) -> None:
    """Print a summary line (stdout), unless -q."""
    if _verbosity > QUIET:
        print(*parts, file=file or sys.stdout, **kwargs)


def detail(*parts) -> None:
    """Print the project's detail (stdout), only with -v."""
    if _verbosity >= VERBOSE:
        print(*parts, flush=True)


def progress(line: str) -> None:
    """Tell what a command is doing now, on stderr with the seconds since it started, unless -q."""
    if _verbosity > QUIET:
        print(f"[{time.monotonic() - _started:6.1f} s] {line}", file=sys.stderr, flush=True)


class _PrintableStream:
    """A text stream that writes control characters (but newlines) visibly, as `\\xNN`."""

    def __init__(self, stream) -> None:
        self.unescaped = stream

    def write(self, text: str) -> int:
        self.unescaped.write(printable(text, keep_newlines=True))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self.unescaped, name)  # flush, isatty, fileno, encoding, ...


def unescaped(stream):
    """The stream under `printable_streams`' escaping, for an output whose control characters are meant."""
    return stream.unescaped if isinstance(stream, _PrintableStream) else stream


@contextlib.contextmanager
def printable_streams() -> Iterator[None]:
    """While inside, sys.stdout and sys.stderr show control characters instead of passing them to the terminal."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (
        stream if isinstance(stream, _PrintableStream) else _PrintableStream(stream) for stream in saved
    )
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
