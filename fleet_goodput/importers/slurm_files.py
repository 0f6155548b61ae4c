"""Slurm's text, read as streams and within bounds: its `--parsable2` files, its times, its number ranges.

What `sacct`, `sacctmgr -P` and `scontrol` print is read here, and nothing is
mapped: fleet_goodput/importers/slurm.py maps jobs, slurm_nodes.py the nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fleet_goodput.importers.common import SourceError, Unmappable
from fleet_goodput.importers.reading import MICROS, bounded_lines, event_time_us

# The folder `mpg import slurm` reads (docs/slurm.md says how to produce each file), and the fields asked for.
SACCT, EVENTS, NODES = "sacct.txt", "events.txt", "nodes.txt"
PREFIX = "slurm"  # of every event id made from them
REQUIRED = ("JobID", "State", "Submit", "Start", "End")
SACCT_FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,Account,QOS,Priority,State,ExitCode,Reason,Submit,Eligible,Start,"
    "End,Timelimit,ReqTRES,AllocTRES,NodeList,SubmitLine"
)
EVENT_FIELDS = "Cluster,NodeName,Start,End,State,Reason,User,Event,TRES"
NO_TIME = ("Unknown", "None", "")
# Bounds on what one row may make the import hold (docs/slurm.md, "Rows that are awkward"). A row (with the
# lines a SubmitLine carries on) longer than Linux's ARG_MAX, 2 MiB, holds no command line sbatch took.
MAX_ROW_BYTES = 4 << 20
_RANGES = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$", re.ASCII)
# A control character (NUL included): in a field a mapping reads, it rejects the row.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class TimeReader:
    """Slurm prints times in the client's zone without an offset (or as epoch seconds under
    SLURM_TIME_FORMAT=%s): read them in `zone` (UTC unless said), as µs since the epoch."""

    def __init__(self, zone: str | None):
        try:
            self.zone = ZoneInfo(zone) if zone else timezone.utc
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"--timezone {zone!r} is not a time zone name (e.g. UTC, Europe/Berlin)") from exc

    def __call__(self, text: str, what: str) -> int | None:
        """None for Unknown/None (not yet happened)."""
        text = text.strip()
        if text in NO_TIME:
            return None
        if text.isascii() and text.isdigit():
            # Past 20 digits it is past 2100 whatever it says, and int() of thousands of digits refuses.
            return event_time_us(int(text) if len(text) <= 20 else 10**20, what, MICROS)
        try:
            local = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
        except ValueError:
            raise Unmappable(f"{what} is not a time", repr(text[:80])) from None
        if not 1970 <= local.year < 2100:  # and so never past what a zone's offset moves a datetime to
            raise Unmappable(f"{what} is not a time from 1970 up to 2100", repr(text))
        moment = local.replace(tzinfo=self.zone)
        if self.zone is not timezone.utc:
            # A wall time that the zone skips (spring forward) does not come back from UTC unchanged.
            back = moment.astimezone(timezone.utc).astimezone(self.zone).replace(tzinfo=None)
            if back != local:
                raise Unmappable(
                    f"{what} does not exist in {self.zone} (skipped by a daylight-saving change)", repr(text)
                )
        return event_time_us(int(moment.timestamp()), what, MICROS)

    def ambiguous(self, text: str) -> bool:
        """A wall time the zone shows twice (fall back): read as its first occurrence."""
        if self.zone is timezone.utc or text.strip() in NO_TIME or text.strip().isdigit():
            return False
        local = datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S")
        return (
            local.replace(tzinfo=self.zone, fold=0).utcoffset() != local.replace(tzinfo=self.zone, fold=1).utcoffset()
        )


@dataclass
class Row:
    where: str  # line number(s) in the file
    fields: dict[str, str]
    undecodable: tuple[str, ...] = ()  # fields whose bytes were not UTF-8
    raw: bytes = b""  # the row as the file holds it (lines joined by \n)
    problem: str | None = None  # why it cannot be read at all (too long): fields and raw are then empty


def parsable_rows(path: Path, required: tuple[str, ...]) -> Iterator[Row]:
    """Rows of a `--parsable2` file (a header line, then `|`-separated rows), read as a stream.

    A row with fewer fields than the header continues on the next line (a
    SubmitLine with newlines in it); extra fields are put back into the last
    column when that is SubmitLine (a `|` in the command). Bytes that are not
    UTF-8 are kept as U+FFFD, and the row says in which fields. A row longer
    than MAX_ROW_BYTES is read past, never held, and given with its `problem`.
    The file's faults (empty, no header, a last line that does not end) raise
    SourceError, the last once the rows before it were given: a caller keeps
    nothing of a file that raises.
    """
    with open(path, "rb") as handle:
        lines = bounded_lines(handle, MAX_ROW_BYTES)
        number, first_line = next(lines, (0, b""))
        if first_line is None:
            raise SourceError(path, "line 1", f"a header longer than {MAX_ROW_BYTES >> 20} MiB")
        if not first_line:
            raise SourceError(path, None, "empty: expected a header line")
        header = first_line.rstrip(b"\n").decode("utf-8", "replace").rstrip("\r").split("|")
        missing = [name for name in required if name not in header]
        if missing:
            raise SourceError(
                path,
                "line 1",
                f"no {', '.join(missing)} column: produce it with -o {SACCT_FIELDS}"
                if path.name == SACCT
                else f"no {', '.join(missing)} column",
            )
        row, first, too_long, ended = None, 0, False, first_line.endswith(b"\n")  # row: the one being read
        for number, line in lines:
            ended = line is None or line.endswith(b"\n")  # only a file's last line may not end
            # A line carries on the row when it has fewer fields than the header; a line too long to hold,
            # when the row has fewer itself.
            if row is not None and (
                line.count(b"|") + 1 < len(header)
                if line is not None
                else not too_long and row.count(b"|") + 1 < len(header)
            ):
                if line is None or too_long or len(row) + len(line) > MAX_ROW_BYTES:
                    row, too_long = bytearray(), True  # read past the rest, holding none of it
                else:
                    row += b"\n" + line.rstrip(b"\n")
                continue
            if row is not None:
                yield _row(header, None if too_long else bytes(row), first, number - 1)
            row, first, too_long = bytearray(b"" if line is None else line.rstrip(b"\n")), number, line is None
        if not ended:  # sacct and sacctmgr end every line
            raise SourceError(path, f"line {number}", "the last line does not end: is the file truncated?")
        if row is not None:
            yield _row(header, None if too_long else bytes(row), first, number)


def _row(header: list[str], raw: bytes | None, first: int, last: int) -> Row:
    """The row of lines `first` to `last`; None for one too long to hold."""
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    if raw is None:
        return Row(where, {}, problem=f"a row longer than {MAX_ROW_BYTES >> 20} MiB")
    parts = raw.rstrip(b"\r").split(b"|")
    if len(parts) > len(header) and header[-1] == "SubmitLine":
        parts = parts[: len(header) - 1] + [b"|".join(parts[len(header) - 1 :])]
    fields, undecodable = {}, []
    for name, part in zip(header, parts):
        try:
            fields[name] = part.decode("utf-8")
        except UnicodeDecodeError:
            fields[name] = part.decode("utf-8", "replace")
            undecodable.append(name)
    if len(parts) != len(header):
        fields["__count__"] = str(len(parts))
    return Row(where, fields, tuple(undecodable), raw)


def number_ranges(text: str, largest: int, most: int, what: str) -> list[tuple[int, int]]:
    """`1-3,7` as [(1, 3), (7, 7)]: numbers up to `largest`, each range in order, `most` numbers in all
    (counted, not expanded); else Unmappable."""
    if not _RANGES.match(text):
        raise Unmappable(f"{what} range not understood", repr(text[:80]))
    ranges, count = [], 0
    for piece in text.split(","):
        low, _, high = piece.partition("-")
        low, high = whole_number(low), whole_number(high or low)
        if high > largest:
            raise Unmappable(f"{what} number past {largest:,}", repr(text[:80]))
        if low > high:
            raise Unmappable(f"{what} range not understood", f"{piece[:40]!r} runs backwards")
        ranges.append((low, high))
        count += high - low + 1
        if count > most:
            raise Unmappable(f"more than {most:,} {what}s in one row", repr(text[:80]))
    return ranges


def whole_number(digits: str) -> int:
    """An ASCII run of digits as an int; past 19 digits (more than any count here may be) 10**19, since
    int() refuses thousands of digits."""
    return int(digits) if len(digits) <= 19 else 10**19
